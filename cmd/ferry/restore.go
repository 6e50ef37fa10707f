package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/internal/buildinfo"
	"github.com/ferrykube/ferry/plans"
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

	to, backup                    string
	identities                    []string
	namespaceMap, storageClassMap []string
	include, exclude              plans.Selection
	skipOwned                     bool
	parallel                      int
	moverImage, output            string
	existing                      string // restore only
	moverDirect                   bool
	upgrade                       bool
	waitTimeout                   time.Duration
	mapping                       snapshot.Mapping
	filter                        *plans.Filter
}

func (o *targetOptions) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.to, "to", "", "kubeconfig context of the target cluster (default: the current context)")
	f.StringVar(&o.backup, "backup", "", "name of the backup (see ferry backups list); latest is the newest complete one, latest:SCHEDULE that of a schedule")
	f.StringSliceVar(&o.identities, "identity", nil, "age identity file (AGE-SECRET-KEY-1...) of an encrypted backup")
	f.StringSliceVar(&o.namespaceMap, "namespace-map", nil, "restore namespace FROM as TO (FROM=TO, repeatable); adds to ferry.yaml's namespaceMap")
	f.StringSliceVar(&o.storageClassMap, "storage-class-map", nil, "give claims of storage class FROM the class TO (FROM=TO, repeatable)")
	f.StringSliceVar(&o.include.Namespaces, "include-namespaces", nil, "only these (source) namespaces")
	f.StringSliceVar(&o.exclude.Namespaces, "exclude-namespaces", nil, "not these (source) namespaces")
	f.StringSliceVar(&o.include.Resources, "include-resources", nil, "only these resource types (e.g. configmaps, profiles.kubeflow.org)")
	f.StringSliceVar(&o.exclude.Resources, "exclude-resources", nil, "not these resource types")
	f.StringVarP(&o.include.LabelSelector, "selector", "l", "", "only objects with these labels")
	f.BoolVar(&o.skipOwned, "skip-owned", false, "leave objects with a controlling owner (a ReplicaSet's pods, say) to the target's controllers")
	f.IntVar(&o.parallel, "parallel", 8, "volumes, bucket objects and (×4) objects handled at once")
	f.BoolVar(&o.moverDirect, "mover-direct", false, "mover pods read volumes from the S3 storage themselves, through a URL ferry presigns for each (valid 15 minutes; no credentials); ferry decrypts an encrypted backup's volumes itself")
	f.StringVar(&o.moverImage, "mover-image", "ghcr.io/ferrykube/ferry:"+buildinfo.Read().Version, "image of the mover pods that write and read volumes (the ferry image)")
	f.DurationVar(&o.waitTimeout, "wait-timeout", 2*time.Minute, "how long to wait for CRDs to be Established and workloads to become healthy")
	f.StringVarP(&o.output, "output", "o", "", "json or yaml for a machine-readable report")
	f.BoolVar(&o.upgrade, "upgrade", false, "the backup was made by ferry migrate --upgrade and the target runs the platform's new release: only the state is restored or verified, what the release provides is left as it is")
}

func (o *targetOptions) complete(command string) error {
	if o.backup == "" {
		return badinput.Errorf("ferry %s needs --backup NAME (see ferry backups list)", command)
	}
	if !snapshot.IsLatestRef(o.backup) {
		if err := snapshot.CheckName(o.backup); err != nil {
			return err
		}
	}
	if o.parallel < 1 {
		return badinput.Errorf("--parallel %d: want 1 or more", o.parallel)
	}
	switch o.output {
	case "", "json", "yaml":
	default:
		return badinput.Errorf("--output %q: want json or yaml", o.output)
	}
	var err error
	if o.mapping.Namespaces, err = snapshot.ParseMap("namespace-map", o.namespaceMap, false); err != nil {
		return err
	}
	if o.mapping.StorageClasses, err = snapshot.ParseMap("storage-class-map", o.storageClassMap, true); err != nil {
		return err
	}
	if len(o.include.Namespaces)+len(o.include.Resources)+len(o.exclude.Namespaces)+len(o.exclude.Resources) > 0 || o.include.LabelSelector != "" {
		if o.filter, err = plans.NewFilter(plans.Config{Include: o.include, Exclude: o.exclude}); err != nil {
			return badinput.Wrap(err)
		}
	}
	return nil
}

// open opens the backup and builds the kinds that restore and verify it on the target, in order.
func (o *targetOptions) open(ctx context.Context, command string) (*snapshot.Reader, []snapshot.Restorer, error) {
	ids, err := snapshot.ParseIdentities(o.identities)
	if err != nil {
		return nil, nil, err
	}
	store, err := storage.Open(ctx, o.global.storageURL)
	if err != nil {
		return nil, nil, err
	}
	if snapshot.IsLatestRef(o.backup) {
		name, err := snapshot.Resolve(ctx, store, o.backup)
		if err != nil {
			return nil, nil, err
		}
		o.global.logger.Info("resolved the backup", "backup", o.backup, "name", name)
		o.backup = name
	}
	r, err := snapshot.Open(ctx, store, o.backup, ids)
	if err != nil {
		return nil, nil, err
	}
	if o.upgrade && (r.Manifest.Plan == nil || r.Manifest.Plan.Upgrade == nil) {
		return nil, nil, badinput.Errorf("--upgrade: backup %s was not made for an upgrade (ferry migrate --upgrade)", o.backup)
	}
	r = kinds.Selected(r, o.filter)
	cfg, err := o.global.restConfig(o.to)
	if err != nil {
		return nil, nil, badinput.Wrap(err)
	}
	target, err := kinds.NewCluster(cfg)
	if err != nil {
		return nil, nil, err
	}
	var direct storage.Presigner
	if o.moverDirect {
		p, ok := store.(storage.Presigner)
		if !ok {
			return nil, nil, badinput.Errorf("--mover-direct needs S3 storage that mover pods can reach, not %s", store)
		}
		direct = p
	}
	// The mapping of ferry.yaml at backup time, then the flags: the report shows it.
	o.mapping = kinds.EffectiveMapping(r, o.mapping)
	if err := o.preflightMovers(ctx, command, r, target); err != nil {
		return nil, nil, err
	}
	return r, kinds.Restorers(r, target, kinds.RestoreOptions{Mapping: o.mapping, Existing: o.existing, SkipOwned: o.skipOwned,
		Select: o.filter, Parallel: o.parallel, MoverImage: o.moverImage, Direct: direct, WaitTimeout: o.waitTimeout, Upgrade: o.upgrade, Log: o.global.logger}), nil
}

// preflightMovers stops before anything is applied when a namespace's quota has no room for the
// mover pods that write or read the backup's claims there.
func (o *targetOptions) preflightMovers(ctx context.Context, command string, r *snapshot.Reader, target kinds.Cluster) error {
	if r.Velero || r.Manifest.Plan == nil {
		return nil // no volume data to move
	}
	var claims []string
	for _, v := range r.Manifest.Volumes {
		claims = append(claims, o.mapping.Namespace(v.Namespace))
	}
	findings, err := plans.QuotaCheck{Dynamic: target.Dynamic, Cluster: "target", Mover: r.Manifest.Plan.Config.Mover}.Check(ctx, plans.Movers(claims, o.parallel))
	if err != nil {
		return err
	}
	return refuseBlocking(o.streams.Out, command, findings)
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
	if done, err := printStructured(o.streams.Out, o.output, rep); done {
		return err
	}
	if err := rep.Report.Print(o.streams.Out); err != nil {
		return err
	}
	_, err := fmt.Fprintf(o.streams.Out, "\n%s of backup %s onto %s: %s, in %s.\n", strings.ToUpper(rep.Command[:1])+rep.Command[1:], rep.Backup, rep.Target, rep.Result, rep.Duration)
	return err
}

func newRestoreCommand(global *globalOptions, streams genericiooptions.IOStreams) *cobra.Command {
	o := &targetOptions{global: global, streams: streams}
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
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.complete("restore"); err != nil {
				return err
			}
			switch o.existing {
			case resources.ExistingSkip, resources.ExistingUpdate, resources.ExistingReplace, resources.ExistingFail:
			default:
				return badinput.Errorf("--existing %q: want skip, update, replace or fail", o.existing)
			}
			return o.run(cmd.Context(), "restore")
		},
	}
	o.addFlags(cmd)
	cmd.Flags().StringVar(&o.existing, "existing", resources.ExistingSkip, "an object already on the target that differs from the backup: skip (leave it, reported), update (server-side apply), replace (made equal to the backup's, fields it lacks removed) or fail")
	return cmd
}

func newVerifyCommand(global *globalOptions, streams genericiooptions.IOStreams) *cobra.Command {
	o := &targetOptions{global: global, streams: streams}
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
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.complete("verify"); err != nil {
				return err
			}
			return o.run(cmd.Context(), "verify")
		},
	}
	o.addFlags(cmd)
	return cmd
}

func (o *targetOptions) run(ctx context.Context, command string) error {
	r, restorers, err := o.open(ctx, command)
	if err != nil {
		return err
	}
	started := time.Now()
	report, runErr := kinds.Run(ctx, command, r, restorers, o.global.logger)
	rep := &runReport{Command: command, Backup: o.backup, Target: orCurrent(o.to), StartedAt: started.UTC(), Mapping: o.mapping,
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
