package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ferrykube/ferry/internal/human"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

func newBackupsCommand(global *globalOptions, streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backups",
		Short: "List, describe and delete the backups in storage",
		Args:  noArgs,
		RunE:  func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	list := &backupsListOptions{global: global, streams: streams, output: newOutputFlags("json")}
	listCmd := &cobra.Command{
		Use:   "list",
		Short: "List backups: complete, running, incomplete (never restorable) or velero (written by Velero)",
		Args:  noArgs,
		RunE:  runE(list),
	}
	list.output.addFlags(listCmd.Flags(), "json for machine-readable output")
	describe := &backupsDescribeOptions{global: global, streams: streams, output: newOutputFlags("json", "yaml")}
	describeCmd := &cobra.Command{
		Use:   "describe NAME",
		Short: "Show what a backup holds: objects by kind, volumes, databases, buckets, sizes, what it skipped",
		Args:  oneArg("backups describe", "backup name", ""),
		RunE:  runE(describe),
	}
	describe.output.addFlags(describeCmd.Flags(), "json or yaml for machine-readable output")
	del := &backupsDeleteOptions{global: global, streams: streams}
	delCmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete one backup completely, complete or not",
		Args:  oneArg("backups delete", "backup name", ""),
		RunE:  runE(del),
	}
	cmd.AddCommand(listCmd, describeCmd, delCmd)
	return cmd
}

// backupsListOptions are ferry backups list's.
type backupsListOptions struct {
	global  *globalOptions
	streams genericiooptions.IOStreams
	output  *outputFlags
}

func (o *backupsListOptions) complete([]string) error { return nil }

func (o *backupsListOptions) validate() error { return o.output.validate() }

func (o *backupsListOptions) run(ctx context.Context) error {
	store, err := storage.Open(ctx, o.global.storageURL)
	if err != nil {
		return err
	}
	// A backup whose manifest cannot be read is listed as unreadable, and fails the listing
	// after every backup is shown.
	infos, listErr := snapshot.List(ctx, store)
	if listErr != nil && len(infos) == 0 {
		return listErr
	}
	if done, err := o.output.print(o.streams.Out, infos); done {
		if err == nil {
			err = listErr
		}
		return err
	}
	w := tabwriter.NewWriter(o.streams.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "NAME\tSTATE\tFILES\tSIZE\tCOMPLETED\n")
	for _, i := range infos {
		completed := "-"
		if !i.CompletedAt.IsZero() {
			completed = i.CompletedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", i.Name, i.State, i.Files, human.Bytes(i.Bytes), completed)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return listErr
}

// backupsDescribeOptions are ferry backups describe's.
type backupsDescribeOptions struct {
	global  *globalOptions
	streams genericiooptions.IOStreams
	output  *outputFlags
	name    string
}

func (o *backupsDescribeOptions) complete(args []string) error { o.name = args[0]; return nil }

func (o *backupsDescribeOptions) validate() error { return o.output.validate() }

func (o *backupsDescribeOptions) run(ctx context.Context) error {
	store, err := storage.Open(ctx, o.global.storageURL)
	if err != nil {
		return err
	}
	d, err := snapshot.Describe(ctx, store, o.name, time.Now())
	if err != nil {
		return err
	}
	return printDescription(o.streams.Out, store.String(), d, o.output.format)
}

// backupsDeleteOptions are ferry backups delete's.
type backupsDeleteOptions struct {
	global  *globalOptions
	streams genericiooptions.IOStreams
	name    string
}

func (o *backupsDeleteOptions) complete(args []string) error { o.name = args[0]; return nil }

func (o *backupsDeleteOptions) validate() error { return nil }

func (o *backupsDeleteOptions) run(ctx context.Context) error {
	store, err := storage.Open(ctx, o.global.storageURL)
	if err != nil {
		return err
	}
	n, err := snapshot.Delete(ctx, store, o.name)
	if err != nil {
		return fmt.Errorf("delete backup %s (%d files removed): %w", o.name, n, err)
	}
	_, err = fmt.Fprintf(o.streams.Out, "Deleted backup %s (%d files).\n", o.name, n)
	return err
}

// printDescription prints a backup's description as JSON, YAML or a report for people.
func printDescription(out io.Writer, location string, d *snapshot.Description, format string) error {
	if done, err := (&outputFlags{format: format}).print(out, d); done {
		return err
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "Name:\t%s\n", d.Name)
	fmt.Fprintf(w, "Storage:\t%s\n", location)
	fmt.Fprintf(w, "State:\t%s\n", d.State)
	switch {
	case d.Summary != nil:
		writeSummary(w, d)
	case d.Velero != nil:
		writeVelero(w, d)
	default:
		writeIncomplete(w, d)
	}
	return w.Flush()
}

// writeProtection lists what is encrypted and what stays readable, one item a line.
func writeProtection(w io.Writer, p snapshot.Protection) {
	for _, part := range []struct {
		title string
		items []string
	}{{"Encrypted", p.Encrypted}, {"In plain text", p.Plaintext}} {
		for i, item := range part.items {
			title := ""
			if i == 0 {
				title = part.title + ":"
			}
			fmt.Fprintf(w, "%s\t%s\n", title, item)
		}
	}
}

func writeSummary(w *tabwriter.Writer, d *snapshot.Description) {
	s := d.Summary
	source := s.Source.Server
	if s.Source.Context != "" {
		source = s.Source.Context + " (" + s.Source.Server + ")"
	}
	if s.Source.Version != "" {
		source += ", Kubernetes " + s.Source.Version
	}
	fmt.Fprintf(w, "Source cluster:\t%s\n", source)
	if s.Source.UID != "" {
		fmt.Fprintf(w, "Source cluster UID:\t%s\n", s.Source.UID)
	}
	fmt.Fprintf(w, "Started:\t%s\n", s.StartedAt.UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "Completed:\t%s\n", s.CompletedAt.UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "Duration:\t%s\n", time.Duration(s.DurationSeconds*float64(time.Second)).Round(time.Millisecond))
	tool := "ferry " + s.Tool.Version
	if s.Tool.Commit != "" {
		tool += " (commit " + s.Tool.Commit
		if s.Tool.Modified {
			tool += ", modified"
		}
		tool += ")"
	}
	fmt.Fprintf(w, "Written by:\t%s\n", tool)
	if s.Encryption != nil {
		fmt.Fprintf(w, "Encryption:\t%s, to %s\n", s.Encryption.Format, strings.Join(s.Encryption.Recipients, ", "))
	} else {
		fmt.Fprintf(w, "Encryption:\tnone\n")
	}
	writeProtection(w, s.Protection)
	switch {
	case s.VeleroCompatible:
		fmt.Fprintf(w, "Velero-compatible:\tyes (velero-backup.json and the Velero archive are written)\n")
	case s.Encryption != nil:
		fmt.Fprintf(w, "Velero-compatible:\tno (Velero cannot read encrypted archives)\n")
	default:
		fmt.Fprintf(w, "Velero-compatible:\tno\n")
	}
	fmt.Fprintf(w, "Stored:\t%s in %s\n", human.Bytes(s.StoredBytes), countFiles(d.Files))

	fmt.Fprintf(w, "\nOBJECTS  %d (%s as JSON)\n", s.Objects, human.Bytes(s.ObjectBytes))
	if len(s.Kinds) > 0 {
		fmt.Fprintf(w, "  GROUP\tKIND\tCOUNT\n")
		for _, k := range s.Kinds {
			group := k.Group
			if group == "" {
				group = "(core)"
			}
			fmt.Fprintf(w, "  %s\t%s\t%d\n", group, k.Kind, k.Count)
		}
	}
	fmt.Fprintf(w, "\nVOLUMES  %d\n", len(s.Volumes))
	if len(s.Volumes) > 0 {
		fmt.Fprintf(w, "  CLAIM\tFILES\tSIZE\tSTORED\tNEW PACKS\n")
		for _, v := range s.Volumes {
			// A chunked volume stores a tree and a file list, and its data as chunks in packs
			// shared with other backups: the packs it added are what it cost.
			packs := "-"
			if v.Format == snapshot.FormatChunks {
				packs = human.Bytes(v.NewPackBytes)
			}
			fmt.Fprintf(w, "  %s/%s\t%d\t%s\t%s\t%s\n", v.Namespace, v.Name, v.Files, human.Bytes(v.Bytes), human.Bytes(v.StoredBytes), packs)
		}
	}
	fmt.Fprintf(w, "\nDATABASES  %d\n", len(s.Databases))
	if len(s.Databases) > 0 {
		fmt.Fprintf(w, "  NAME\tENGINE\tSCHEMAS\tTABLES\tROWS\tDUMP\tSTORED\n")
		for _, db := range s.Databases {
			fmt.Fprintf(w, "  %s\t%s\t%d\t%d\t%d\t%s\t%s\n", db.Name, db.Engine, db.Schemas, db.Tables, db.Rows, human.Bytes(db.DumpBytes), human.Bytes(db.StoredBytes))
		}
	}
	fmt.Fprintf(w, "\nBUCKETS  %d\n", len(s.Buckets))
	if len(s.Buckets) > 0 {
		fmt.Fprintf(w, "  NAME\tOBJECTS\tSIZE\tSTORED\tUNCHANGED SINCE\n")
		for _, b := range s.Buckets {
			since := "-"
			if b.Reused > 0 {
				since = fmt.Sprintf("%d objects, %s (copied in the storage)", b.Reused, b.ReusedFrom)
			}
			fmt.Fprintf(w, "  %s\t%d\t%s\t%s\t%s\n", b.Name, b.Objects, human.Bytes(b.Bytes), human.Bytes(b.StoredBytes), since)
		}
	}
	if len(s.NoData) > 0 {
		fmt.Fprintf(w, "\nNOTHING TO COPY  %d (no data, not a loss)\n", len(s.NoData))
		for _, n := range s.NoData {
			fmt.Fprintf(w, "  %s %s: %s\n", n.Kind, n.Name, n.Reason)
		}
	}
	if len(s.Skipped) == 0 {
		fmt.Fprintf(w, "\nNOT IN THIS BACKUP  nothing: every item the plan named was backed up\n")
		return
	}
	fmt.Fprintf(w, "\nNOT IN THIS BACKUP  %d\n", len(s.Skipped))
	for _, sk := range s.Skipped {
		fmt.Fprintf(w, "  %s %s: %s\n", sk.Kind, sk.Name, sk.Reason)
	}
}

func writeVelero(w *tabwriter.Writer, d *snapshot.Description) {
	v := d.Velero
	fmt.Fprintf(w, "Written by:\tVelero (no ferry manifest: objects only, with no digests to verify them by)\n")
	fmt.Fprintf(w, "Phase:\t%s\n", v.Phase)
	if v.FailureReason != "" {
		fmt.Fprintf(w, "Failure reason:\t%s\n", v.FailureReason)
	}
	if v.FormatVersion != "" {
		fmt.Fprintf(w, "Format version:\t%s\n", v.FormatVersion)
	}
	for _, t := range []struct {
		label string
		at    time.Time
	}{{"Started", v.StartedAt}, {"Completed", v.CompletedAt}, {"Expires", v.Expiration}} {
		if !t.at.IsZero() {
			fmt.Fprintf(w, "%s:\t%s\n", t.label, t.at.UTC().Format(time.RFC3339))
		}
	}
	if !v.StartedAt.IsZero() && v.CompletedAt.After(v.StartedAt) {
		fmt.Fprintf(w, "Duration:\t%s\n", v.CompletedAt.Sub(v.StartedAt))
	}
	fmt.Fprintf(w, "Items:\t%d of %d backed up\n", v.ItemsBackedUp, v.TotalItems)
	fmt.Fprintf(w, "Errors, warnings:\t%d, %d\n", v.Errors, v.Warnings)
	if len(v.IncludedNamespaces) > 0 {
		fmt.Fprintf(w, "Namespaces:\t%s\n", strings.Join(v.IncludedNamespaces, ", "))
	}
	if len(v.ExcludedNamespaces) > 0 {
		fmt.Fprintf(w, "Excluded namespaces:\t%s\n", strings.Join(v.ExcludedNamespaces, ", "))
	}
	if v.StorageLocation != "" {
		fmt.Fprintf(w, "Storage location:\t%s\n", v.StorageLocation)
	}
	fmt.Fprintf(w, "Stored:\t%s in %s\n", human.Bytes(d.Bytes), countFiles(d.Files))
	if len(d.VeleroVolumes) == 0 {
		fmt.Fprintf(w, "\nVOLUME DATA  none: no pod volume backups or snapshots\n")
		return
	}
	fmt.Fprintf(w, "\nVOLUME DATA ferry does not restore  %d\n", len(d.VeleroVolumes))
	for _, v := range d.VeleroVolumes {
		fmt.Fprintf(w, "  %s: %s\n", v.Name, v.Reason)
	}
}

func writeIncomplete(w *tabwriter.Writer, d *snapshot.Description) {
	fmt.Fprintf(w, "Stored:\t%s in %s\n", human.Bytes(d.Bytes), countFiles(d.Files))
	if !d.ClaimedAt.IsZero() {
		fmt.Fprintf(w, "Started:\t%s\n", d.ClaimedAt.UTC().Format(time.RFC3339))
	}
	switch d.Run {
	case snapshot.RunLive:
		fmt.Fprintf(w, "Running:\tyes, its heartbeat was stored at %s: wait for it to finish\n", d.LastBeat.UTC().Format(time.RFC3339))
	case snapshot.RunDead:
		fmt.Fprintf(w, "Running:\tno, the ferry that wrote it stopped before the end\n")
	}
	if d.State == snapshot.Running {
		fmt.Fprintf(w, "\nBackup %s is still being written: it has no %s yet, which is written last.\n", d.Name, snapshot.ManifestFile)
		return
	}
	fmt.Fprintf(w, "\nBackup %s is incomplete: it has no %s, which is written last, so it cannot be restored.\n", d.Name, snapshot.ManifestFile)
	if d.Run != snapshot.RunLive {
		fmt.Fprintf(w, "`ferry backups delete %s` removes it.\n", d.Name)
	}
}

func countFiles(n int) string {
	if n == 1 {
		return "1 file"
	}
	return fmt.Sprintf("%d files", n)
}
