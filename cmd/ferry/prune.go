package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"filippo.io/age"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/migrate"
	"github.com/ferrykube/ferry/schedule"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/volumes"
	"github.com/ferrykube/ferry/storage"
	"github.com/ferrykube/ferry/storage/repo"
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// pruneReport is what ferry prune prints with -o json.
type pruneReport struct {
	Storage  string              `json:"storage"`
	Schedule string              `json:"schedule,omitempty"`
	DryRun   bool                `json:"dryRun"`
	Policy   string              `json:"policy"`
	Keep     []snapshot.Decision `json:"keep"`
	Remove   []snapshot.Decision `json:"remove"`
	// Deleted and Failed are what the removal did; empty on a dry run.
	Deleted []string          `json:"deleted"`
	Failed  map[string]string `json:"failed,omitempty"`
	// Chunks is what the prune of the chunk repository did, after the backups were removed.
	Chunks *repo.PruneResult `json:"chunks,omitempty"`
	// ChunksError is why the chunk repository was not pruned.
	ChunksError string `json:"chunksError,omitempty"`
}

// pruneOptions are ferry prune's.
type pruneOptions struct {
	global  *globalOptions
	streams genericiooptions.IOStreams
	policy  snapshot.Policy
	dryRun  bool
	output  *outputFlags
	// identities read the trees of encrypted chunked backups, and the keys of their repositories.
	identities []string
	ids        []age.Identity
}

func newPruneCommand(global *globalOptions, streams genericiooptions.IOStreams) *cobra.Command {
	o := &pruneOptions{global: global, streams: streams, output: newOutputFlags("json")}
	p := &o.policy
	cmd := &cobra.Command{
		Use:   "prune --keep-last N --keep-daily N ... [--schedule NAME] [--dry-run]",
		Short: "Remove the backups a retention policy does not keep, and stale incomplete ones",
		Long: `prune applies a retention policy in the spirit of restic's forget. Each --keep-* rule keeps the
newest complete backup of each of the last N hours, days, ISO weeks, months or years (in UTC) that
have one, --keep-last the N newest; -1 keeps every one. A backup kept by any rule is kept; the rest
are removed. Whatever the rules say, prune never removes the newest complete backup, a complete
backup that a migration run pinned (it uses it), a backup being written
(state running: a fresh heartbeat), or an incomplete backup written to within --grace. Every other
incomplete backup goes: one a killed ferry left (its claim without a manifest, whatever else is
there), one an interrupted delete left, and one a stopped migration run references (resumed, the
run makes it again). Backups Velero wrote are left to Velero. A backup whose manifest cannot be
read stops prune before it removes anything, naming it. With --schedule only that schedule's backups
are considered. The rules keep each source cluster's backups on their own (as restic's forget groups
by host): a copy of a schedule restored onto another cluster, writing into the same storage, does not
take the original's places. Each backup is listed with what keeps it or why it goes. Then the chunk
repositories lose the chunks no remaining backup uses; those of encrypted backups are found by
reading their trees, which needs --identity: without it, a storage that holds encrypted chunked
backups makes prune exit 2 before it removes anything.
Exit codes: 0 done, 2 bad flags, 3 some backups could not be removed (listed).`,
		Args: noArgs,
		RunE: runE(o),
	}
	f := cmd.Flags()
	f.IntVar(&p.Last, "keep-last", 0, "keep the N newest complete backups")
	f.IntVar(&p.Hourly, "keep-hourly", 0, "keep the newest backup of each of the last N hours that have one")
	f.IntVar(&p.Daily, "keep-daily", 0, "keep the newest backup of each of the last N days that have one")
	f.IntVar(&p.Weekly, "keep-weekly", 0, "keep the newest backup of each of the last N ISO weeks that have one")
	f.IntVar(&p.Monthly, "keep-monthly", 0, "keep the newest backup of each of the last N months that have one")
	f.IntVar(&p.Yearly, "keep-yearly", 0, "keep the newest backup of each of the last N years that have one")
	f.StringVar(&p.Schedule, "schedule", "", "consider only the backups of this schedule")
	f.DurationVar(&p.Grace, "grace", 24*time.Hour, "keep an incomplete backup this long after its last write: it may still be running")
	f.BoolVar(&o.dryRun, "dry-run", false, "show what would be kept and removed; remove nothing")
	f.StringSliceVar(&o.identities, "identity", nil, "age identity file: needed when the storage holds encrypted chunked backups, whose unused chunks prune removes too")
	o.output.addFlags(f, "json for machine-readable output")
	return cmd
}

func (o *pruneOptions) complete([]string) error {
	var err error
	if o.ids, err = snapshot.ParseIdentities(o.identities); err != nil {
		return flagged(err)
	}
	return nil
}

func (o *pruneOptions) validate() error {
	if err := o.output.validate(); err != nil {
		return err
	}
	p := o.policy
	if err := p.Check(); err != nil {
		return flagged(err)
	}
	if p.Empty() {
		return badinput.Errorf("no --keep-* flag: say what to keep (--keep-last -1 keeps every complete backup and removes only stale incomplete ones)")
	}
	if p.Schedule != "" {
		if err := schedule.CheckName(p.Schedule); err != nil {
			return badinput.Errorf("--schedule: %w", err)
		}
	}
	return nil
}

func (o *pruneOptions) run(ctx context.Context) error {
	p := o.policy
	store, err := storage.Open(ctx, o.global.storageURL)
	if err != nil {
		return err
	}
	now := time.Now()
	entries, err := snapshot.History(ctx, store, now)
	if err != nil {
		return fmt.Errorf("list backups in %s: %w", store, err)
	}
	// Runs pin the backups they use (entries' Runs); those of runs recorded before they did
	// are named by their run records.
	unpinned, err := migrate.UnpinnedBackups(ctx, store)
	if err != nil {
		return err
	}
	for i := range entries {
		for _, run := range unpinned[entries[i].Name] {
			if !slices.Contains(entries[i].Runs, run) {
				entries[i].Runs = append(entries[i].Runs, run)
			}
		}
		slices.Sort(entries[i].Runs)
	}
	if !o.dryRun && len(o.ids) == 0 {
		// Checked before anything is removed: the chunks of encrypted backups are found only
		// by reading their trees.
		repos, err := volumes.ChunkRepos(ctx, store)
		if err != nil {
			return err
		}
		for prefix, encrypted := range repos {
			if encrypted {
				return badinput.Errorf("the storage holds an encrypted chunk repository (%s): prune reads the kept backups' trees to find the chunks they use, which needs --identity", prefix)
			}
		}
	}
	rep := pruneReport{Storage: store.String(), Schedule: p.Schedule, DryRun: o.dryRun, Policy: describePolicy(p), Keep: []snapshot.Decision{},
		Remove: []snapshot.Decision{}, Deleted: []string{}}
	for _, d := range p.Apply(entries, now) {
		if d.Keep {
			rep.Keep = append(rep.Keep, d)
		} else {
			rep.Remove = append(rep.Remove, d)
		}
	}
	if !o.dryRun {
		for _, d := range rep.Remove {
			if _, err := snapshot.Delete(ctx, store, d.Name); err != nil {
				if rep.Failed == nil {
					rep.Failed = map[string]string{}
				}
				rep.Failed[d.Name] = err.Error()
				o.global.logger.Error("backup not removed", "backup", d.Name, "error", err)
				continue
			}
			rep.Deleted = append(rep.Deleted, d.Name)
		}
		// The chunks no remaining backup references go too; a backup that cannot be read stops it.
		if rep.Chunks, err = volumes.PruneChunks(ctx, store, o.ids); err != nil {
			rep.ChunksError = err.Error()
			o.global.logger.Error("chunk repository not pruned", "error", err)
		}
	}
	if done, err := o.output.print(o.streams.Out, rep); !done {
		printPrune(o.streams, rep)
	} else if err != nil {
		return err
	}
	if rep.ChunksError != "" {
		return fmt.Errorf("prune: the chunk repository: %s", rep.ChunksError)
	}
	if len(rep.Failed) > 0 {
		return &incompleteError{msg: fmt.Sprintf("prune: %d of %d backups could not be removed", len(rep.Failed), len(rep.Remove))}
	}
	return nil
}

func describePolicy(p snapshot.Policy) string {
	var parts []string
	for _, r := range []struct {
		name string
		n    int
	}{{"last", p.Last}, {"hourly", p.Hourly}, {"daily", p.Daily}, {"weekly", p.Weekly}, {"monthly", p.Monthly}, {"yearly", p.Yearly}} {
		switch {
		case r.n < 0:
			parts = append(parts, r.name+" all")
		case r.n > 0:
			parts = append(parts, fmt.Sprintf("%s %d", r.name, r.n))
		}
	}
	return "keep " + strings.Join(parts, ", ") + " of each cluster's backups; incomplete backups go " + p.Grace.String() + " after their last write"
}

func printPrune(streams genericiooptions.IOStreams, rep pruneReport) {
	w := tabwriter.NewWriter(streams.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "Storage:\t%s\n", rep.Storage)
	if rep.Schedule != "" {
		fmt.Fprintf(w, "Schedule:\t%s\n", rep.Schedule)
	}
	fmt.Fprintf(w, "Policy:\t%s\n\n", rep.Policy)
	// The rules keep each cluster's backups on their own: its kube-system UID's start tells them apart.
	fmt.Fprintf(w, "ACTION\tBACKUP\tSTATE\tCLUSTER\tSTARTED\tWHY\n")
	row := func(action string, d snapshot.Decision) {
		started := "-"
		if !d.Time.IsZero() {
			started = d.Time.UTC().Format(time.RFC3339)
		}
		cluster := d.Cluster[:min(len(d.Cluster), 8)]
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", action, d.Name, d.State, cmp.Or(cluster, "-"), started, strings.Join(d.Reasons, ", "))
	}
	for _, d := range rep.Keep {
		row("keep", d)
	}
	removed := "remove"
	if rep.DryRun {
		removed = "would remove"
	}
	for _, d := range rep.Remove {
		action := removed
		if _, failed := rep.Failed[d.Name]; failed {
			action = "NOT REMOVED"
		}
		row(action, d)
	}
	w.Flush()
	switch {
	case rep.DryRun:
		fmt.Fprintf(streams.Out, "\nDry run: %d kept, %d would be removed; nothing was deleted.\n", len(rep.Keep), len(rep.Remove))
	default:
		fmt.Fprintf(streams.Out, "\n%d kept, %d removed.\n", len(rep.Keep), len(rep.Deleted))
		for name, err := range rep.Failed {
			fmt.Fprintf(streams.Out, "  %s NOT removed: %s\n", name, err)
		}
		if c := rep.Chunks; c != nil {
			fmt.Fprintf(streams.Out, "Chunk repository: %d packs, %d chunks kept, %d packs deleted (%d bytes), %d repacked, %d condemned, %d waiting for a running backup.\n",
				c.Packs, c.KeptChunks, c.Deleted, c.DeletedBytes, c.Repacked, c.Condemned, c.Waiting)
		}
		if rep.ChunksError != "" {
			fmt.Fprintf(streams.Out, "Chunk repository NOT pruned: %s\n", rep.ChunksError)
		}
	}
}
