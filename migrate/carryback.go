package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/kinds"
	"github.com/ferrykube/ferry/snapshot/resources"
	"github.com/ferrykube/ferry/snapshot/volumes"
)

// RollbackOptions say how to go back to blue once green may hold writes blue lacks.
type RollbackOptions struct {
	Why string
	// CarryBack brings green's writes back to blue first: green's writers stop, green is backed
	// up, that backup is restored onto blue replacing blue's copies and verified there.
	CarryBack bool
	// DiscardGreenWrites goes back without them.
	DiscardGreenWrites bool
	// DespitePartialCarryBack lets DiscardGreenWrites go back though a carry-back began writing
	// green's data into blue and did not finish, leaving blue so.
	DespitePartialCarryBack bool
	// By names who chose, for the journal.
	By string
}

// Notes of a rollback.
const (
	// NoteCarryBack starts a carry-back ("carry-back requested by WHO"); from then on a rollback
	// of the run carries back until it is done.
	NoteCarryBack = "carry-back requested"
	// NoteWritesDiscarded records who chose to roll back without green's writes.
	NoteWritesDiscarded = "green's writes discarded"
	// NoteCarryingBack marks that the carry-back checked every stream of green's backup and
	// begins writing it into blue: until its step is done, blue may hold part of it.
	NoteCarryingBack = "carry-back writing into blue"
	// NoteBlueStarting marks that a rollback begins starting blue's writers: from then on blue may
	// take writes of its own, which a carry-back of green's would overwrite.
	NoteBlueStarting = "blue's writers starting"
	// NoteGreenRanLate marks that green's writers ran after green's backup for the carry-back:
	// blue would lack what they wrote, so the carry-back cannot end as done.
	NoteGreenRanLate = "green's writers ran after its backup"
)

// lateWriters says what a NoteGreenRanLate note means and the ways on.
func (r *Runner) lateWriters(e Event) string {
	var data struct {
		Writers string `json:"writers"`
	}
	_ = json.Unmarshal(e.Data, &data)
	return fmt.Sprintf("green's writers ran after green's backup for the carry-back was made (%s), so blue would lack what they wrote then; stop what starts them, then either go back with what was carried (ferry rollback --run %s %s: blue keeps green's writes up to its backup and loses those after) or move those writes by hand",
		data.Writers, r.Journal.Run.ID, r.DiscardFlags())
}

// GreenRanLate reports whether green's writers ran after green's backup for the carry-back: the
// carry-back cannot end as done, and going back is --discard-green-writes (DiscardFlags).
func (r *Runner) GreenRanLate() bool {
	_, ok := r.lastNote(NoteGreenRanLate)
	return ok && !r.Journal.IsDone(RolledBack, 0)
}

// DiscardFlags are the flags of a rollback that goes back without green's writes now.
func (r *Runner) DiscardFlags() string {
	if r.PartlyCarriedBack() {
		return "--discard-green-writes --despite-partial-carry-back"
	}
	return "--discard-green-writes"
}

// RollingBack reports whether a rollback began and is not done: only the rollback goes on.
func (r *Runner) RollingBack() bool {
	_, began := r.Journal.Last(RolledBack, Begin, 0)
	return began && !r.Journal.IsDone(RolledBack, 0)
}

// ErrGreenWrites matches Rollback's refusal to drop what green may have written.
var ErrGreenWrites = errors.New("green may hold writes that a rollback would lose")

// ErrPartlyCarried matches Rollback's refusal to discard green's writes once a carry-back began
// writing them into blue and did not finish: blue may hold part of green's data and part of its
// own (a database half loaded, its MySQL triggers taken off), and would start so.
var ErrPartlyCarried = errors.New("a carry-back began writing green's data into blue and did not finish")

// Rollback puts traffic back to blue's saved state, starts blue's writers again and stops green's.
// Blue was never changed beyond its quiesce, so it serves as it did. Once green may have taken
// writes, it refuses and names what would be lost, unless told to carry them back to blue first
// or to discard them (either choice is journaled with who made it). A carry-back that was begun
// goes on, each finished step skipped, unless the writes are now discarded.
func (r *Runner) Rollback(ctx context.Context, o RollbackOptions) error {
	ctx, stop := r.lease.bind(ctx) // ends when the lease is lost
	defer stop()
	_, quiescing := r.Journal.Last(Quiesced, Begin, 0)
	blueStarting, blueStarted := r.lastNote(NoteBlueStarting)
	switch {
	case !quiescing:
		note := ""
		if _, began := r.Journal.Last(Staged, Begin, 0); began {
			// Blue never stopped, but a round may have written green: say so.
			note = "; its pre-copy left blue's claims, with their namespaces, on green (ferry never deletes them)"
		}
		return fmt.Errorf("run %s never quiesced blue: nothing to roll back (state %q)%s: %w", r.Journal.Run.ID, r.Journal.Current(), note, ErrStopped)
	case r.Journal.Current() == Finalized:
		return fmt.Errorf("run %s is finalized: %w", r.Journal.Run.ID, ErrStopped)
	case o.CarryBack && o.DiscardGreenWrites:
		return badinput.Value("rollback", "", "carrying green's writes back and discarding them exclude each other: carry them back, or drop them")
	case o.CarryBack && !r.Journal.IsDone(BlueVerified, 0) && (blueStarted || r.Journal.IsDone(RolledBack, 0)):
		at := blueStarting.At
		if !blueStarted {
			e, _ := r.Journal.Last(RolledBack, Done, 0)
			at = e.At
		}
		return fmt.Errorf("run %s started blue's writers again at %s without green's writes: blue may hold writes of its own since, which carrying green's back would overwrite: %w",
			r.Journal.Run.ID, at.Local().Format(time.RFC3339), ErrStopped)
	}
	if o.Why == "" {
		o.Why = "by hand"
	}
	// Once blue's writers began to start, what green took was decided on: the rollback goes on.
	if e, ok := r.lastNote(NoteGreenWrites); ok && !r.Journal.IsDone(RolledBack, 0) && !blueStarted {
		_, carrying := r.carryBackNote()
		switch {
		case o.DiscardGreenWrites:
			if e, _ := r.lastNote(NoteCarryingBack); r.PartlyCarriedBack() && !o.DespitePartialCarryBack {
				return fmt.Errorf("run %s: %w (at %s): blue may hold part of green's data and part of its own, and discarding green's writes would start it so",
					r.Journal.Run.ID, ErrPartlyCarried, e.At.Local().Format(time.RFC3339))
			}
			if err := r.record(ctx, Event{State: r.Journal.Current(), Phase: Note, Detail: NoteWritesDiscarded + " by " + o.By}); err != nil {
				return err
			}
		case o.CarryBack || carrying:
			// Green's names map back to blue's only when no two of blue's namespaces became one;
			// the maps are checked when given, this holds runs journaled before that.
			if err := config.CheckNamespaceMap(kinds.EffectiveMappingOf(r.plan, r.o.Mapping).Namespaces); err != nil {
				return fmt.Errorf("run %s cannot carry green's writes back: %w", r.Journal.Run.ID, err)
			}
			if !carrying {
				if err := r.record(ctx, Event{State: r.Journal.Current(), Phase: Note, Detail: NoteCarryBack + " by " + o.By}); err != nil {
					return err
				}
			}
			if e, ok := r.lastNote(NoteGreenRanLate); ok {
				return fmt.Errorf("run %s: %s (seen at %s): %w", r.Journal.Run.ID, r.lateWriters(e), e.At.Local().Format(time.RFC3339), ErrStopped)
			}
			if err := r.carryBack(ctx); err != nil {
				return err
			}
			// Green's backup holds what its writers wrote until it was made: one started since
			// (a GitOps tool's self-heal, an operator) may have written what blue would lack.
			ran, err := r.quiescer(r.o.Green, true).Held(ctx)
			if err != nil {
				return fmt.Errorf("check green's writers stayed stopped: %w", err)
			}
			if len(ran) > 0 {
				data, _ := json.Marshal(map[string]string{"writers": strings.Join(ran[:min(len(ran), 5)], "; ")})
				e := Event{State: r.Journal.Current(), Phase: Note, Detail: NoteGreenRanLate, Data: data}
				if err := r.record(ctx, e); err != nil {
					return err
				}
				return fmt.Errorf("run %s: %s: %w", r.Journal.Run.ID, r.lateWriters(e), ErrStopped)
			}
			o.Why += ", green's writes carried back"
		default:
			return fmt.Errorf("%w since %s: %s",
				ErrGreenWrites, e.At.Local().Format(time.RFC3339), r.atRisk(ctx))
		}
	}
	return r.rollback(ctx, o.Why, true)
}

// CarryingBack reports whether a carry-back was asked for and the run has not rolled back yet.
func (r *Runner) CarryingBack() bool {
	_, ok := r.carryBackNote()
	return ok && !r.Journal.IsDone(RolledBack, 0)
}

// PartlyCarriedBack reports whether a carry-back began writing green's data into blue and did
// not finish: blue may hold part of it.
func (r *Runner) PartlyCarriedBack() bool {
	_, began := r.lastNote(NoteCarryingBack)
	// Objects that awaited blue's writers are carried back only once those start.
	awaiting := len(r.awaitingOf(CarriedBack)) > 0 && !r.notedIn(RolledBack, NoteAwaitingMade)
	return began && (!r.Journal.IsDone(CarriedBack, 0) || awaiting)
}

func (r *Runner) carryBackNote() (Event, bool) {
	for _, e := range r.Journal.Events() {
		if e.Phase == Note && strings.HasPrefix(e.Detail, NoteCarryBack) {
			return e, true
		}
	}
	return Event{}, false
}

// CarryBackName is the name of the backup of green a carry-back restores onto blue.
func CarryBackName(runID string) string { return runID + "-carry-back" }

// carryBack runs the carry-back's steps, each journaled and skipped once done.
func (r *Runner) carryBack(ctx context.Context) error {
	if r.plan == nil {
		return fmt.Errorf("run %s has no plan in its journal: %w", r.Journal.Run.ID, ErrStopped)
	}
	return r.steps(ctx, []stateStep{
		{GreenQuiesced, r.quiesceGreenStep},
		{GreenBackedUp, r.backupGreenStep},
		{CarriedBack, r.carryStep},
		{BlueVerified, r.verifyBlueStep},
	})
}

func (r *Runner) quiesceGreenStep(ctx context.Context) (any, string, error) {
	q := r.quiescer(r.o.Green, true)
	claims := movedClaims(r.plan, kinds.EffectiveMappingOf(r.plan, r.o.Mapping).Namespace)
	if err := readyToStop(ctx, q, claims, "blue", "end them and run the carry-back again"); err != nil {
		return nil, "", err
	}
	items, err := q.Stop(ctx)
	if err != nil {
		return items, "", fmt.Errorf("stop green's writers: %w", err)
	}
	return items, stoppedLine(items, "writers stopped on green"), nil
}

// greenConfig is the run's configuration in green's names: what it selects, where its databases
// and buckets run and what its quiesce rules stop, mapped as the restore mapped them; its maps
// lead back to blue's names.
func (r *Runner) greenConfig() config.Planning {
	m := kinds.EffectiveMappingOf(r.plan, r.o.Mapping)
	cfg := r.plan.Config
	mapAll := func(names []string) []string {
		out := make([]string, len(names))
		for i, n := range names {
			out[i] = m.Namespace(n)
		}
		return out
	}
	cfg.Include.Namespaces = mapAll(cfg.Include.Namespaces)
	cfg.Exclude.Namespaces = mapAll(cfg.Exclude.Namespaces)
	// Green's data is where the run restored it; the carry-back restores it where blue keeps it.
	cfg.Databases = append([]config.Database(nil), cfg.Databases...)
	for i := range cfg.Databases {
		cfg.Databases[i] = cfg.Databases[i].Reversed(m.Namespace)
	}
	cfg.Buckets = append([]config.Bucket(nil), cfg.Buckets...)
	for i := range cfg.Buckets {
		cfg.Buckets[i] = cfg.Buckets[i].Reversed(m.Namespace)
	}
	cfg.Quiesce = append([]config.QuiesceRule(nil), cfg.Quiesce...)
	for i := range cfg.Quiesce {
		cfg.Quiesce[i].Namespace = m.Namespace(cfg.Quiesce[i].Namespace)
	}
	back := m.Inverse()
	cfg.NamespaceMap, cfg.StorageClassMap = back.Namespaces, back.StorageClasses
	return cfg
}

func (r *Runner) backupGreenStep(ctx context.Context) (any, string, error) {
	original, err := snapshot.ReadManifest(ctx, r.o.Store, r.Journal.Run.Backup)
	if err != nil {
		return nil, "", err
	}
	var recipients []string
	if original.Encryption != nil {
		recipients = original.Encryption.Recipients // green's data is kept as the run's backup was
	}
	var left []string
	data, detail, err := r.backup(ctx, CarryBackName(r.Journal.Run.ID), r.o.Green, []Quiescer{r.quiescer(r.o.Green, true)}, recipients, func() (*plans.Plan, error) {
		plan, err := r.greenPlan(ctx)
		if err != nil {
			return nil, err
		}
		left = r.leaveOutSkipped(plan, original)
		return plan, nil
	}, func(m *snapshot.Manifest) []string {
		return lacks(original, m, kinds.EffectiveMappingOf(r.plan, r.o.Mapping))
	})
	if len(left) > 0 && err == nil {
		detail += "; left out, as blue had nothing of them for the run's backup: " + strings.Join(left, ", ")
	}
	return data, detail, err
}

func (r *Runner) greenPlan(ctx context.Context) (*plans.Plan, error) {
	plan, err := plans.Inventory(ctx, r.o.Green.Plans(), plans.Options{Config: r.greenConfig(), Context: r.o.GreenCtx, Concurrency: r.o.Parallel, Log: r.o.Log})
	if err != nil {
		return nil, fmt.Errorf("plan green: %w", err)
	}
	if r.o.Upgrade != nil {
		plans.CarryBackVersions(plan, r.plan)
	}
	keepHeld(plan, r.plan, kinds.EffectiveMappingOf(r.plan, r.o.Mapping))
	return plan, nil
}

// keepHeld marks green's copy of each claim whose files moved as a database or bucket of the
// run (run's) as held still, when green keeps that item elsewhere (a target section) and so
// nothing on green holds it: the copy the restore made of it is not the item's data, and carried
// back it would replace the files of blue's server.
func keepHeld(green, run *plans.Plan, m snapshot.Mapping) {
	held := map[string]string{}
	for _, v := range run.Volumes {
		if v.Holds != "" {
			held[m.Namespace(v.Namespace)+"/"+v.Name] = v.Holds
		}
	}
	for i, v := range green.Volumes {
		if h := held[v.Namespace+"/"+v.Name]; h != "" && v.Holds == "" {
			green.Volumes[i].Holds = h
		}
	}
}

// leaveOutSkipped takes out of green's plan the volumes, databases and buckets that the run's
// backup skipped on blue (a database without a running pod), and the claims it found without
// data (no volume there) that have none on green either: green's copies never came from blue,
// and hold nothing of green's. It names them. A claim without a volume on blue that green gave
// one (a notebook first started on green) stays: green may have written to it (withoutUnwritten).
func (r *Runner) leaveOutSkipped(plan *plans.Plan, original *snapshot.Manifest) []string {
	m := kinds.EffectiveMappingOf(r.plan, r.o.Mapping)
	skipped, noData := itemNames(original.Skipped, m), itemNames(original.NoData, m)
	var left []string
	out := func(what string) bool {
		if skipped[what] || noData[what] {
			left = append(left, what)
			return true
		}
		return false
	}
	plan.Volumes = slices.DeleteFunc(plan.Volumes, func(v plans.Volume) bool {
		what := "volume " + v.Namespace + "/" + v.Name
		return (skipped[what] || v.NoVolumeYet()) && out(what)
	})
	plan.Databases = slices.DeleteFunc(plan.Databases, func(d plans.DataItem) bool { return out("database " + d.Name) })
	plan.Buckets = slices.DeleteFunc(plan.Buckets, func(b plans.DataItem) bool { return out("bucket " + b.Name) })
	return left
}

// itemNames are the names of items a backup skipped or found without data ("volume ns/claim",
// "database x"), a claim's namespace mapped by m.
func itemNames(items []snapshot.Skipped, m snapshot.Mapping) map[string]bool {
	out := map[string]bool{}
	for _, s := range items {
		if ns, claim, ok := strings.Cut(s.Name, "/"); ok && s.Kind == "volume" {
			out[s.Kind+" "+m.Namespace(ns)+"/"+claim] = true
		} else {
			out[s.Kind+" "+s.Name] = true
		}
	}
	return out
}

// withoutUnwritten is green's backup (carried) without the volumes of the claims that had none on
// blue (the run's backup, original, found no data) and hold nothing on green (a class that binds
// at once gave them an empty one): blue's claim, without a volume, is left as it is, not bound to
// receive nothing. Those green wrote to are carried back, blue's claim bound for the restore's
// mover as for blue's own first pod. It names, in blue's names, the volumes left out.
func (r *Runner) withoutUnwritten(ctx context.Context, original *snapshot.Manifest, carried *snapshot.Reader) (*snapshot.Reader, []string, error) {
	m := kinds.EffectiveMappingOf(r.plan, r.o.Mapping)
	noData := itemNames(original.NoData, m)
	// A file the backup of green skipped (it changed while read) was written there, though the
	// volume's list does not hold it.
	skippedFiles := map[string]bool{}
	for _, s := range carried.Manifest.Skipped {
		if claim, _, ok := strings.Cut(s.Name, ":"); ok && s.Kind == volumes.SkippedFileKind {
			skippedFiles[claim] = true
		}
	}
	unwritten := map[string]bool{}
	var names []string
	blue := m.Inverse()
	for _, v := range carried.Manifest.Volumes {
		name := v.Namespace + "/" + v.Name
		if !noData["volume "+name] || skippedFiles[name] {
			continue
		}
		empty, err := carried.VolumeHoldsNothing(ctx, v)
		if err != nil {
			return nil, nil, fmt.Errorf("backup %s: volume %s: %w", carried.Manifest.Name, name, err)
		}
		if empty {
			unwritten[name] = true
			names = append(names, blue.Namespace(v.Namespace)+"/"+v.Name)
		}
	}
	if len(unwritten) == 0 {
		return carried, nil, nil
	}
	return kinds.Without(carried, func(kind, name string) bool { return kind == "volume" && unwritten[name] }), names, nil
}

// lacks names the databases, volumes and buckets the run moved to green (those its backup of blue
// holds) that the backup of green does not hold, in green's names: their writes on green would
// not come back to blue.
func lacks(original, carried *snapshot.Manifest, m snapshot.Mapping) []string {
	held := map[string]bool{}
	for _, d := range carried.Databases {
		held["database "+d.Name] = true
	}
	for _, v := range carried.Volumes {
		held["volume "+v.Namespace+"/"+v.Name] = true
	}
	for _, b := range carried.Buckets {
		held["bucket "+b.Name] = true
	}
	var out []string
	check := func(what string) {
		if !held[what] {
			out = append(out, what)
		}
	}
	for _, d := range original.Databases {
		check("database " + d.Name)
	}
	for _, v := range original.Volumes {
		check("volume " + m.Namespace(v.Namespace) + "/" + v.Name)
	}
	for _, b := range original.Buckets {
		check("bucket " + b.Name)
	}
	return out
}

// carryRecord is what the carried-back step journals.
type carryRecord struct {
	Objects ObjectChanges `json:"objects"`
	// Admitted are the fields green's admission set on the objects the restore made, by object
	// key (resources.CarryBack.Admitted): the carry-back's later steps replay them.
	Admitted map[string][]string `json:"admitted,omitempty"`
	// Summary.Awaiting are made once blue's writers start (admitCarried).
	Summary
}

// carryBackOptions are the options of the carry-back's restore and verify onto blue, whose
// writers are stopped: an object whose admission webhook's server cannot be called awaits them.
func (r *Runner) carryBackOptions() kinds.RestoreOptions {
	return kinds.RestoreOptions{Parallel: r.o.Parallel, MoverImage: r.o.MoverImage, WaitTimeout: r.o.WaitTimeout, Upgrade: r.o.Upgrade != nil,
		AwaitAdmission: true, Log: r.o.Log}
}

// admitCarried makes on blue, once its writers started, the objects the carry-back left awaiting
// them (ids), and verifies them (admit).
func (r *Runner) admitCarried(ctx context.Context, ids []string) error {
	rd, cb, _, err := r.carryBackPlan(ctx, r.carriedAdmission())
	if err != nil {
		return err
	}
	defer cb.Close()
	o := r.carryBackOptions()
	o.AwaitAdmission, o.AdmissionWait = false, AdmissionWait
	return admit(ctx, kinds.CarryBackRestorers(rd, cb.Only(ids), r.o.Blue, o)[0], rd, len(ids), "blue")
}

// carriedAdmission replays what green's admission set on the objects the restore made, as the
// carry-back's restore found it: blue is verified against what was carried.
func (r *Runner) carriedAdmission() resources.Admission {
	var rec carryRecord
	if e, ok := r.Journal.Last(CarriedBack, Done, 0); ok {
		_ = json.Unmarshal(e.Data, &rec)
	}
	return resources.RecordedAdmission(rec.Admitted)
}

// carryBackPlan compares the run's backup with the backup of green; admission names what green's
// admission set on the objects the restore made. The backup of green it returns holds no volume
// of a claim that had none on blue and green left empty; unwritten names those (withoutUnwritten).
func (r *Runner) carryBackPlan(ctx context.Context, admission resources.Admission) (_ *snapshot.Reader, _ *resources.CarryBack, unwritten []string, _ error) {
	original, err := r.reader(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	before, err := resources.ReadArchive(ctx, original)
	if err != nil {
		return nil, nil, nil, err
	}
	defer before.Close()
	carried, err := snapshot.Open(ctx, r.o.Store, CarryBackName(r.Journal.Run.ID), r.o.Identities)
	if err != nil {
		return nil, nil, nil, err
	}
	if carried, unwritten, err = r.withoutUnwritten(ctx, original.Manifest, carried); err != nil {
		return nil, nil, nil, err
	}
	after, err := resources.ReadArchive(ctx, carried)
	if err != nil {
		return nil, nil, nil, err
	}
	defer after.Close()
	m := kinds.EffectiveMappingOf(r.plan, r.o.Mapping)
	cb, err := resources.PlanCarryBack(ctx, before, after, m, r.restoreBegan(), r.plan.Config, plans.PlacementOf(r.plan), admission)
	if err != nil {
		return nil, nil, nil, err
	}
	if !r.notedIn(Shifting, NoteAwaitingMade) {
		// Green's restore left them awaiting its writers, and they were never made there.
		if kept := cb.Unmade(r.awaitingOf(Restored), m); len(kept) > 0 {
			r.o.Log.Info("kept on blue: never made on green, as they awaited its writers", "objects", len(kept), "e.g.", kept[0])
		}
	}
	if err := cb.CheckDeletions(carried.Manifest.Plan); err != nil {
		cb.Close()
		return nil, nil, nil, fmt.Errorf("backup %s: %w; once green lists them, run the carry-back again (a new backup of green is made): %w", carried.Manifest.Name, err, ErrStopped)
	}
	return carried, cb, unwritten, nil
}

// carryBackRun restores or verifies the backup of green on blue.
// Green's admission is asked what it makes of the objects the restore made when they are
// restored, and that is replayed when they are verified. The restore's report names the volumes
// it leaves as blue has them (withoutUnwritten), which unwritten returns.
func (r *Runner) carryBackRun(ctx context.Context, command string) (_ *snapshot.Report, _ *resources.CarryBack, unwritten []string, _ error) {
	admission := r.carriedAdmission()
	if command == kinds.Restore {
		admission = resources.DryRunAdmission(r.o.Green.Dynamic)
	}
	rd, cb, unwritten, err := r.carryBackPlan(ctx, admission)
	if err != nil {
		return nil, nil, nil, err
	}
	defer cb.Close() // its spool; the names it keeps stay
	restorers := kinds.CarryBackRestorers(rd, cb, r.o.Blue, r.carryBackOptions())
	var rep *snapshot.Report
	if command == kinds.Verify {
		rep, err = kinds.Run(ctx, command, rd, restorers, r.o.Log)
	} else {
		rep, err = kinds.RestoreAfterCheck(ctx, rd, restorers, r.o.Log, func(ctx context.Context) error {
			return r.record(ctx, Event{State: CarriedBack, Phase: Note, Detail: NoteCarryingBack})
		})
	}
	if rep != nil && command == kinds.Restore {
		for _, name := range unwritten {
			rep.Add("volumes", snapshot.StatusUnchanged, name, unwrittenDetail)
		}
	}
	return rep, cb, unwritten, err
}

// unwrittenDetail says why the carry-back leaves a claim's volume as blue has it (withoutUnwritten).
const unwrittenDetail = "it had no volume on blue, and green's copy holds nothing: blue's claim is left as it is"

func (r *Runner) carryStep(ctx context.Context) (any, string, error) {
	rep, cb, unwritten, err := r.carryBackRun(ctx, kinds.Restore)
	if errors.Is(err, snapshot.ErrRefused) {
		return carryRecord{Summary: summarize(rep)}, "", refusedStops(err)
	}
	if err != nil {
		return nil, "", err
	}
	rec := carryRecord{Objects: ObjectChanges{Created: cb.Created, Changed: cb.Changed, Deleted: cb.DeletedIDs()}, Admitted: cb.Admitted, Summary: summarize(rep)}
	if failed := rep.Problems(snapshot.StatusFailed); len(failed) > 0 {
		return rec, "", fmt.Errorf("%d items failed to carry back to blue, e.g. %s %s: %s: %w", len(failed), failed[0].Kind, failed[0].Name, failed[0].Detail, ErrStopped)
	}
	detail := fmt.Sprintf("objects %d created, %d changed, %d deleted on green; on blue: %s", len(cb.Created), len(cb.Changed), len(cb.Deleted),
		countLine(rep, snapshot.StatusRestored, snapshot.StatusUpdated, snapshot.StatusDeleted))
	if len(cb.Admitted) > 0 {
		detail += fmt.Sprintf("; %d kept blue's fields where green's admission changed them as the restore made them (e.g. %s)", len(cb.Admitted), slices.Min(slices.Collect(maps.Keys(cb.Admitted))))
	}
	if len(unwritten) > 0 {
		detail += "; left as blue has them, as they had no volume there and green's copies hold nothing: volume " + strings.Join(unwritten, ", volume ")
	}
	if len(rec.Awaiting) > 0 {
		detail += fmt.Sprintf("; %d await blue's writers, one of which may serve their admission webhook (e.g. %s): made once they start", len(rec.Awaiting), rec.Awaiting[0])
	}
	return rec, detail, nil
}

func (r *Runner) verifyBlueStep(ctx context.Context) (any, string, error) {
	rep, _, _, err := r.carryBackRun(ctx, kinds.Verify)
	if err != nil {
		return nil, "", err
	}
	// Blue is verified against the backup of green, which covers only what it holds: each
	// database, volume and bucket the run moved must be in it, or its writes stayed on green.
	original, err := snapshot.ReadManifest(ctx, r.o.Store, r.Journal.Run.Backup)
	if err != nil {
		return nil, "", err
	}
	carried, err := snapshot.ReadManifest(ctx, r.o.Store, CarryBackName(r.Journal.Run.ID))
	if err != nil {
		return nil, "", err
	}
	for _, what := range lacks(original, carried, kinds.EffectiveMappingOf(r.plan, r.o.Mapping)) {
		kind, name, _ := strings.Cut(what, " ")
		rep.Add(kind+"s", snapshot.StatusMissing, name, "not in green's backup "+carried.Name+": its writes on green were not carried back")
	}
	// The objects that await blue's writers are verified once made (admitCarried).
	awaiting := r.awaitingOf(CarriedBack)
	if problems := withoutUnchecked(withoutAwaiting(rep.Problems(), awaiting), r.skippedBy(GreenBackedUp)); len(problems) > 0 {
		return summarize(rep), "", fmt.Errorf("blue differs from green's backup in %d items, e.g. %s %s %s: %s: %w", len(problems), problems[0].Kind, problems[0].Status, problems[0].Name, problems[0].Detail, ErrStopped)
	}
	detail := "blue holds what green held: " + countLine(rep, snapshot.StatusIdentical, snapshot.StatusDeleted, snapshot.StatusHealthy)
	if len(awaiting) > 0 {
		detail += fmt.Sprintf(", but for the %d objects that await blue's writers", len(awaiting))
	}
	return summarize(rep), detail, nil
}

// atRisk names what green holds that blue would not get back: its databases, volumes and
// buckets, and the objects created, changed or deleted on green since the restore.
func (r *Runner) atRisk(ctx context.Context) string {
	var what []string
	if m, err := snapshot.ReadManifest(ctx, r.o.Store, r.Journal.Run.Backup); err == nil {
		mapping := kinds.EffectiveMappingOf(r.plan, r.o.Mapping)
		for _, d := range m.Databases {
			what = append(what, "database "+d.Name)
		}
		for _, v := range m.Volumes {
			what = append(what, "volume "+mapping.Namespace(v.Namespace)+"/"+v.Name)
		}
		for _, name := range slices.Sorted(maps.Keys(itemNames(m.NoData, mapping))) {
			if strings.HasPrefix(name, "volume ") {
				what = append(what, name+" (no volume on blue: if green gave it one)")
			}
		}
		for _, b := range m.Buckets {
			what = append(what, "bucket "+b.Name)
		}
	}
	var parts []string // a run that moved objects only has no data to name
	if len(what) > 0 {
		parts = append(parts, "writes to "+strings.Join(what, ", "))
	}
	changes, unsure, err := r.liveChanges(ctx)
	if err != nil {
		return strings.Join(append(parts, "objects created or changed on green since the restore (listing green failed: "+err.Error()+")"), "; ")
	}
	if len(unsure) > 0 {
		parts = append(parts, "objects green may have changed or deleted, which its plan does not list: "+strings.Join(unsure, "; "))
	}
	for _, c := range []struct {
		what string
		ids  []string
	}{{"created", changes.Created}, {"changed", changes.Changed}, {"deleted", changes.Deleted}} {
		if len(c.ids) > 0 {
			parts = append(parts, fmt.Sprintf("objects %s on green since the restore: %s", c.what, strings.Join(c.ids, ", ")))
		}
	}
	if len(parts) == 0 {
		return "no database, volume or bucket moved, and no object changed on green since the restore"
	}
	return strings.Join(parts, "; ")
}

// restoreBegan is when the restore onto green first began: what green made before is its own.
func (r *Runner) restoreBegan() time.Time {
	for _, e := range r.Journal.Events() {
		if e.State == Restored && e.Phase == Begin {
			return e.At
		}
	}
	return time.Time{}
}

// liveChanges compares the run's backup with green's objects as they are now.
// Deletions green's plan cannot vouch for are left out and named by API group (unsure).
func (r *Runner) liveChanges(ctx context.Context) (changes ObjectChanges, unsure []string, err error) {
	if r.plan == nil {
		return ObjectChanges{}, nil, errors.New("the run has no plan")
	}
	rd, err := r.reader(ctx)
	if err != nil {
		return ObjectChanges{}, nil, err
	}
	before, err := resources.ReadArchive(ctx, rd)
	if err != nil {
		return ObjectChanges{}, nil, err
	}
	defer before.Close()
	// Green's writers were started from the quiesce records blue's copies carry: that is not a
	// write to carry back.
	before.Transform(startedForm)
	plan, err := r.greenPlan(ctx)
	if err != nil {
		return ObjectChanges{}, nil, err
	}
	now, err := resources.Objects{Dynamic: r.o.Green.Dynamic, Plan: plan}.Live(ctx)
	if err != nil {
		return ObjectChanges{}, nil, err
	}
	defer now.Close()
	cb, err := resources.PlanCarryBack(ctx, before, now, kinds.EffectiveMappingOf(r.plan, r.o.Mapping), r.restoreBegan(), r.plan.Config, plans.PlacementOf(r.plan), resources.DryRunAdmission(r.o.Green.Dynamic))
	if err != nil {
		return ObjectChanges{}, nil, err
	}
	defer cb.Close()
	unsure = cb.SureDeletions(plan)
	// Objects a controller owns (a Deployment's ReplicaSets scaling with it) follow their owner.
	controlled := map[string]bool{}
	for _, entries := range cb.Expected.ByResource {
		for _, e := range entries {
			if cb.Expected.Controlled(e) {
				controlled[e.ID()] = true
			}
		}
	}
	changed := slices.DeleteFunc(cb.Changed, func(id string) bool { return controlled[id] })
	for i, id := range changed {
		changed[i] = id + " (" + cb.Differences[id] + ")"
	}
	return ObjectChanges{Created: cb.Created, Changed: changed, Deleted: cb.DeletedIDs()}, unsure, nil
}
