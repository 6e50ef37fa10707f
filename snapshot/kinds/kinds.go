// Package kinds runs every kind of data of a backup in order — objects, databases, buckets,
// volumes — for a backup, a restore or a verify, so that the commands and the blue-green run
// (package migrate) do each the same way.
package kinds

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/buckets"
	"github.com/ferrykube/ferry/snapshot/databases"
	"github.com/ferrykube/ferry/snapshot/resources"
	"github.com/ferrykube/ferry/snapshot/volumes"
	"github.com/ferrykube/ferry/storage"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// Cluster holds the clients of one cluster.
type Cluster struct {
	Config    *rest.Config
	Client    kubernetes.Interface
	Dynamic   dynamic.Interface
	Discovery discovery.DiscoveryInterface
}

// NewCluster makes the clients of a cluster.
func NewCluster(cfg *rest.Config) (Cluster, error) {
	c := Cluster{Config: cfg}
	var err error
	if c.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return c, err
	}
	// Lists decoded in one pass: backups and verify list every object.
	if c.Dynamic, err = kube.NewDynamic(cfg); err != nil {
		return c, err
	}
	c.Discovery, err = discovery.NewDiscoveryClientForConfig(cfg)
	return c, err
}

// Plans are the clients planning needs.
func (c Cluster) Plans() plans.Clients {
	return plans.Clients{Discovery: c.Discovery, Dynamic: c.Dynamic}
}

// Mapper finds resource types by kind on the cluster, rediscovering after a miss (new CRDs).
func (c Cluster) Mapper() *restmapper.DeferredDiscoveryRESTMapper {
	return restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Discovery))
}

// BackupOptions say how to back up.
type BackupOptions struct {
	Name       string
	Plan       *plans.Plan
	EncryptTo  []string
	Schedule   string
	Parallel   int
	MoverImage string
	// Direct has mover pods upload volumes to storage themselves, through presigned URLs.
	Direct storage.Presigner
	// Chunks stores volumes read through exec in the chunk repository, deduplicated and
	// incremental (see volumes.Contents.Chunks).
	Chunks   bool
	Progress snapshot.Progress
	Log      *slog.Logger
	// BeforeCommit, when set, is called once every kind is captured, before the files that make
	// the backup complete: an error leaves it incomplete (a migration checks it still holds its
	// lease, so that a run another process took over never completes a backup).
	BeforeCommit func(context.Context) error
}

// Backup makes a complete backup of the plan from the source: every kind's data, Velero's files
// when not encrypted, the manifest last. A backup that fails is removed; an existing name is
// never overwritten (the error then matches snapshot.ErrExists).
func Backup(ctx context.Context, store storage.Backend, source Cluster, o BackupOptions) (*snapshot.Manifest, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	started := time.Now()
	w, err := snapshot.Create(ctx, store, o.Name, o.Plan.Source, o.Plan, started, o.EncryptTo)
	if err != nil {
		return nil, err
	}
	w.SetSchedule(o.Schedule)
	if o.Progress != nil {
		w.SetProgress(o.Progress)
	}
	// The heartbeat lets a later run tell this backup's mover pods from those of a killed ferry.
	var manifest *snapshot.Manifest
	beat, err := snapshot.StartHeartbeat(ctx, store, o.Name, snapshot.HeartbeatInterval, o.Log)
	if err == nil {
		manifest, err = capture(ctx, w, store, source, o, started)
		if rerr := w.Release(context.WithoutCancel(ctx)); rerr != nil {
			o.Log.Warn("releasing the chunk repository's writers (their locks go stale)", "backup", o.Name, "error", rerr)
		}
		// Stopped before a failed backup is removed: a later beat would bring its folder back.
		if serr := beat.Stop(context.WithoutCancel(ctx)); serr != nil && err == nil {
			o.Log.Warn("removing the heartbeat of the complete backup", "backup", o.Name, "error", serr)
		}
	}
	if err != nil {
		// Leave nothing that looks like a backup behind; the manifest was never written.
		if n, derr := snapshot.Delete(context.WithoutCancel(ctx), store, o.Name); derr != nil {
			o.Log.Error("cleaning up the failed backup", "backup", o.Name, "removed", n, "error", derr)
		}
		return nil, fmt.Errorf("backup %s: %w", o.Name, err)
	}
	return manifest, nil
}

func capture(ctx context.Context, w *snapshot.Writer, store storage.Backend, source Cluster, o BackupOptions, started time.Time) (*snapshot.Manifest, error) {
	plan := o.Plan
	capturers := []snapshot.Capturer{
		resources.Objects{Dynamic: source.Dynamic, Plan: plan, Concurrency: o.Parallel},
		databases.Dumps{Config: source.Config, Client: source.Client, Plan: plan, Log: o.Log},
		buckets.Copies{Config: source.Config, Client: source.Client, Plan: plan, Parallel: o.Parallel, Storage: store, Log: o.Log},
		volumes.Contents{Config: source.Config, Client: source.Client, Plan: plan, Image: o.MoverImage, Parallel: o.Parallel, Direct: o.Direct, Storage: store, Chunks: o.Chunks, Log: o.Log},
	}
	// The kinds are captured at the same time, so a backup takes as long as its longest kind, not
	// their sum; each keeps its own limit of --parallel. The first to fail stops the others.
	g, gctx := errgroup.WithContext(ctx)
	for _, kind := range capturers {
		g.Go(func() error {
			start := time.Now()
			o.Log.Info("capturing", "backup", w.Name(), "kind", kind.Name())
			if err := kind.Capture(gctx, w); err != nil {
				return fmt.Errorf("%s: %w", kind.Name(), err)
			}
			o.Log.Info("captured", "backup", w.Name(), "kind", kind.Name(), "took", time.Since(start).Round(time.Millisecond))
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if o.BeforeCommit != nil {
		if err := o.BeforeCommit(ctx); err != nil {
			return nil, err
		}
	}
	if w.Encrypted() {
		return w.Commit(ctx, time.Now()) // Velero cannot read encrypted archives: no velero-backup.json
	}
	var labels map[string]string
	if o.Schedule != "" {
		labels = map[string]string{"velero.io/schedule-name": o.Schedule} // as Velero labels its scheduled backups
	}
	velero, err := resources.VeleroBackup(w.Name(), plan, w.Objects(), started, time.Now(), labels)
	if err != nil {
		return nil, err
	}
	// Velero's own rule: its metadata file last among its files; ferry's manifest after it.
	if err := w.PutPlain(ctx, snapshot.VeleroFile, bytes.NewReader(velero)); err != nil {
		return nil, err
	}
	w.SetVeleroCompatible(true)
	return w.Commit(ctx, time.Now())
}

// RestoreOptions say how to restore onto, or verify, a target.
type RestoreOptions struct {
	Mapping snapshot.Mapping
	// Existing is the policy for objects already on the target (resources.Existing*); verify
	// ignores it.
	Existing   string
	SkipOwned  bool
	Select     *plans.Filter
	Parallel   int
	MoverImage string
	// Direct has mover pods read volumes from storage themselves, through presigned URLs
	// (encrypted ones excepted: ferry decrypts those).
	Direct      storage.Presigner
	WaitTimeout time.Duration
	// Exact makes the target hold exactly the backup (to carry data back): objects on the target
	// compared for what they hold beyond the backup's, volume trees synced with deletions, buckets
	// mirrored with deletions, database schemas dropped before their dumps load. Every kind names
	// this mode Exact.
	Exact bool
	// ExactData makes only the volumes and buckets exact (synced with deletions), not the objects
	// nor the databases: a warm migration's restores onto green, whose earlier pre-copy may hold
	// files and objects blue has deleted since.
	ExactData bool
	// Upgrade: the backup was made for an upgrade (its plan has an upgrade section) and the target
	// runs another release of the platform than the backup's source (green the new one, blue on a
	// carry-back the old one). Only the state moves (resources.Objects.Upgrade); verify holds
	// databases to the rule of a schema upgrade (databases.Dumps.Upgrade), and with Exact (a
	// carry-back) databases are loaded into the target's existing schemas instead of replacing
	// them (databases.Dumps.IntoExistingSchema).
	Upgrade bool
	// AwaitAdmission, AdmissionWait and Only: resources.Objects'.
	AwaitAdmission bool
	AdmissionWait  time.Duration
	Only           []string
	// Base names a backup in the same storage that a restore before left the target's claims as
	// (a warm run's round before): a chunked volume's restore sends only what changed since
	// (volumes.Contents.Base).
	Base string
	Log  *slog.Logger
}

// Restorers are the kinds that restore and verify the backup on the target, in order. The
// mapping of ferry.yaml at backup time applies unless the options map the same names.
func Restorers(r *snapshot.Reader, target Cluster, o RestoreOptions) []snapshot.Restorer {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Parallel <= 0 {
		o.Parallel = 8
	}
	plan := r.Manifest.Plan
	o.Mapping = EffectiveMapping(r, o.Mapping)
	out := []snapshot.Restorer{
		resources.Objects{Dynamic: target.Dynamic, Plan: plan, Concurrency: 4 * o.Parallel, Mapping: o.Mapping, Existing: o.Existing,
			Exact: o.Exact, SkipOwned: o.SkipOwned, Select: o.Select, Upgrade: o.Upgrade, Mapper: target.Mapper(), WaitTimeout: o.WaitTimeout,
			AwaitAdmission: o.AwaitAdmission, AdmissionWait: o.AdmissionWait, Only: o.Only, Log: o.Log},
	}
	if r.Velero {
		return out // Velero keeps volume data in Kopia, which ferry does not read
	}
	return append(out,
		volumes.Contents{Config: target.Config, Client: target.Client, Plan: plan, Image: o.MoverImage, Parallel: o.Parallel, Mapping: o.Mapping, Direct: o.Direct, Exact: o.Exact || o.ExactData, Base: o.Base, Log: o.Log},
		databases.Dumps{Config: target.Config, Client: target.Client, Plan: plan, Mapping: o.Mapping, Exact: o.Exact,
			Upgrade: o.Upgrade, IntoExistingSchema: o.Upgrade && o.Exact, Log: o.Log},
		buckets.Copies{Config: target.Config, Client: target.Client, Plan: plan, Parallel: o.Parallel, Mapping: o.Mapping, Exact: o.Exact || o.ExactData, Log: o.Log},
	)
}

// CarryBackRestorers make the target (blue) hold exactly what the backup r (of green) holds:
// Restorers with Exact, whose objects are those of cb (green's, in blue's names) and whose
// restore also deletes the objects green no longer holds.
func CarryBackRestorers(r *snapshot.Reader, cb *resources.CarryBack, target Cluster, o RestoreOptions) []snapshot.Restorer {
	o.Exact = true
	o.Existing = resources.ExistingReplace
	out := Restorers(r, target, o)
	out[0] = resources.Carried{Objects: out[0].(resources.Objects), CarryBack: cb}
	return out
}

// EffectiveMapping is the mapping Restorers use.
func EffectiveMapping(r *snapshot.Reader, m snapshot.Mapping) snapshot.Mapping {
	return EffectiveMappingOf(r.Manifest.Plan, m)
}

// EffectiveMappingOf is the plan's mapping (ferry.yaml's) with m's names over it.
func EffectiveMappingOf(plan *plans.Plan, m snapshot.Mapping) snapshot.Mapping {
	if plan != nil {
		m.Namespaces = mergeMap(plan.Config.NamespaceMap, m.Namespaces)
		m.StorageClasses = mergeMap(plan.Config.StorageClassMap, m.StorageClasses)
	}
	return m
}

func mergeMap(base, over map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

// Restore and Verify name what Run does.
const (
	Restore = "restore"
	Verify  = "verify"
)

// Run restores or verifies (command) each kind into one report: the objects first, then the others
// at the same time (a restore overlaps them further: see restoreAll); objects that cannot go on
// stop the run, and the report still holds what was done. For a backup Velero wrote, each volume
// it holds data of (pod volume backups, snapshots), which ferry does not read, is reported as
// skipped.
func Run(ctx context.Context, command string, r *snapshot.Reader, restorers []snapshot.Restorer, log *slog.Logger) (*snapshot.Report, error) {
	return runChecked(ctx, command, r, restorers, log, nil)
}

// RestoreAfterCheck is Run's restore that calls applying once every stream of the backup is
// checked, before anything is applied; an error of applying stops it there. A caller journals
// so that the target may have changed from then on.
func RestoreAfterCheck(ctx context.Context, r *snapshot.Reader, restorers []snapshot.Restorer, log *slog.Logger, applying func(context.Context) error) (*snapshot.Report, error) {
	return runChecked(ctx, Restore, r, restorers, log, applying)
}

func runChecked(ctx context.Context, command string, r *snapshot.Reader, restorers []snapshot.Restorer, log *slog.Logger, applying func(context.Context) error) (*snapshot.Report, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if command != Restore && command != Verify {
		return nil, fmt.Errorf("kinds.Run: %q: want restore or verify", command)
	}
	report := &snapshot.Report{}
	if command == Restore {
		if err := checkBeforeApplying(ctx, r, report, log); err != nil {
			return report, fmt.Errorf("%s %s: %w", command, r.Name(), err)
		}
		for _, k := range restorers {
			if p, ok := k.(snapshot.Prechecker); ok {
				if err := p.Precheck(ctx, r, report); err != nil {
					return report, fmt.Errorf("%s %s: %s: %w", command, r.Name(), k.Name(), err)
				}
			}
		}
		if applying != nil {
			if err := applying(ctx); err != nil {
				return report, err
			}
		}
	}
	run := func(ctx context.Context, k snapshot.Restorer, fill *snapshot.Fill) error {
		start := time.Now()
		log.Info(map[string]string{Restore: "restoring", Verify: "verifying"}[command], "backup", r.Name(), "kind", k.Name())
		var err error
		switch {
		case command == Verify:
			err = k.Verify(ctx, r, report)
		case fill != nil:
			err = k.(snapshot.FillingRestorer).RestoreFilling(ctx, r, report, fill)
		default:
			err = k.Restore(ctx, r, report)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %s: %w", command, r.Name(), k.Name(), err)
		}
		log.Info(map[string]string{Restore: "restored", Verify: "verified"}[command], "backup", r.Name(), "kind", k.Name(), "took", time.Since(start).Round(time.Millisecond))
		return nil
	}
	var err error
	switch {
	case len(restorers) == 0:
	case command == Restore:
		err = restoreAll(ctx, restorers, run)
	default:
		// Objects first, then the others at the same time.
		if err = run(ctx, restorers[0], nil); err == nil {
			err = eachAtOnce(restorers[1:], func(k snapshot.Restorer) error { return run(ctx, k, nil) })
		}
	}
	// A backup Velero wrote holds volume data only as pod volume backups (Kopia) or snapshots,
	// which ferry does not read: each is skipped by name. Without any, nothing is skipped.
	for _, v := range r.VeleroVolumes {
		report.Add("volumes", snapshot.StatusSkipped, v.Name, v.Reason)
	}
	report.Sort()
	return report, err
}

// restoreAll restores the kinds, the objects (restorers[0]) first: the other kinds need what
// they create but not each other, so they run at the same time and the restore takes about as
// long as the longest. When the objects' restore can hold back what mounts the volumes
// (snapshot.Fill), the volumes are filled as soon as the claims exist, the kinds that need the
// workloads start once everything but the held objects is made, and the held objects are made
// once the volumes are filled; otherwise every kind waits for the objects' restore to end. One
// kind's error does not stop the others halfway (each leaves what it applies whole or as it was);
// the errors are joined.
func restoreAll(ctx context.Context, restorers []snapshot.Restorer, run func(context.Context, snapshot.Restorer, *snapshot.Fill) error) error {
	objects, others := restorers[0], restorers[1:]
	filling, canHold := objects.(snapshot.FillingRestorer)
	if !canHold || !slices.ContainsFunc(others, fillsClaims) {
		if err := run(ctx, objects, nil); err != nil {
			return err
		}
		return eachAtOnce(others, func(k snapshot.Restorer) error { return run(ctx, k, nil) })
	}
	fill := snapshot.NewFill()
	objectsDone := make(chan error, 1)
	go func() {
		err := run(ctx, filling, fill)
		fill.ObjectsReady(err)
		objectsDone <- err
	}()
	err := eachAtOnce(others, func(k snapshot.Restorer) error {
		switch {
		case fillsClaims(k):
			defer fill.Filled()
			if err := fill.WaitClaims(ctx); err != nil {
				return nil // the objects' error says it
			}
			return run(ctx, k, nil)
		default:
			if err := fill.WaitObjects(ctx); err != nil {
				return nil
			}
			return run(ctx, k, nil)
		}
	})
	return errors.Join(<-objectsDone, err)
}

func fillsClaims(k snapshot.Restorer) bool {
	_, ok := k.(snapshot.ClaimFiller)
	return ok
}

// eachAtOnce calls fn for every kind at the same time and joins their errors.
func eachAtOnce(ks []snapshot.Restorer, fn func(snapshot.Restorer) error) error {
	errs := make([]error, len(ks))
	var wg sync.WaitGroup
	for i, k := range ks {
		wg.Go(func() { errs[i] = fn(k) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// checkParallel is how many of a backup's files checkBeforeApplying reads at once.
const checkParallel = 4

// checkBeforeApplying reads every file of the backup and checks it against the manifest before
// any kind applies anything (snapshot.Reader.Check). Each kind checks its own streams again as it
// applies them; this pass makes one damaged file stop the whole restore, so that a carry-back, say,
// does not replace blue's objects and then find green's dump cut short. Each damaged file's item
// is failed in the report, and the error names them all.
func checkBeforeApplying(ctx context.Context, r *snapshot.Reader, report *snapshot.Report, log *slog.Logger) error {
	start := time.Now()
	damaged, err := r.Check(ctx, checkParallel)
	if err != nil {
		return err
	}
	log.Info("checked the backup's files before applying anything", "backup", r.Name(), "files", len(r.Manifest.Streams), "damaged", len(damaged), "took", time.Since(start).Round(time.Millisecond))
	if len(damaged) == 0 {
		return nil
	}
	errs := make([]error, 0, len(damaged))
	for _, d := range damaged {
		report.Add(d.Kind, snapshot.StatusFailed, d.Name, fmt.Sprintf("%s: %v: %s; the restore applied nothing of the backup", d.What(), d.Err, untouched(d.Kind)))
		errs = append(errs, fmt.Errorf("%s: %w", d.What(), d.Err))
	}
	return fmt.Errorf("%d of the backup's files are damaged, nothing was applied: %w", len(damaged), errors.Join(errs...))
}

// untouched says what a restore stopped by a damaged file of kind did not do.
func untouched(kind string) string {
	switch kind {
	case "volumes":
		return "nothing was written"
	case "databases":
		return "nothing was loaded"
	case "buckets":
		return "nothing was put"
	}
	return "nothing was applied"
}

// SchemaChanges says how the schema of each database of the backup on the target differs from
// the one the backup recorded (databases.Dumps.SchemaChanges); after names the reading.
func SchemaChanges(ctx context.Context, r *snapshot.Reader, target Cluster, mapping snapshot.Mapping, after string) ([]snapshot.SchemaChange, error) {
	if r.Velero {
		return nil, nil
	}
	d := databases.Dumps{Config: target.Config, Client: target.Client, Plan: r.Manifest.Plan, Mapping: EffectiveMapping(r, mapping)}
	return d.SchemaChanges(ctx, r, after)
}

// PreflightMovers says, as plan findings, in which namespaces the source's admission, and the
// target's where it has the namespace already, would refuse the mover pods that read and write
// the plan's claims (volumes.Contents.PreflightMovers), before anything is stopped; target may be
// nil (a plan of the source alone); mapping renames namespaces on the target, over ferry.yaml's.
func PreflightMovers(ctx context.Context, plan *plans.Plan, image string, source Cluster, target *Cluster, mapping snapshot.Mapping) ([]plans.Finding, error) {
	findings, err := volumes.Contents{Config: source.Config, Client: source.Client, Plan: plan, Image: image}.PreflightMovers(ctx, "source", false)
	if err != nil || target == nil {
		return findings, err
	}
	more, err := volumes.Contents{Config: target.Config, Client: target.Client, Plan: plan, Image: image, Mapping: EffectiveMappingOf(plan, mapping)}.PreflightMovers(ctx, "target", true)
	return append(findings, more...), err
}

// PreflightDatabases says, as plan findings, what of the plan's databases the target's servers
// could not take from a backup of the source (databases.Dumps.PreflightTarget), before anything
// is stopped or dumped; mapping renames namespaces on the target, over ferry.yaml's.
func PreflightDatabases(ctx context.Context, plan *plans.Plan, source, target Cluster, mapping snapshot.Mapping) ([]plans.Finding, error) {
	from := databases.Dumps{Config: source.Config, Client: source.Client, Plan: plan}
	to := databases.Dumps{Config: target.Config, Client: target.Client, Plan: plan, Mapping: EffectiveMappingOf(plan, mapping)}
	return to.PreflightTarget(ctx, from)
}
