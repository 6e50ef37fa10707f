package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"filippo.io/age"
	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/migrate"
	"github.com/ferrykube/ferry/migrate/gates"
	"github.com/ferrykube/ferry/migrate/traffic"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// runOptions are what the commands that drive a run share: its clusters, keys and report.
type runOptions struct {
	global  *globalOptions
	streams genericiooptions.IOStreams

	from, to              string
	identities            []string
	encryptTo             []string
	parallel              parallelFlag
	movers                moverFlags
	waitTimeout, leaseTTL time.Duration
	crashAt               string
	allowSkipped          bool
	output                *outputFlags

	ids []age.Identity // set by complete
}

func newRunOptions(global *globalOptions, streams genericiooptions.IOStreams) *runOptions {
	return &runOptions{global: global, streams: streams, output: newOutputFlags("json", "yaml"), parallel: parallelFlag{n: 8}}
}

// addClusterFlags adds the flags of a run's clusters; contexts false leaves them to the journal.
func (o *runOptions) addClusterFlags(cmd *cobra.Command, contexts bool) {
	f := cmd.Flags()
	if contexts {
		f.StringVar(&o.from, "from", "", "kubeconfig context of blue, the cluster that moves (a resumed run uses the one it started with)")
		f.StringVar(&o.to, "to", "", "kubeconfig context of green, the new cluster (a resumed run uses the one it started with)")
	}
	f.StringSliceVar(&o.identities, "identity", nil, "age identity file, when the run's backup is encrypted")
	f.DurationVar(&o.waitTimeout, "wait-timeout", 2*time.Minute, "how long to wait for CRDs and workloads on green")
	f.DurationVar(&o.leaseTTL, "lease-ttl", migrate.DefaultLeaseTTL, "how long the run's lease on both clusters lasts without renewal")
	f.StringVar(&o.crashAt, "crash-at", "", "testing: end the process with SIGKILL right after this journal event (STATE:PHASE or STATE@STEP:PHASE)")
	f.MarkHidden("lease-ttl")
	f.MarkHidden("crash-at")
}

// addDataFlags adds the flags of commands that move data: migrate, and rollback's carry-back.
func (o *runOptions) addDataFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	o.parallel.addFlags(f, 8, "volumes, bucket objects and resource types handled at once")
	o.movers.addFlags(f, "")
	f.BoolVar(&o.allowSkipped, "allow-skipped", false, "go on when a backup skipped items (databases without a running pod, claims whose volume is lost), a resumed step's backup too; they are reported either way. Without it such a backup stops the run, and a resumed step makes it again")
}

// complete reads the identity files.
func (o *runOptions) complete() error {
	var err error
	o.ids, err = snapshot.ParseIdentities(o.identities)
	return flagged(err)
}

// validate checks what every command that drives a run takes.
func (o *runOptions) validate() error {
	if err := o.output.validate(); err != nil {
		return err
	}
	return o.parallel.validate()
}

// options builds the run's options: clusters from the flags, else the journal's contexts.
func (o *runOptions) options(ctx context.Context, store storage.Backend, cfg config.Config, mapping snapshot.Mapping, run *migrate.Run) (migrate.Options, error) {
	from, to := o.from, o.to
	if run != nil {
		if from == "" {
			from = run.Blue.Context
		}
		if to == "" {
			to = run.Green.Context
		}
	}
	if err := checkClusters(from, to); err != nil {
		return migrate.Options{}, err
	}
	blue, err := o.global.cluster(from)
	if err != nil {
		return migrate.Options{}, err
	}
	green, err := o.global.cluster(to)
	if err != nil {
		return migrate.Options{}, err
	}
	mo := migrate.Options{Store: store, Blue: blue, Green: green, BlueContext: from, GreenCtx: to, Config: cfg, Mapping: mapping,
		Parallel: o.parallel.n, MoverImage: o.movers.image, EncryptTo: o.encryptTo, Identities: o.ids, WaitTimeout: o.waitTimeout,
		LeaseTTL: o.leaseTTL, AllowSkipped: o.allowSkipped, Log: o.global.logger, Out: o.streams.ErrOut}
	if cfg.Traffic != nil {
		// Secret settings by reference come from ferry's environment or from Secrets on blue, the
		// source, which stays up for the whole run and its rollback.
		secrets := config.Resolver{LookupEnv: os.LookupEnv, Secret: config.ClusterSecrets(blue.Dynamic), Cluster: orCurrent(from)}
		if mo.Switcher, err = traffic.New(ctx, *cfg.Traffic, traffic.Options{RESTConfig: o.global.restConfig, Logger: o.global.logger,
			Stdout: o.streams.ErrOut, Stderr: o.streams.ErrOut, Secrets: secrets}); err != nil {
			return mo, err
		}
	}
	if cfg.Rollout != nil {
		for _, g := range cfg.Rollout.WithDefaults().Gates {
			gate, err := gates.New(g, gates.Options{RESTConfig: o.global.restConfig, Logger: o.global.logger})
			if err != nil {
				return mo, err
			}
			mo.Gates = append(mo.Gates, gate)
		}
	}
	if o.crashAt != "" {
		mo.Crash = func(e migrate.Event) {
			at := string(e.State)
			if e.Step > 0 {
				at += fmt.Sprintf("@%d", e.Step)
			}
			if at+":"+e.Phase == o.crashAt {
				syscall.Kill(syscall.Getpid(), syscall.SIGKILL)
				select {}
			}
		}
	}
	return mo, nil
}

// finish turns a run's outcome into the exit code: stopped or paused runs exit 3 with what to do,
// and so do runs that ended (the run, or its rollback, is done: ended) without items a backup
// skipped.
func (o *runOptions) finish(ctx context.Context, r *migrate.Runner, err error, ended bool) error {
	if cerr := r.Close(ctx); cerr != nil {
		o.global.logger.Warn("releasing the run's lease", "error", cerr)
	}
	rep := migrate.ReadReport(ctx, r.Journal)
	if perr := o.printReport(rep); perr != nil {
		return perr
	}
	id := r.Journal.Run.ID
	switch lost := r.LeaseLost(); {
	case err == nil:
		// Done, but never exit 0 when something was lost: what a backup skipped, allowed.
		if where, skipped := rep.Lacking(); ended && len(skipped) > 0 {
			return &incompleteError{msg: fmt.Sprintf("run %s: %s lacks %d items its backup skipped (listed in the report above)", id, where, len(skipped))}
		}
		return nil
	case lost != nil:
		// Another ferry drives the clusters now: this one stopped acting on them and wrote nothing more.
		fmt.Fprintf(o.streams.Out, "\nStopped: %v.\nThis ferry no longer acts on either cluster; see ferry migrate status %s.\n", lost, id)
		return fmt.Errorf("run %s: %w (stopped at: %v)", id, lost, err)
	case r.RollingBack():
		fmt.Fprintf(o.streams.Out, "\nThe rollback stopped. When it is fixed: ferry rollback --run %s   (it goes on as it was decided)\n", id)
		if errors.Is(err, migrate.ErrStopped) {
			return &incompleteError{msg: err.Error()}
		}
		return err
	case r.GreenRanLate():
		fmt.Fprintf(o.streams.Out, "\nThe carry-back cannot end: green's writers ran after its backup. Stop what starts them; then go back with what was carried: ferry rollback --run %s %s\n", id, r.DiscardFlags())
		return &incompleteError{msg: err.Error()}
	case r.CarryingBack():
		if errors.Is(err, migrate.ErrSkipped) {
			fmt.Fprintf(o.streams.Out, "\nThe carry-back stopped: green's backup skipped items. To go on without them: ferry rollback --run %s --carry-back --allow-skipped\n", id)
		}
		discard := r.DiscardFlags()
		if r.PartlyCarriedBack() {
			discard += ", leaving blue partly carried back"
		}
		fmt.Fprintf(o.streams.Out, "\nThe carry-back stopped. When it is fixed: ferry rollback --run %s --carry-back   (or without green's writes: ferry rollback --run %s %s)\n", id, id, discard)
		if errors.Is(err, migrate.ErrStopped) {
			return &incompleteError{msg: err.Error()}
		}
		return err
	case errors.Is(err, migrate.ErrPaused):
		fmt.Fprintf(o.streams.Out, "\nPaused. Resume with: ferry migrate --resume %s   (or go back: ferry rollback --run %s)\n", id, id)
		return &incompleteError{msg: err.Error()}
	case errors.Is(err, migrate.ErrSkipped):
		fmt.Fprintf(o.streams.Out, "\nStopped. To go on without what the backup skipped: ferry migrate --resume %s --allow-skipped   (or go back: ferry rollback --run %s)\n", id, id)
		return &incompleteError{msg: err.Error()}
	case errors.Is(err, migrate.ErrStopped):
		fmt.Fprintf(o.streams.Out, "\nStopped. When it is fixed: ferry migrate --resume %s   (or go back: ferry rollback --run %s)\n", id, id)
		return &incompleteError{msg: err.Error()}
	}
	fmt.Fprintf(o.streams.Out, "\nInterrupted. Resume with: ferry migrate --resume %s\n", id)
	return err
}

func (o *runOptions) printReport(rep migrate.Report) error {
	if done, err := o.output.print(o.streams.Out, rep); done {
		return err
	}
	return rep.Print(o.streams.Out)
}

// openRun opens a run's journal and builds its runner (taking the lease), with the mapping the
// flags add to the journal's.
func (o *runOptions) openRun(ctx context.Context, id string, mapping snapshot.Mapping) (*migrate.Runner, error) {
	store, err := storage.Open(ctx, o.global.storageURL)
	if err != nil {
		return nil, err
	}
	j, err := migrate.OpenJournal(ctx, store, id)
	if err != nil {
		return nil, err
	}
	mo, err := o.options(ctx, store, j.Run.Config, mapping, &j.Run)
	if err != nil {
		return nil, err
	}
	return migrate.Resume(ctx, mo, id)
}

// migrateOptions are ferry migrate's: a new run, or --resume of one.
type migrateOptions struct {
	*runOptions
	resume             string
	configFile, preset string
	mapping            mappingFlags
	upgrade            upgradeFlags
	warmFlags          warmFlags
	flags              *pflag.FlagSet // to tell the flags given from their defaults

	// Set by complete and validate.
	config      config.Config
	flagMapping snapshot.Mapping
	warm        *migrate.Warm
}

func newMigrateCommand(global *globalOptions, streams genericiooptions.IOStreams) *cobra.Command {
	o := &migrateOptions{runOptions: newRunOptions(global, streams)}
	cmd := &cobra.Command{
		Use:   "migrate --from BLUE --to GREEN [-f ferry.yaml | --preset P]",
		Short: "The blue-green run: quiesce, back up, restore, verify, shift traffic behind gates",
		Long: `migrate runs the blue-green state machine — planned, preflighted, quiesced, backed-up, restored,
verified, shifting (each traffic step behind the gates), shifted — writing every transition to a
journal in storage (metadata/ferry/runs/ID/) before acting on it. An interrupted run continues with
--resume ID and never repeats a finished step; two runs never drive the same clusters at once.
Blue is changed only by the quiesce of its writers (and of the pod webhooks they serve, which then
let ferry's mover pods pass), which a rollback undoes, and is never deleted.
With --upgrade, green runs the platform's new release: only the state moves (tenants and their
namespaces, the databases, buckets and their claims), green's release is left as installed (its CRDs
are never changed), custom resources move in a version both serve, and green's own writers stay
stopped from before blue's data is loaded until the shift. Objects whose kind green's release
removed stop the run, by name, unless --leave-behind names their CRD (they then stay on blue).
With --warm, the claims' files are copied to green while blue is live (state staged), in rounds of
incremental backups (RUN-stage-K) each restored onto green, until a round uploads at most
--warm-delta or --warm-rounds ran; blue is then quiesced and only the last delta is copied (the
run's backup stores volumes in chunks). The report shows each round and the downtime beside the
total time. Databases and buckets are copied once blue is quiesced, as in a cold run.
Exit codes: 0 shifted, 3 stopped or paused (the report says why, and how to go on), 1 failed, 2 bad input.`,
		Args: noArgs,
		RunE: runE(o),
	}
	o.addClusterFlags(cmd, true)
	f := cmd.Flags()
	f.StringVar(&o.resume, "resume", "", "continue the run with this ID")
	f.StringVarP(&o.configFile, "config", "f", "", "ferry.yaml: what moves, quiesce rules, traffic switcher and rollout gates")
	f.StringVar(&o.preset, "preset", "", "embedded platform preset: "+strings.Join(config.Presets(), ", "))
	o.addDataFlags(cmd)
	f.StringSliceVar(&o.encryptTo, "encrypt-to", nil, "age recipients: encrypt the run's backup (give --identity to restore it)")
	o.mapping.addFlags(f)
	o.output.addFlags(f, "json or yaml: the run's report for automation")
	o.upgrade.addFlags(f)
	o.warmFlags.addFlags(f)
	o.flags = f
	cmd.AddCommand(newMigrateStatusCommand(global, streams), newMigrateFinalizeCommand(global, streams), newMigrateListCommand(global, streams))
	return cmd
}

// complete reads the identities, the flags' maps and, for a new run, ferry.yaml and the preset.
// A new run keeps the flags' maps in its journal with the rest of its configuration, so that a
// resume or a carry-back maps the same way without them.
func (o *migrateOptions) complete([]string) error {
	if err := o.runOptions.complete(); err != nil {
		return err
	}
	var err error
	if o.flagMapping, err = o.mapping.mapping(); err != nil {
		return err
	}
	if o.resume != "" {
		return nil
	}
	cfg, err := loadConfig(o.configFile, o.preset)
	if err != nil {
		return err
	}
	o.config = cfg.Merge(config.Config{Planning: config.Planning{NamespaceMap: o.flagMapping.Namespaces, StorageClassMap: o.flagMapping.StorageClasses}})
	return nil
}

func (o *migrateOptions) validate() error {
	if err := o.runOptions.validate(); err != nil {
		return err
	}
	if _, err := snapshot.ParseRecipients(o.encryptTo); err != nil {
		return flagged(err)
	}
	if o.resume != "" {
		if o.configFile != "" || o.preset != "" || o.upgrade.isSet() || o.warmFlags.isSet(o.flags) {
			return badinput.Errorf("--resume continues a run with its own configuration: drop -f/--preset/--upgrade/--leave-behind/--warm")
		}
		return nil // the journal names the clusters, checked when it is read
	}
	// ferry.yaml's maps with the flags' over them, checked as one configuration.
	if err := o.config.Validate(); err != nil {
		return badinput.Errorf("flags: %w", err)
	}
	if err := o.upgrade.validate(o.config); err != nil {
		return err
	}
	var err error
	if o.warm, err = o.warmFlags.warm(o.flags); err != nil {
		return err
	}
	if err := migrate.CheckWarm(o.warm, o.upgrade.on, len(o.encryptTo) > 0); err != nil {
		return flagged(err)
	}
	return checkClusters(o.from, o.to)
}

// checkClusters checks blue's and green's contexts: green given, and not blue.
func checkClusters(from, to string) error {
	if to == "" {
		return badinput.Errorf("give green with --to CONTEXT")
	}
	if from == to {
		return badinput.Errorf("--from and --to are both %q: blue and green must be two clusters", orCurrent(from))
	}
	return nil
}

func (o *migrateOptions) run(ctx context.Context) error {
	var r *migrate.Runner
	var err error
	if o.resume != "" {
		r, err = o.openRun(ctx, o.resume, o.flagMapping)
	} else {
		r, err = o.start(ctx)
	}
	if err != nil {
		if errors.Is(err, migrate.ErrLeaseHeld) || errors.Is(err, migrate.ErrStopped) {
			return &incompleteError{msg: err.Error()}
		}
		return err
	}
	fmt.Fprintf(o.streams.ErrOut, "Run %s (journal in %s)\n", r.Journal.Run.ID, o.global.storageURL)
	return o.finish(ctx, r, flagged(r.Drive(ctx)), true)
}

func (o *migrateOptions) start(ctx context.Context) (*migrate.Runner, error) {
	store, err := storage.Open(ctx, o.global.storageURL)
	if err != nil {
		return nil, err
	}
	mo, err := o.options(ctx, store, o.config, o.flagMapping, nil)
	if err != nil {
		return nil, err
	}
	if o.upgrade.on {
		mo.Upgrade = &plans.UpgradeOptions{LeaveBehind: o.upgrade.leaveBehind}
	}
	mo.Warm = o.warm
	if mo.Switcher != nil {
		if err := mo.Switcher.Preflight(ctx); err != nil {
			return nil, fmt.Errorf("traffic switcher %s: %w", mo.Switcher.Name(), err)
		}
	}
	r, err := migrate.Start(ctx, mo)
	return r, flagged(err)
}

// statusOptions are ferry migrate status's.
type statusOptions struct {
	global  *globalOptions
	streams genericiooptions.IOStreams
	output  *outputFlags
	id      string
}

func newMigrateStatusCommand(global *globalOptions, streams genericiooptions.IOStreams) *cobra.Command {
	o := &statusOptions{global: global, streams: streams, output: newOutputFlags("json", "yaml")}
	cmd := &cobra.Command{
		Use:   "status ID",
		Short: "A run's state, the time of each phase, its verification and traffic steps",
		Args:  oneArg("migrate status", "run ID", "ferry migrate list"),
		RunE:  runE(o),
	}
	o.output.addFlags(cmd.Flags(), "json or yaml")
	return cmd
}

func (o *statusOptions) complete(args []string) error { o.id = args[0]; return nil }

func (o *statusOptions) validate() error { return o.output.validate() }

func (o *statusOptions) run(ctx context.Context) error {
	store, err := storage.Open(ctx, o.global.storageURL)
	if err != nil {
		return err
	}
	j, err := migrate.OpenJournal(ctx, store, o.id)
	if err != nil {
		return err
	}
	rep := migrate.ReadReport(ctx, j)
	if done, err := o.output.print(o.streams.Out, rep); done {
		return err
	}
	return rep.Print(o.streams.Out)
}

// listOptions are ferry migrate list's.
type listOptions struct {
	global  *globalOptions
	streams genericiooptions.IOStreams
}

func newMigrateListCommand(global *globalOptions, streams genericiooptions.IOStreams) *cobra.Command {
	o := &listOptions{global: global, streams: streams}
	return &cobra.Command{
		Use:   "list",
		Short: "List the runs in storage",
		Args:  noArgs,
		RunE:  runE(o),
	}
}

func (o *listOptions) complete([]string) error { return nil }

func (o *listOptions) validate() error { return nil }

func (o *listOptions) run(ctx context.Context) error {
	store, err := storage.Open(ctx, o.global.storageURL)
	if err != nil {
		return err
	}
	ids, err := migrate.ListRuns(ctx, store)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(o.streams.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSTATE\tBLUE\tGREEN\tSTARTED")
	for _, id := range ids {
		j, err := migrate.OpenJournal(ctx, store, id)
		if err != nil {
			fmt.Fprintf(tw, "%s\t(unreadable: %v)\t\t\t\n", id, err)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", id, dashIfEmpty(string(j.Current())), dashIfEmpty(j.Run.Blue.Context), dashIfEmpty(j.Run.Green.Context), j.Run.CreatedAt.Format(time.RFC3339))
	}
	return tw.Flush()
}

// finalizeOptions are ferry migrate finalize's.
type finalizeOptions struct {
	*runOptions
	id string
}

func newMigrateFinalizeCommand(global *globalOptions, streams genericiooptions.IOStreams) *cobra.Command {
	o := &finalizeOptions{runOptions: newRunOptions(global, streams)}
	cmd := &cobra.Command{
		Use:   "finalize ID",
		Short: "End a run that shifted; blue is still left as it is",
		Args:  oneArg("migrate finalize", "run ID", "ferry migrate list"),
		RunE:  runE(o),
	}
	o.addClusterFlags(cmd, true)
	return cmd
}

func (o *finalizeOptions) complete(args []string) error {
	o.id = args[0]
	return o.runOptions.complete()
}

func (o *finalizeOptions) run(ctx context.Context) error {
	r, err := o.openRun(ctx, o.id, snapshot.Mapping{})
	if err != nil {
		return err
	}
	return o.finish(ctx, r, r.Finalize(ctx), true)
}

// rollbackOptions are ferry rollback's.
type rollbackOptions struct {
	*runOptions
	id string
	ro migrate.RollbackOptions
}

func newRollbackCommand(global *globalOptions, streams genericiooptions.IOStreams) *cobra.Command {
	o := &rollbackOptions{runOptions: newRunOptions(global, streams)}
	cmd := &cobra.Command{
		Use:   "rollback --run ID [--carry-back | --discard-green-writes]",
		Short: "Traffic back to blue's saved state, blue's writers back on, green's stopped",
		Long: `rollback sends traffic back to blue's saved state, starts blue's writers again and stops green's.
Once green may have taken writes (its writers started and traffic reached it), rolling back would lose
them: rollback then refuses (exit 4) and names the databases, volumes, buckets and objects at risk.
--carry-back brings them to blue first: green's writers stop, green is backed up (backup ID-carry-back),
the backup is restored onto blue replacing blue's copies (schemas replaced, volume trees and buckets
synced with deletions, objects replaced, objects deleted on green deleted on blue) and blue is
verified against it; only then does traffic go back. Every step is journaled: run the same command
again to resume. --discard-green-writes goes back without them. Either choice is journaled, with who.
Once a carry-back began writing into blue and did not finish, --discard-green-writes is refused too
(blue may hold part of green's data): finish the carry-back, or add --despite-partial-carry-back.
Exit codes: 0 rolled back, 4 refused because green's writes would be lost (named) or blue is partly
carried back, 3 stopped (the report says why, and how to go on), 1 failed, 2 bad input.`,
		Args: noArgs,
		RunE: runE(o),
	}
	o.addClusterFlags(cmd, true)
	f := cmd.Flags()
	f.StringVar(&o.id, "run", "", "the run's ID")
	f.BoolVar(&o.ro.CarryBack, "carry-back", false, "first bring what green holds back to blue, verified; then roll back")
	f.BoolVar(&o.ro.DiscardGreenWrites, "discard-green-writes", false, "roll back even though green may hold writes blue lacks; they are lost")
	f.BoolVar(&o.ro.DespitePartialCarryBack, "despite-partial-carry-back", false, "with --discard-green-writes: roll back though a carry-back began writing green's data into blue and did not finish, leaving blue so")
	o.addDataFlags(cmd)
	o.output.addFlags(f, "json or yaml")
	return cmd
}

func (o *rollbackOptions) complete([]string) error { return o.runOptions.complete() }

func (o *rollbackOptions) validate() error {
	if o.id == "" {
		return badinput.Errorf("ferry rollback needs --run ID (see ferry migrate list)")
	}
	if err := o.runOptions.validate(); err != nil {
		return err
	}
	if o.ro.CarryBack && o.ro.DiscardGreenWrites {
		return badinput.Errorf("--carry-back and --discard-green-writes exclude each other: carry green's writes back, or drop them")
	}
	if o.ro.DespitePartialCarryBack && !o.ro.DiscardGreenWrites {
		return badinput.Errorf("--despite-partial-carry-back goes only with --discard-green-writes")
	}
	return nil
}

func (o *rollbackOptions) run(ctx context.Context) error {
	r, err := o.openRun(ctx, o.id, snapshot.Mapping{})
	if err != nil {
		return err
	}
	o.ro.By = operator()
	err = r.Rollback(ctx, o.ro)
	switch {
	case errors.Is(err, migrate.ErrGreenWrites):
		r.Close(ctx)
		return &refusedError{err: fmt.Errorf("%w; --carry-back brings them to blue first, --discard-green-writes rolls back without them", err)}
	case errors.Is(err, migrate.ErrPartlyCarried) && r.GreenRanLate():
		r.Close(ctx)
		return &refusedError{err: fmt.Errorf("%w, and cannot end (green's writers ran after its backup); add --despite-partial-carry-back to leave blue so", err)}
	case errors.Is(err, migrate.ErrPartlyCarried):
		r.Close(ctx)
		return &refusedError{err: fmt.Errorf("%w; finish the carry-back (ferry rollback --run %s --carry-back goes on where it stopped), or add --despite-partial-carry-back to leave blue so", err, o.id)}
	}
	return o.finish(ctx, r, err, true)
}

// flipOptions are ferry flip's.
type flipOptions struct {
	*runOptions
	id, side string
	weight   int
	split    traffic.Split // set by validate
}

func newFlipCommand(global *globalOptions, streams genericiooptions.IOStreams) *cobra.Command {
	o := &flipOptions{runOptions: newRunOptions(global, streams)}
	cmd := &cobra.Command{
		Use:   "flip --run ID --to green|blue [--weight N]",
		Short: "Move traffic by hand: all (or N %) to green or blue",
		Args:  noArgs,
		RunE:  runE(o),
	}
	o.addClusterFlags(cmd, false)
	cmd.Flags().StringVar(&o.side, "to", "", "green or blue: the side that gets the traffic")
	cmd.Flags().StringVar(&o.id, "run", "", "the run's ID")
	cmd.Flags().IntVar(&o.weight, "weight", 100, "percent of traffic to that side")
	return cmd
}

func (o *flipOptions) complete([]string) error { return o.runOptions.complete() }

func (o *flipOptions) validate() error {
	if o.id == "" {
		return badinput.Errorf("ferry flip needs --run ID (see ferry migrate list)")
	}
	if o.weight < 0 || o.weight > 100 {
		return badinput.Errorf("--weight %d: want a percent from 0 to 100", o.weight)
	}
	switch o.side {
	case "green":
		o.split = traffic.Green(o.weight)
	case "blue":
		o.split = traffic.Green(100 - o.weight)
	default:
		return badinput.Errorf("--to %q: want green or blue", o.side)
	}
	return nil
}

func (o *flipOptions) run(ctx context.Context) error {
	r, err := o.openRun(ctx, o.id, snapshot.Mapping{})
	if err != nil {
		return err
	}
	return o.finish(ctx, r, r.Flip(ctx, o.split), false)
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// operator names who runs ferry, for the journal: the user and host, as the environment says.
func operator() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); name == "" && err == nil {
		name = u.Username
	}
	if name == "" {
		name = "unknown"
	}
	host, _ := os.Hostname()
	return name + "@" + host
}
