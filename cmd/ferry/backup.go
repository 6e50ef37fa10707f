package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/internal/human"
	"github.com/ferrykube/ferry/internal/progress"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/schedule"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/kinds"
	"github.com/ferrykube/ferry/storage"
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

type backupOptions struct {
	global  *globalOptions
	streams genericiooptions.IOStreams

	from, planFile, configFile, preset, name string
	selection                                selectionFlags
	encryptTo                                []string
	parallel                                 parallelFlag
	movers                                   moverFlags
	schedule                                 string
	volumeFormat                             string

	// Set by complete: the plan from --plan, else the configuration to plan with.
	plan   *plans.Plan
	config config.Config
}

func newBackupCommand(global *globalOptions, streams genericiooptions.IOStreams) *cobra.Command {
	return (&backupOptions{global: global, streams: streams}).command()
}

// command binds o to the flags of a new ferry backup command.
func (o *backupOptions) command() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backup --from CONTEXT [--plan plan.yaml | -f ferry.yaml | --preset P] [--name N]",
		Short: "Snapshot a cluster into storage as a Velero-compatible backup",
		Long: `backup writes every object the plan moves into storage as a valid Velero backup, with ferry's
manifest (each object's normalized SHA-256) written last: a backup without it is incomplete.
MySQL/MariaDB and PostgreSQL databases are dumped in their pods (mysqldump --single-transaction,
pg_dump) with per-table row counts and checksums; the platform's buckets are copied through a
port-forward to their MinIO pod (or a direct endpoint) with each object's SHA-256; each bound
claim's files are read by a mover pod (ferry mover pack) and stored, with every file's SHA-256, in
the storage's chunk repository (only the files changed since the claim's last backup are read; by
default when the backup is not encrypted and goes through exec) or as a compressed tar (with
--encrypt-to, --mover-direct or --volume-format tar). A bucket's objects that did not change since
the last backup of the same store are copied in the storage, not read again. A stream the API
server drops is run again. Databases without a running pod and claims whose volume is lost are listed as skipped and
the exit code is 3; a claim that never had a volume holds no data and is listed under NOTHING TO COPY. Planning now, the selection flags
(--include-namespaces, --exclude-namespaces, --include-resources, --exclude-resources, -l) narrow
what moves as they do for ferry plan, over ferry.yaml's include and exclude; the databases and buckets of
namespaces they leave out are not backed up (ferry plan lists them as not moved), as a restore by the same
flags leaves them.

` + fmt.Sprintf(`While it runs, a backup rewrites its %s every %s. A backup whose ferry was
killed stays incomplete (ferry backups delete removes it); the next ferry backup into the same
storage deletes the mover pods it left once its heartbeat is %s old.`,
			snapshot.HeartbeatFile, snapshot.HeartbeatInterval, snapshot.StaleBeats*snapshot.HeartbeatInterval),
		Args: noArgs,
		RunE: runE(o),
	}
	f := cmd.Flags()
	f.StringVar(&o.from, "from", "", "kubeconfig context of the cluster to back up (default: the current context)")
	f.StringVar(&o.planFile, "plan", "", "a plan written by ferry plan -o FILE (default: plan now)")
	f.StringVarP(&o.configFile, "config", "f", "", "ferry.yaml, when planning now")
	f.StringVar(&o.preset, "preset", "", "embedded platform preset, when planning now: "+strings.Join(config.Presets(), ", "))
	f.StringVar(&o.name, "name", "", "backup name (default ferry-YYYYMMDD-HHMMSS)")
	o.selection.addFlags(f)
	o.parallel.addFlags(f, 8, "resource types listed and bucket objects copied at once")
	o.movers.addFlags(f, "mover pods upload volumes to the S3 storage themselves, through part URLs ferry presigns for them (valid 15 minutes; no credentials), so data moves from many nodes at once")
	f.StringVar(&o.volumeFormat, "volume-format", "", "how volumes are stored: chunks (the chunk repository: deduplicated, and only files changed since the claim's previous backup are read; the default through exec when not encrypted) or tar (one compressed tar stream per claim, in full; what --mover-direct writes, and the default with --encrypt-to)")
	f.StringSliceVar(&o.encryptTo, "encrypt-to", nil, "age recipients (age1...): encrypt every file of the backup to them; the Velero-compatible copy is then not written")
	// Set by the CronJob of ferry schedule: recorded in the manifest, it names the backup by default.
	f.StringVar(&o.schedule, "schedule", "", "the schedule making this backup (default name SCHEDULE-YYYYMMDD-HHMMSS)")
	f.MarkHidden("schedule")
	return cmd
}

// complete reads the plan file, or ferry.yaml and the preset with the flags' selection over them.
func (o *backupOptions) complete([]string) error {
	if o.planFile != "" {
		if o.configFile != "" || o.preset != "" || o.selection.isSet() {
			return badinput.Errorf("--plan already holds the configuration: drop -f/--preset and the selection flags")
		}
		var err error
		o.plan, err = plans.ReadFile(o.planFile)
		return err
	}
	cfg, err := loadConfig(o.configFile, o.preset)
	if err != nil {
		return err
	}
	o.config = cfg.Merge(o.selection.config())
	return nil
}

func (o *backupOptions) validate() error {
	if o.plan == nil {
		if err := o.config.Validate(); err != nil {
			return badinput.Errorf("flags: %w", err)
		}
	}
	if err := o.parallel.validate(); err != nil {
		return err
	}
	if _, err := snapshot.ParseRecipients(o.encryptTo); err != nil {
		return flagged(err)
	}
	if _, err := snapshot.ChunkedVolumes(o.volumeFormat, o.movers.direct, len(o.encryptTo) > 0); err != nil {
		return flagged(err)
	}
	if o.schedule != "" {
		if err := schedule.CheckName(o.schedule); err != nil {
			return err
		}
	}
	if o.name != "" {
		return snapshot.CheckName(o.name)
	}
	return nil
}

func (o *backupOptions) run(ctx context.Context) error {
	store, err := storage.Open(ctx, o.global.storageURL)
	if err != nil {
		return err
	}
	direct, err := o.movers.presigner(store)
	if err != nil {
		return err
	}
	restConfig, err := o.global.restConfig(o.from)
	if err != nil {
		return badinput.Wrap(err)
	}
	source, err := kinds.NewCluster(restConfig)
	if err != nil {
		return err
	}
	plan := o.plan
	if plan == nil {
		data, err := o.selection.dataFilter()
		if err != nil {
			return err
		}
		if plan, err = plans.Inventory(ctx, source.Plans(), plans.Options{Config: o.config.Planning, Context: o.from, Concurrency: o.parallel.n, Data: data, Log: o.global.logger}); err != nil {
			return fmt.Errorf("plan %s: %w", orCurrent(o.from), err)
		}
	}
	quotas, err := plans.QuotaCheck{Dynamic: source.Dynamic, Cluster: "source", Mover: plan.Config.Mover}.Check(ctx, plans.Movers(plan.FileClaims(nil), o.parallel.n))
	if err != nil {
		return err
	}
	if err := refuseBlocking(o.streams.Out, "backup", quotas); err != nil {
		return err
	}
	started := time.Now()
	name := o.name
	if name == "" {
		name = "ferry-" + started.UTC().Format("20060102-150405")
		if o.schedule != "" {
			name = snapshot.ScheduledName(o.schedule, started)
		}
	}
	o.global.logger.Info("backing up", "backup", name, "storage", store.String(), "resourceTypes", len(plan.Resources))
	meter := progress.Start(progress.Options{Mode: progress.ModeFor(o.global.progress, o.global.showProgress), Out: o.streams.ErrOut,
		Log: o.global.logger, Task: "backup " + name, Objects: plan.Estimate.Objects})
	o.global.logger = meter.Logger(o.global.logger, o.global.logFormat) // above the bar, not across it
	// Checked by validate.
	chunks, _ := snapshot.ChunkedVolumes(o.volumeFormat, o.movers.direct, len(o.encryptTo) > 0)
	manifest, err := kinds.Backup(ctx, store, source, kinds.BackupOptions{Name: name, Plan: plan, EncryptTo: o.encryptTo, Schedule: o.schedule,
		Parallel: o.parallel.n, MoverImage: o.movers.image, Direct: direct, Chunks: chunks, Progress: meter, Log: o.global.logger})
	meter.Stop()
	if errors.Is(err, snapshot.ErrExists) {
		return badinput.Wrap(err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(o.streams.Out, "Backup %s is complete in %s: %d objects (%s as JSON), %d databases, %d buckets, %s stored, in %s.\n",
		name, store, manifest.Totals.Objects, human.Bytes(manifest.Totals.ObjectBytes), len(manifest.Databases), len(manifest.Buckets),
		human.Bytes(manifest.Totals.StoredBytes), manifest.CompletedAt.Sub(manifest.StartedAt).Round(time.Millisecond))
	if manifest.Encryption != nil {
		fmt.Fprintf(o.streams.Out, "Every file but the manifest is encrypted with age to %d recipients; the Velero-compatible copy was not written (Velero cannot read it).\n",
			len(manifest.Encryption.Recipients))
	}
	if len(manifest.NoData) > 0 {
		fmt.Fprintf(o.streams.Out, "\nNOTHING TO COPY (no data, not a loss)\n")
		for _, s := range manifest.NoData {
			fmt.Fprintf(o.streams.Out, "  %s %s: %s\n", s.Kind, s.Name, s.Reason)
		}
	}
	if len(manifest.Skipped) > 0 {
		fmt.Fprintf(o.streams.Out, "\nNOT IN THIS BACKUP\n")
		for _, s := range manifest.Skipped {
			fmt.Fprintf(o.streams.Out, "  %s %s: %s\n", s.Kind, s.Name, s.Reason)
		}
		return &incompleteError{msg: fmt.Sprintf("backup %s holds the objects but skipped %d items", name, len(manifest.Skipped))}
	}
	return nil
}

// refuseBlocking prints the blocking preflight findings, if any, and returns the error that
// stops the command (exit 3) before anything runs.
func refuseBlocking(out io.Writer, command string, findings []plans.Finding) error {
	var blocking []plans.Finding
	for _, f := range findings {
		if f.Severity == plans.Blocking {
			blocking = append(blocking, f)
		}
	}
	if len(blocking) == 0 {
		return nil
	}
	fmt.Fprintf(out, "BLOCKING\n")
	for _, f := range blocking {
		fmt.Fprintf(out, "  %s: %s\n", f.Subject, f.Message)
	}
	return &incompleteError{msg: fmt.Sprintf("%s not started: %d blocking findings; the first: %s: %s", command, len(blocking), blocking[0].Subject, blocking[0].Message)}
}
