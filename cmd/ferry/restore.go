package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"filippo.io/age"
	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/kinds"
	"github.com/ferrykube/ferry/snapshot/resources"
	"github.com/ferrykube/ferry/storage"
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// targetOptions are what restore and verify share: the backup, the target and the mapping.
type targetOptions struct {
	global  *globalOptions
	streams genericiooptions.IOStreams
	command string // restore or verify

	to, backup  string
	identities  []string
	mapping     mappingFlags
	selection   selectionFlags
	skipOwned   bool
	parallel    parallelFlag
	movers      moverFlags
	output      *outputFlags
	existing    string // restore only
	upgrade     bool
	waitTimeout time.Duration
	dataTargets string // a ferry.yaml whose target sections replace the backup's

	// Set by complete.
	ids         []age.Identity
	flagMapping snapshot.Mapping
	filter      *plans.Filter
	targets     *config.Planning // dataTargets' databases and buckets
}

func newTargetOptions(global *globalOptions, streams genericiooptions.IOStreams, command string) *targetOptions {
	return &targetOptions{global: global, streams: streams, command: command, output: newOutputFlags("json", "yaml")}
}

func (o *targetOptions) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.to, "to", "", "kubeconfig context of the target cluster (default: the current context)")
	f.StringVar(&o.backup, "backup", "", "name of the backup (see ferry backups list); latest is the newest complete one, latest:SCHEDULE that of a schedule")
	f.StringSliceVar(&o.identities, "identity", nil, "age identity file (AGE-SECRET-KEY-1...) of an encrypted backup")
	o.mapping.addFlags(f)
	o.selection.addFlags(f)
	f.BoolVar(&o.skipOwned, "skip-owned", false, "leave objects with a controlling owner (a ReplicaSet's pods, say) to the target's controllers")
	o.parallel.addFlags(f, 8, "volumes, bucket objects and (×4) objects handled at once")
	o.movers.addFlags(f, "mover pods read volumes from the S3 storage themselves, through a URL ferry presigns for each (valid 15 minutes; no credentials); ferry decrypts an encrypted backup's volumes itself")
	f.DurationVar(&o.waitTimeout, "wait-timeout", 2*time.Minute, "how long to wait for CRDs to be Established and workloads to become healthy")
	o.output.addFlags(f, "json or yaml for a machine-readable report")
	f.StringVar(&o.dataTargets, "data-targets", "", "ferry.yaml whose databases' and buckets' target sections say where this target keeps them, in place of the backup's (a backup made before the target kept them elsewhere)")
	f.BoolVar(&o.upgrade, "upgrade", false, "the backup was made by ferry migrate --upgrade and the target runs the platform's new release: only the state is restored or verified, what the release provides is left as it is")
}

// complete reads the identity files and the flags' mapping and selection.
func (o *targetOptions) complete([]string) error {
	var err error
	if o.ids, err = snapshot.ParseIdentities(o.identities); err != nil {
		return flagged(err)
	}
	if o.flagMapping, err = o.mapping.mapping(); err != nil {
		return err
	}
	if o.selection.isSet() {
		if o.filter, err = plans.NewBackupFilter(o.selection.config().Planning); err != nil {
			return badinput.Wrap(err)
		}
	}
	if o.dataTargets != "" {
		cfg, err := config.LoadConfig(o.dataTargets, "")
		if err != nil {
			return err
		}
		o.targets = &cfg.Planning
	}
	return nil
}

func (o *targetOptions) validate() error {
	if o.backup == "" {
		return badinput.Errorf("ferry %s needs --backup NAME (see ferry backups list)", o.command)
	}
	if !snapshot.IsLatestRef(o.backup) {
		if err := snapshot.CheckName(o.backup); err != nil {
			return err
		}
	}
	if err := o.parallel.validate(); err != nil {
		return err
	}
	if err := o.output.validate(); err != nil {
		return err
	}
	if o.command == kinds.Restore {
		switch o.existing {
		case resources.ExistingSkip, resources.ExistingUpdate, resources.ExistingReplace, resources.ExistingFail:
		default:
			return badinput.Errorf("--existing %q: want skip, update, replace or fail", o.existing)
		}
	}
	return nil
}

// open opens the backup (resolving latest) and builds the kinds that restore and verify it on the
// target, in order, with the mapping they use: the backup's ferry.yaml's with the flags' over it.
func (o *targetOptions) open(ctx context.Context) (*snapshot.Reader, snapshot.Mapping, []snapshot.Restorer, error) {
	store, err := storage.Open(ctx, o.global.storageURL)
	if err != nil {
		return nil, snapshot.Mapping{}, nil, err
	}
	direct, err := o.movers.presigner(store)
	if err != nil {
		return nil, snapshot.Mapping{}, nil, err
	}
	if snapshot.IsLatestRef(o.backup) {
		name, err := snapshot.Resolve(ctx, store, o.backup)
		if err != nil {
			return nil, snapshot.Mapping{}, nil, err
		}
		o.global.logger.Info("resolved the backup", "backup", o.backup, "name", name)
		o.backup = name
	}
	r, err := snapshot.Open(ctx, store, o.backup, o.ids)
	if err != nil {
		return nil, snapshot.Mapping{}, nil, err
	}
	if o.upgrade && (r.Manifest.Plan == nil || r.Manifest.Plan.Upgrade == nil) {
		return nil, snapshot.Mapping{}, nil, badinput.Errorf("--upgrade: backup %s was not made for an upgrade (ferry migrate --upgrade)", o.backup)
	}
	if o.targets != nil {
		if r.Manifest.Plan == nil {
			return nil, snapshot.Mapping{}, nil, badinput.Errorf("--data-targets: backup %s holds no databases or buckets of ferry's", o.backup)
		}
		plan := *r.Manifest.Plan
		if plan.Config, err = plan.Config.WithTargetsOf(*o.targets); err != nil {
			return nil, snapshot.Mapping{}, nil, badinput.Errorf("--data-targets %s: %w", o.dataTargets, err)
		}
		r.Manifest.Plan = &plan
	}
	mapping := kinds.EffectiveMapping(r, o.flagMapping)
	if err := checkMapping(mapping); err != nil {
		return nil, snapshot.Mapping{}, nil, badinput.Errorf("backup %s's ferry.yaml with the flags: %w", o.backup, err)
	}
	dataFilter := o.filter
	if r.Velero {
		// Velero's backups hold the volume data of kube-system's pods too, which a restore leaves
		// with their objects unless the selection names it (plans.Filter.DataReason).
		if dataFilter, err = plans.NewFilter(o.selection.config().Planning); err != nil {
			return nil, snapshot.Mapping{}, nil, badinput.Wrap(err)
		}
	}
	r = kinds.Selected(r, dataFilter)
	cfg, err := o.global.restConfig(o.to)
	if err != nil {
		return nil, snapshot.Mapping{}, nil, badinput.Wrap(err)
	}
	target, err := kinds.NewCluster(cfg)
	if err != nil {
		return nil, snapshot.Mapping{}, nil, err
	}
	if err := o.preflightTarget(ctx, r, mapping, target); err != nil {
		return nil, snapshot.Mapping{}, nil, err
	}
	return r, mapping, kinds.Restorers(r, target, kinds.RestoreOptions{Mapping: mapping, Existing: o.existing, SkipOwned: o.skipOwned,
		Select: o.filter, Parallel: o.parallel.n, MoverImage: o.movers.image, Direct: direct, WaitTimeout: o.waitTimeout, Upgrade: o.upgrade, Log: o.global.logger}), nil
}

// preflightTarget stops before anything is applied when a namespace's quota has no room for the
// mover pods that write or read the backup's claims there, or, for a restore, when claims it makes
// would wait for ever for a volume (plans.CheckClaimClasses).
func (o *targetOptions) preflightTarget(ctx context.Context, r *snapshot.Reader, mapping snapshot.Mapping, target kinds.Cluster) error {
	if r.Velero || r.Manifest.Plan == nil {
		return nil // no volume data to move
	}
	var claims []string
	for _, v := range r.Manifest.Volumes {
		claims = append(claims, mapping.Namespace(v.Namespace))
	}
	findings, err := plans.QuotaCheck{Dynamic: target.Dynamic, Cluster: "target", Mover: r.Manifest.Plan.Config.Mover}.Check(ctx, plans.Movers(claims, o.parallel.n))
	if err != nil {
		return err
	}
	if o.command == kinds.Restore {
		made := slices.DeleteFunc(slices.Clone(r.Manifest.Plan.Volumes), func(v plans.Volume) bool {
			return o.filter != nil && o.filter.DataReason(v.Namespace, true) != ""
		})
		classes, err := plans.CheckClaimClasses(ctx, made, mapping.StorageClasses, mapping.Namespaces, target.Plans())
		if err != nil {
			return err
		}
		findings = append(findings, classes...)
	}
	return refuseBlocking(o.streams.Out, o.command, findings)
}

// runReport is what restore and verify print.
type runReport struct {
	Command   string           `json:"command"`
	Backup    string           `json:"backup"`
	Target    string           `json:"target"`
	StartedAt time.Time        `json:"startedAt"`
	Duration  string           `json:"duration"`
	Mapping   snapshot.Mapping `json:"mapping,omitzero"`
	Result    string           `json:"result"`
	Error     string           `json:"error,omitempty"`
	*snapshot.Report
}

func (o *targetOptions) print(rep *runReport) error {
	rep.Report.Sort()
	if done, err := o.output.print(o.streams.Out, rep); done {
		return err
	}
	if err := rep.Report.Print(o.streams.Out); err != nil {
		return err
	}
	_, err := fmt.Fprintf(o.streams.Out, "\n%s of backup %s onto %s: %s, in %s.\n", strings.ToUpper(rep.Command[:1])+rep.Command[1:], rep.Backup, rep.Target, rep.Result, rep.Duration)
	return err
}

func newRestoreCommand(global *globalOptions, streams genericiooptions.IOStreams) *cobra.Command {
	o := newTargetOptions(global, streams, kinds.Restore)
	cmd := &cobra.Command{
		Use:   "restore --to CONTEXT --backup NAME",
		Short: "Put a backup onto a cluster: objects, volume contents, databases and buckets",
		Long: `restore reads a backup (ferry's, or objects of one Velero wrote) and puts it onto the target:
objects in dependency order (CRDs, waited on until Established, namespaces, storage, identity and
configuration, the rest, admission webhooks last) with owner references linked to the owners' new
UIDs; then each claim's files through a mover pod (ferry mover unpack), each database's dump into its
pod's client, and each bucket's objects into the target's MinIO. Before anything is applied, every
file of the backup is read and its size and SHA-256 checked against the manifest: one truncated or
tampered file fails its item and stops the whole restore, with nothing applied (exit 2). Each kind
checks its streams again as it applies them.
With --include-namespaces or --exclude-namespaces, the claims, databases and buckets of the other
namespaces are neither restored nor verified.
Volumes: the mover first stages the whole archive in a hidden .ferry-staging-<id> folder on the claim,
up to tar's end marker, changing nothing else; ferry then checks the stored stream's size and SHA-256
and every staged entry's type, size, mode, SHA-256 and link against the manifest; only then are the
staged files renamed into place (in a carry-back, what the claim holds that the backup lacks is then
deleted, as a last pass). A failed check removes the staging folder and leaves the claim as it was,
naming the volume. After the apply, each entry as now on disk is compared with the manifest again.
Databases: a dump is read to its end first and nothing of it runs unless its stored size and
SHA-256, its decompression and the SQL's own size, SHA-256 and complete last statement match; the load then reads it again and stops at the first byte
that differs from that check. A MySQL/MariaDB server whose max_allowed_packet is smaller than the
dump's largest row is raised for the load and put back, or, if the user may not, the database fails
before loading, naming the table, row and setting. A load the target's server stops part way (a
statement refused, a lost connection) leaves part of that dump on the target (a carry-back has then
dropped the schemas first); the error names the statement's line and table, never its data.
Restoring twice changes nothing the second time.
Exit codes: 0 restored, 3 items skipped or failed (listed), 1 the restore could not go on, 2 bad input.`,
		Args: noArgs,
		RunE: runE(o),
	}
	o.addFlags(cmd)
	cmd.Flags().StringVar(&o.existing, "existing", resources.ExistingSkip, "an object already on the target that differs from the backup: skip (leave it, reported), update (server-side apply), replace (made equal to the backup's, fields it lacks removed) or fail")
	return cmd
}

func newVerifyCommand(global *globalOptions, streams genericiooptions.IOStreams) *cobra.Command {
	o := newTargetOptions(global, streams, kinds.Verify)
	cmd := &cobra.Command{
		Use:   "verify --to CONTEXT --backup NAME",
		Short: "Prove, item by item, that a cluster holds what a backup holds",
		Long: `verify compares the target with the backup: every object must be there with every field of its
backed-up form (the target may add defaults, not lose or change anything); every file of every volume
the same size, mode and SHA-256 (read back through a mover pod); every table the same row count and
checksum; every bucket object the same size and SHA-256; and the restored workloads healthy
(Deployments Available, StatefulSets ready, claims Bound, Jobs not failed). Give the same mapping
flags as the restore. Exit codes: 0 identical, 3 differences (each named), 1 could not verify, 2 bad input.`,
		Args: noArgs,
		RunE: runE(o),
	}
	o.addFlags(cmd)
	return cmd
}

func (o *targetOptions) run(ctx context.Context) error {
	command := o.command
	r, mapping, restorers, err := o.open(ctx)
	if err != nil {
		return err
	}
	started := time.Now()
	report, runErr := kinds.Run(ctx, command, r, restorers, o.global.logger)
	rep := &runReport{Command: command, Backup: o.backup, Target: orCurrent(o.to), StartedAt: started.UTC(), Mapping: mapping,
		Duration: time.Since(started).Round(time.Millisecond).String(), Report: report}
	if runErr != nil {
		rep.Error = runErr.Error()
	}
	problems := rep.Report.Problems()
	switch {
	case runErr != nil:
		rep.Result = "stopped"
	case len(problems) > 0 && command == "verify":
		rep.Result = fmt.Sprintf("%d differences", len(problems))
	case len(problems) > 0:
		rep.Result = fmt.Sprintf("%d items skipped or failed", len(problems))
	case command == "verify":
		rep.Result = "identical"
	default:
		rep.Result = "restored"
	}
	if err := o.print(rep); err != nil {
		return err
	}
	if runErr != nil {
		if errors.Is(runErr, snapshot.ErrCorrupt) {
			return badinput.Wrap(runErr)
		}
		return runErr
	}
	if len(problems) > 0 {
		return &incompleteError{msg: fmt.Sprintf("%s of backup %s: %s", command, o.backup, rep.Result)}
	}
	return nil
}
