package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"time"

	"filippo.io/age"
	"github.com/ferrykube/ferry/migrate/gates"
	"github.com/ferrykube/ferry/migrate/traffic"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/kinds"
	"github.com/ferrykube/ferry/snapshot/resources"
	"github.com/ferrykube/ferry/storage"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
)

// Options are what a run needs: storage, both clusters and how to move traffic.
type Options struct {
	Store                 storage.Backend
	Blue, Green           kinds.Cluster
	BlueContext, GreenCtx string
	Config                config.Config
	Mapping               snapshot.Mapping
	Parallel              int
	MoverImage            string
	EncryptTo             []string
	Identities            []age.Identity
	WaitTimeout           time.Duration
	LeaseTTL              time.Duration
	// Upgrade makes the run an upgrade: green runs the platform's new release, and only the state
	// moves (see plans.PlanUpgrade). A resumed run takes it from its journal.
	Upgrade *plans.UpgradeOptions
	// Warm makes the run warm: blue's volumes are copied to green in rounds while blue is live,
	// and only the last delta once it is quiesced. A resumed run takes it from its journal.
	Warm *Warm
	// AllowSkipped lets the run go on when the backup skipped items (databases without a running
	// pod, claims whose volume is lost): they are in the journal and the report either way.
	AllowSkipped bool
	// Switcher moves traffic; nil means the operator moves it (the run stops at shifted once green's
	// writers run).
	Switcher traffic.Switcher
	Gates    []gates.Gate
	// Clock times a traffic step's soak when there are no gates to watch it; nil is the real one.
	Clock clock.Clock
	// Crash, when set, is called after each journal event: tests end the process there to prove
	// that a resumed run finishes without repeating a finished step.
	Crash func(Event)
	Log   *slog.Logger
	// Out receives one line per transition, for people watching.
	Out io.Writer

	// roundDone, when set, sees each pre-copy round's record before it is journaled: tests set
	// the delta the fakes cannot produce.
	roundDone func(*Round)
}

// Runner drives one run.
type Runner struct {
	o       Options
	Journal *Journal
	lease   *Lease
	plan    *plans.Plan
}

// ErrPaused is returned when a gate was inconclusive: the run waits for ferry migrate --resume.
var ErrPaused = errors.New("paused")

// ErrStopped is returned when a step found what must be fixed first (blocking preflight findings,
// verification differences); the journal says what.
var ErrStopped = errors.New("stopped")

// ErrSkipped matches a run stopped because its backup skipped items (Options.AllowSkipped goes on).
var ErrSkipped = errors.New("a run that allows skipped items goes on without them")

// Start begins a new run: the journal first, then the lease on both clusters.
func Start(ctx context.Context, o Options) (*Runner, error) {
	o = o.withDefaults()
	blue, err := plans.Identify(ctx, o.Blue.Plans(), o.BlueContext)
	if err != nil {
		return nil, fmt.Errorf("blue: %w", err)
	}
	green, err := plans.Identify(ctx, o.Green.Plans(), o.GreenCtx)
	if err != nil {
		return nil, fmt.Errorf("green: %w", err)
	}
	if blue.UID != "" && blue.UID == green.UID {
		return nil, fmt.Errorf("blue and green are the same cluster (%s): %w", blue.Server, ErrStopped)
	}
	if err := CheckWarm(o.Warm, o.Upgrade != nil, len(o.EncryptTo) > 0); err != nil {
		return nil, err
	}
	now := time.Now()
	id := NewID(now)
	run := Run{ID: id, Blue: blue, Green: green, Config: o.Config, CreatedAt: now.UTC(), Backup: id, Upgrade: o.Upgrade, Pins: true, Warm: o.Warm}
	lease, err := AcquireLease(ctx, o.Store, run, o.LeaseTTL, o.Log)
	if err != nil {
		return nil, err
	}
	j, err := CreateJournal(ctx, o.Store, run)
	if err != nil {
		lease.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	j.lease = lease
	return &Runner{o: o, Journal: j, lease: lease}, nil
}

// Resume continues a run from its journal.
func Resume(ctx context.Context, o Options, id string) (*Runner, error) {
	o = o.withDefaults()
	j, err := OpenJournal(ctx, o.Store, id)
	if err != nil {
		return nil, err
	}
	o.Config, o.Upgrade, o.Warm = j.Run.Config, j.Run.Upgrade, j.Run.Warm
	lease, err := AcquireLease(ctx, o.Store, j.Run, o.LeaseTTL, o.Log)
	if err != nil {
		return nil, err
	}
	j.lease = lease
	r := &Runner{o: o, Journal: j, lease: lease}
	if e, ok := j.Last(Planned, Done, 0); ok {
		r.plan = &plans.Plan{}
		if err := json.Unmarshal(e.Data, r.plan); err != nil {
			r.Close(ctx)
			return nil, fmt.Errorf("run %s: the journal's plan: %w", id, err)
		}
	}
	return r, nil
}

func (o Options) withDefaults() Options {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Parallel <= 0 {
		o.Parallel = 8
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o
}

// holdsLease renews the run's lease, or fails once another process holds it: checked before a
// backup of the run is made complete, as before each journal event, since the renewals alone
// notice a takeover only up to a third of the TTL late.
func (r *Runner) holdsLease(ctx context.Context) error {
	if r.lease == nil {
		return nil
	}
	_, err := r.lease.fence(ctx)
	return err
}

// Close gives the lease up.
func (r *Runner) Close(ctx context.Context) error {
	if r.lease == nil {
		return nil
	}
	err := r.lease.Release(context.WithoutCancel(ctx))
	r.lease = nil
	return err
}

// record appends an event, says so, and gives a test's crash hook its chance.
func (r *Runner) record(ctx context.Context, e Event) error {
	e, err := r.Journal.Append(ctx, e)
	if err != nil {
		return err
	}
	line := fmt.Sprintf("%s %-11s %-6s", e.At.Local().Format("15:04:05"), e.State, e.Phase)
	if step := stepLabel(e.State, e.Step); step != "" {
		line += fmt.Sprintf(" %5s", step)
	}
	if e.Detail != "" {
		line += "  " + e.Detail
	}
	fmt.Fprintln(r.o.Out, line)
	if r.o.Crash != nil {
		r.o.Crash(e)
	}
	return nil
}

// step runs a step unless the journal says it is done: begin is written before it is acted on,
// done (with what it produced) after.
func (r *Runner) step(ctx context.Context, state State, step int, fn func() (data any, detail string, err error)) error {
	if r.Journal.IsDoneExactly(state, step) {
		return nil
	}
	if err := r.record(ctx, Event{State: state, Phase: Begin, Step: step}); err != nil {
		return err
	}
	data, detail, err := fn()
	if err != nil {
		// What the step found (a verification's differences, a gate's measurements) is journaled
		// with its failure: the report reads it from there. An inconclusive gate pauses the step.
		e := Event{State: state, Phase: Failed, Step: step, Detail: err.Error()}
		if errors.Is(err, ErrPaused) {
			e.Phase = Paused
		}
		if raw, merr := json.Marshal(data); merr == nil && string(raw) != "null" {
			e.Data = raw
		}
		if rerr := r.record(context.WithoutCancel(ctx), e); rerr != nil {
			r.o.Log.Error("journal", "error", rerr)
		}
		return err
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return err
	}
	return r.record(ctx, Event{State: state, Phase: Done, Step: step, Detail: detail, Data: raw})
}

// stateStep is a step of a run that takes no traffic step: its state and what it does.
type stateStep struct {
	state State
	fn    func(context.Context) (any, string, error)
}

// steps runs each step in order, unless done (step).
func (r *Runner) steps(ctx context.Context, steps []stateStep) error {
	for _, s := range steps {
		if err := r.step(ctx, s.state, 0, func() (any, string, error) { return s.fn(ctx) }); err != nil {
			return err
		}
	}
	return nil
}

// Drive runs the run forward from where its journal stands to shifted: plan, preflight, quiesce
// blue, back up, restore onto green, verify, start green's writers and shift traffic step by
// step behind the gates. A failed gate sends the traffic back to blue by itself, and the run goes
// on only by a rollback; an inconclusive one pauses.
func (r *Runner) Drive(ctx context.Context) error {
	ctx, stop := r.lease.bind(ctx) // ends when the lease is lost
	defer stop()
	switch r.Journal.Current() {
	case RolledBack:
		return fmt.Errorf("run %s was rolled back: start a new run: %w", r.Journal.Run.ID, ErrStopped)
	case Finalized:
		return nil
	}
	if _, ok := r.carryBackNote(); ok {
		return fmt.Errorf("run %s is carrying green's writes back to blue: only the carry-back goes on with it: %w", r.Journal.Run.ID, ErrStopped)
	}
	if err := r.goingBack(); err != nil {
		return err
	}
	if err := r.steps(ctx, []stateStep{
		{Planned, r.planStep},
		{Preflighted, r.preflightStep},
	}); err != nil {
		return err
	}
	if err := r.stage(ctx); err != nil {
		return err
	}
	if err := r.steps(ctx, []stateStep{
		{Quiesced, r.quiesceStep},
		{BackedUp, r.backupStep},
		{Restored, r.restoreStep},
	}); err != nil {
		return err
	}
	if w := r.warm(); w != nil {
		r.dropStages(ctx, w.Rounds)
	}
	if err := r.steps(ctx, []stateStep{{Verified, r.verifyStep}}); err != nil {
		return err
	}
	if err := r.shift(ctx); err != nil {
		return err
	}
	return r.step(ctx, Shifted, 0, func() (any, string, error) {
		return r.readSchemas(ctx, "green at the shift"), "green serves all traffic; blue is kept as it is (ferry rollback --run " + r.Journal.Run.ID + " goes back)", nil
	})
}

// goingBack refuses to take the run forward once it began going back: a rollback began (traffic
// may be on blue and blue's writers started: going on would run both), or a failed gate sent the
// traffic back (the steps done before it no longer say where traffic is).
func (r *Runner) goingBack() error {
	id := r.Journal.Run.ID
	if e, ok := r.Journal.Last(RolledBack, Begin, 0); ok {
		return fmt.Errorf("run %s began rolling back at %s: only the rollback goes on with it (ferry rollback --run %s): %w",
			id, e.At.Local().Format(time.RFC3339), id, ErrStopped)
	}
	if e, ok := r.lastNote(NoteTrafficReturned); ok {
		return fmt.Errorf("run %s sent traffic back to blue at %s, as a gate failed: it goes on only by a rollback (ferry rollback --run %s --carry-back, or --discard-green-writes); then migrate again: %w",
			id, e.At.Local().Format(time.RFC3339), id, ErrStopped)
	}
	return nil
}

// schemaRecord is what the shifted and finalized steps of an upgrade journal: each database's
// schema on green beside blue's in the run's backup, for the report.
type schemaRecord struct {
	Schemas []snapshot.SchemaChange `json:"schemas,omitempty"`
	Unread  string                  `json:"schemasUnread,omitempty"`
}

// readSchemas reads, for an upgrade, how each database's schema on green differs from blue's in
// the run's backup: what green's release migrated once its writers started. It never fails the
// step: what cannot be read is said in the record.
func (r *Runner) readSchemas(ctx context.Context, after string) any {
	if r.Journal.Run.Upgrade == nil {
		return nil
	}
	rd, err := r.reader(ctx)
	if err != nil {
		return schemaRecord{Unread: err.Error()}
	}
	changes, err := kinds.SchemaChanges(ctx, rd, r.o.Green, r.o.Mapping, after)
	if err != nil {
		return schemaRecord{Unread: err.Error()}
	}
	return schemaRecord{Schemas: changes}
}

func (r *Runner) planStep(ctx context.Context) (any, string, error) {
	plan, err := plans.Inventory(ctx, r.o.Blue.Plans(), plans.Options{Config: r.o.Config.Planning, Context: r.o.BlueContext, Concurrency: r.o.Parallel, Log: r.o.Log})
	if err != nil {
		return nil, "", fmt.Errorf("plan blue: %w", err)
	}
	detail := fmt.Sprintf("%d resource types, %d claims, %d databases, %d buckets", len(plan.Resources), len(plan.Volumes), len(plan.Databases), len(plan.Buckets))
	if r.o.Upgrade != nil {
		if err := plans.PlanUpgrade(ctx, plan, r.o.Blue.Plans(), r.o.Green.Plans(), *r.o.Upgrade); err != nil {
			return nil, "", fmt.Errorf("plan the upgrade onto green: %w", err)
		}
		u := plan.Upgrade
		detail += fmt.Sprintf("; upgrade: %d parts move, %d are left to green's release, %d CRDs removed, %d added, %d changed, %d objects left behind",
			len(u.Moves), len(u.LeftToRelease), len(u.Release.CRDsRemoved), len(u.Release.CRDsAdded), len(u.Release.CRDsChanged), leftBehind(u))
	}
	r.plan = plan
	return plan, detail, nil
}

func leftBehind(u *plans.Upgrade) int {
	n := 0
	for _, s := range u.Stranded {
		if s.LeftBehind {
			n++
		}
	}
	return n
}

func (r *Runner) preflightStep(ctx context.Context) (any, string, error) {
	if err := plans.Preflight(ctx, r.plan, r.o.Green.Plans(), r.o.GreenCtx); err != nil {
		return nil, "", fmt.Errorf("preflight green: %w", err)
	}
	green := r.o.Green.Plans()
	if err := plans.PreflightQuotas(ctx, r.plan, r.o.Blue.Plans(), &green, r.o.Parallel); err != nil {
		return nil, "", fmt.Errorf("preflight of the quotas: %w", err)
	}
	if err := plans.PreflightPods(ctx, r.plan, r.o.Blue.Plans(), green); err != nil {
		return nil, "", fmt.Errorf("preflight of the workloads' pods: %w", err)
	}
	findings, err := kinds.PreflightDatabases(ctx, r.plan, r.o.Blue, r.o.Green, r.o.Mapping)
	if err != nil {
		return nil, "", fmt.Errorf("preflight of the databases: %w", err)
	}
	r.plan.Findings = append(r.plan.Findings, findings...)
	if findings, err = kinds.PreflightMovers(ctx, r.plan, r.o.MoverImage, r.o.Blue, &r.o.Green, r.o.Mapping); err != nil {
		return nil, "", fmt.Errorf("preflight of the mover pods: %w", err)
	}
	r.plan.Findings = append(r.plan.Findings, findings...)
	if blocking := r.plan.Blocking(); len(blocking) > 0 {
		var msgs []string
		for _, f := range blocking {
			msgs = append(msgs, f.Subject+": "+f.Message)
		}
		return nil, "", fmt.Errorf("%d blocking findings: %s: %w", len(blocking), strings.Join(msgs, "; "), ErrStopped)
	}
	return r.plan.Findings, fmt.Sprintf("%d warnings", len(r.plan.Findings)), nil
}

// quiesceRecord is what the quiesced step journals: the rules it applied (ferry.yaml's and those
// the plan implies), which green's start and a rollback apply again, and what they stopped.
type quiesceRecord struct {
	Rules   []config.QuiesceRule `json:"rules"`
	Stopped []QuiesceItem        `json:"stopped"`
	// GreenStopped are green's own writers an upgrade stops before blue's data is loaded: its
	// release must not write to (or set up) the databases first; they start with the shift.
	GreenStopped []QuiesceItem `json:"greenStopped,omitempty"`
}

// rules are the quiesce rules of the run: as journaled once blue was quiesced, or as its quiesce
// began stopping blue's writers (a rollback of a quiesce that failed half way starts what it
// stopped), else ferry.yaml's.
func (r *Runner) rules() []config.QuiesceRule {
	if e, ok := r.Journal.Last(Quiesced, Done, 0); ok {
		var rec quiesceRecord
		if json.Unmarshal(e.Data, &rec) == nil && rec.Rules != nil {
			return rec.Rules
		}
	}
	if rules := r.journaledRules(); rules != nil {
		return rules
	}
	return r.o.Config.Quiesce
}

// journaledRules are the rules of every attempt at the quiesce, as each journaled them before it
// stopped any writer.
func (r *Runner) journaledRules() []config.QuiesceRule {
	var rules []config.QuiesceRule
	for _, e := range r.Journal.Events() {
		var these []config.QuiesceRule
		if e.State == Quiesced && e.Phase == Note && e.Detail == NoteQuiesceRules && json.Unmarshal(e.Data, &these) == nil {
			rules = withRules(rules, these...)
		}
	}
	return rules
}

// withRules adds to rules those of more it lacks.
func withRules(rules []config.QuiesceRule, more ...config.QuiesceRule) []config.QuiesceRule {
	for _, m := range more {
		if !slices.ContainsFunc(rules, func(r config.QuiesceRule) bool { return reflect.DeepEqual(r, m) }) {
			rules = append(rules, m)
		}
	}
	return rules
}

func (r *Runner) quiescer(c kinds.Cluster, mapped bool) Quiescer {
	q := Quiescer{Dynamic: c.Dynamic, Mapper: c.Mapper(), Rules: r.rules(), Log: r.o.Log, MoverUsers: r.moverUsers}
	if mapped {
		q.Namespace = kinds.EffectiveMappingOf(r.plan, r.o.Mapping).Namespace
	}
	return q
}

// moverUsers are the users ferry makes mover pods as on blue and on green: a webhook
// configuration that lets them pass moves from one to the other.
func (r *Runner) moverUsers(ctx context.Context) []string {
	var users []string
	for _, c := range []struct {
		name string
		kinds.Cluster
	}{{"blue", r.o.Blue}, {"green", r.o.Green}} {
		if c.Client == nil {
			continue
		}
		review, err := c.Client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			// The other cluster's user still passes there.
			r.o.Log.Warn("ferry's own user is not known on a cluster: mover pods there do not pass webhooks whose server the quiesce stopped", "cluster", c.name, "error", err)
			continue
		}
		if u := review.Status.UserInfo.Username; u != "" && !slices.Contains(users, u) {
			users = append(users, u)
		}
	}
	return users
}

func (r *Runner) quiesceStep(ctx context.Context) (any, string, error) {
	implied, err := WriterRules(ctx, r.o.Blue.Dynamic, r.plan)
	if err != nil {
		return nil, "", err
	}
	q := r.quiescer(r.o.Blue, false)
	// With the rules an interrupted attempt journaled: the writers it stopped have no pods now,
	// and the plan's pods no longer imply them.
	q.Rules = withRules(append(append([]config.QuiesceRule(nil), r.o.Config.Quiesce...), implied...), r.journaledRules()...)
	if err := readyToStop(ctx, q, movedClaims(r.plan, nil), "green",
		"end them and resume, or add a rule that stops what runs them to ferry.yaml's quiesce and start a new run"); err != nil {
		return nil, "", err
	}
	if r.o.Upgrade != nil {
		if err := stopsAll(ctx, r.quiescer(r.o.Green, true), "green's"); err != nil {
			return nil, "", err
		}
	}
	rules, err := json.Marshal(q.Rules)
	if err != nil {
		return nil, "", err
	}
	if err := r.record(ctx, Event{State: Quiesced, Phase: Note, Detail: NoteQuiesceRules, Data: rules}); err != nil {
		return nil, "", err
	}
	items, err := q.Stop(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("quiesce blue: %w", err)
	}
	rec := quiesceRecord{Rules: q.Rules, Stopped: items}
	detail := stoppedLine(items, "writers stopped on blue")
	if r.o.Upgrade != nil {
		if rec.GreenStopped, err = r.quiescer(r.o.Green, true).Stop(ctx); err != nil {
			return nil, "", fmt.Errorf("quiesce green's release before blue's data is loaded: %w", err)
		}
		detail += ", " + stoppedLine(rec.GreenStopped, "of green's release's writers stopped until the shift")
	}
	return rec, detail, nil
}

func (r *Runner) backupStep(ctx context.Context) (any, string, error) {
	return r.backup(ctx, r.Journal.Run.Backup, r.o.Blue, r.writers(), r.o.EncryptTo, func() (*plans.Plan, error) { return r.plan, nil }, nil)
}

// writers are the quiescers of the writers the run stopped until the shift: blue's, and in an
// upgrade green's release's, which must not set up its databases before blue's data is in.
func (r *Runner) writers() []Quiescer {
	writers := []Quiescer{r.quiescer(r.o.Blue, false)}
	if r.o.Upgrade != nil {
		writers = append(writers, r.quiescer(r.o.Green, true))
	}
	return writers
}

// writersHeld stops the run when a writer it stopped (writers) was started again; what names what
// the writers' data must not have missed.
func writersHeld(ctx context.Context, writers []Quiescer, what string) error {
	var broken []string
	for _, q := range writers {
		found, err := q.Held(ctx)
		if err != nil {
			return fmt.Errorf("check the writers stayed stopped: %w", err)
		}
		broken = append(broken, found...)
	}
	if len(broken) == 0 {
		return nil
	}
	return fmt.Errorf("writers ran during %s: %s: %w", what, strings.Join(broken[:min(len(broken), 5)], "; "), ErrStopped)
}

// backup makes the backup of the source's plan while its writers stay stopped: it stops again
// those started since the quiesce (as a resumed run's may have been), backs up (backupOnce), and
// checks the quiesce held. Something may start a writer while the backup reads (a GitOps tool's
// self-heal, an autoscaler, an operator): the backup, which may lack what it wrote, is deleted
// then, and the run stops, naming the writers.
func (r *Runner) backup(ctx context.Context, name string, source kinds.Cluster, writers []Quiescer, encryptTo []string, plan func() (*plans.Plan, error),
	lacking func(*snapshot.Manifest) []string) (any, string, error) {
	for _, q := range writers {
		again, err := q.Stop(ctx)
		if err != nil {
			return nil, "", fmt.Errorf("keep the writers stopped: %w", err)
		}
		// A backup left by a run that died may have been made while these ran (not while a
		// webhook's condition for the movers was gone: no mover was made then).
		if writerCount(again) > 0 {
			if err := r.deleteBackup(ctx, name); err != nil {
				return nil, "", err
			}
		}
	}
	data, detail, err := r.backupOnce(ctx, name, source, encryptTo, plan, lacking)
	if err != nil {
		return data, detail, err
	}
	if err := writersHeld(ctx, writers, "backup "+name); err != nil {
		deleted := "it is deleted, as it may lack what they wrote"
		if derr := r.deleteBackup(ctx, name); derr != nil {
			deleted = "it may lack what they wrote, and deleting it failed (" + derr.Error() + "): delete it"
		}
		return nil, "", fmt.Errorf("%w; %s: stop what starts them (a GitOps tool's self-heal, an autoscaler, an operator), then resume the run, which stops them again, or roll it back", err, deleted)
	}
	return data, detail, nil
}

// backupOnce makes the backup name of the source's plan, once, and applies the same gate to it
// whether it was made now or by a run that died: skipped items stop the run unless AllowSkipped.
// A backup begun by a run that died is kept when complete, unless it skipped items that are not
// allowed (it is made again: what was missing may be back), or lacks what lacking names.
func (r *Runner) backupOnce(ctx context.Context, name string, source kinds.Cluster, encryptTo []string, plan func() (*plans.Plan, error),
	lacking func(*snapshot.Manifest) []string) (any, string, error) {
	again := ""
	if m, err := snapshot.ReadManifest(ctx, r.o.Store, name); err == nil {
		var lacks []string
		if lacking != nil {
			lacks = lacking(m)
		}
		written := writtenWhileDumped(m)
		switch {
		case len(lacks) > 0:
			again = "made again, as the one of the interrupted step lacks " + strings.Join(lacks, ", ") + "; "
		case len(m.Skipped)+len(written) > 0 && !r.o.AllowSkipped:
			again = fmt.Sprintf("made again, as the one of the interrupted step skipped %d items; ", len(m.Skipped)+len(written))
		default:
			if err := r.pin(ctx, name); err != nil {
				return nil, "", err
			}
			return r.gateSkipped(m, written, "the backup finished before the run was interrupted: ")
		}
		r.o.Log.Info("backing up again", "backup", name, "why", again)
	}
	if err := r.deleteBackup(ctx, name); err != nil {
		return nil, "", err
	}
	// Pinned before it is written, so that it is never complete and unpinned.
	if err := r.pin(ctx, name); err != nil {
		return nil, "", err
	}
	p, err := plan()
	if err != nil {
		return nil, "", err
	}
	// A warm run's backup is chunked, so that it reads only what changed since the last round.
	chunks := r.warm() != nil && name == r.Journal.Run.Backup
	m, err := kinds.Backup(ctx, r.o.Store, source, kinds.BackupOptions{Name: name, Plan: p, EncryptTo: encryptTo,
		Parallel: r.o.Parallel, MoverImage: r.o.MoverImage, Chunks: chunks, Log: r.o.Log, BeforeCommit: r.holdsLease})
	if err != nil {
		return nil, "", err
	}
	var lacks []snapshot.Skipped
	if lacking != nil {
		for _, l := range lacking(m) { // "kind name"
			kind, name, _ := strings.Cut(l, " ")
			lacks = append(lacks, snapshot.Skipped{Kind: kind, Name: name, Reason: "not found on the source"})
		}
	}
	return r.gateSkipped(m, append(lacks, writtenWhileDumped(m)...), again)
}

// writtenWhileDumped are, as skipped items, the tables (and large objects) of the backup's
// databases that were written to while they were dumped. The writers were stopped: a writer the
// quiesce did not stop wrote to them, and what it wrote after the dump is not in the backup.
func writtenWhileDumped(m *snapshot.Manifest) []snapshot.Skipped {
	var out []snapshot.Skipped
	for _, d := range m.Databases {
		for _, table := range d.WrittenWhileDumped() {
			out = append(out, snapshot.Skipped{Kind: "database", Name: d.Name + "/" + table,
				Reason: "written to while it was dumped, with the writers stopped: a writer the quiesce does not stop (an application no rule names, a scheduled event, an extension's worker) wrote to it, and what it wrote after the dump is not in the backup; stop that writer and go on (the backup is made again)"})
		}
	}
	return out
}

// gateSkipped passes a complete backup on, unless it skipped items, or lacks what it should hold
// and does not name (more: items not found on the source, tables written to while dumped), and
// AllowSkipped is not set; they are in the step's journal either way.
func (r *Runner) gateSkipped(m *snapshot.Manifest, more []snapshot.Skipped, prefix string) (any, string, error) {
	detail := prefix + fmt.Sprintf("backup %s: %d objects, %d volumes, %d databases, %d buckets", m.Name, m.Totals.Objects, len(m.Volumes), len(m.Databases), len(m.Buckets))
	if len(m.NoData) > 0 {
		empty := make([]string, len(m.NoData))
		for i, s := range m.NoData {
			empty[i] = s.Kind + " " + s.Name
		}
		detail += "; nothing to copy (no data, not a loss; made again as they are): " + strings.Join(empty, ", ")
	}
	// The step's data is every item the restore will lack, which the report lists.
	skipped := slices.Clone(m.Skipped)
	named := map[string]bool{}
	for _, s := range m.Skipped {
		named[s.Kind+" "+s.Name] = true
	}
	for _, s := range more {
		if !named[s.Kind+" "+s.Name] {
			skipped = append(skipped, s)
		}
	}
	what := make([]string, len(skipped))
	for i, s := range skipped {
		what[i] = s.Kind + " " + s.Name + ": " + s.Reason
	}
	if len(what) > 0 {
		if !r.o.AllowSkipped {
			return skipped, "", fmt.Errorf("backup %s skipped %d items, which the restore would lack (%w): %s: %w", m.Name, len(what), ErrSkipped, strings.Join(what, "; "), ErrStopped)
		}
		detail += fmt.Sprintf("; skipped (allowed): %s", strings.Join(what, "; "))
	}
	return skipped, detail, nil
}

func (r *Runner) reader(ctx context.Context) (*snapshot.Reader, error) {
	return snapshot.Open(ctx, r.o.Store, r.Journal.Run.Backup, r.o.Identities)
}

// kindsRun restores or verifies the run's backup on green.
func (r *Runner) kindsRun(ctx context.Context, command string) (*snapshot.Report, error) {
	rd, err := r.reader(ctx)
	if err != nil {
		return nil, err
	}
	// A warm run's restore leaves the claims whose tree is the last round's as that round
	// restored them; the verify that follows reads every claim all the same.
	var same map[string]bool
	full := rd.Manifest
	base := ""
	if r.warm() != nil && command == kinds.Restore {
		// The others get only the files that changed since the last round.
		last := r.lastRound(ctx)
		same = sameTrees(rd.Manifest, last)
		rd = withoutVolumes(rd, same)
		if last != nil {
			base = last.Name
		}
	}
	// After a warm run's pre-copy, green's volumes may hold files blue has deleted since: they
	// are made exact (verify counts such files as differences either way).
	restorers := kinds.Restorers(rd, r.o.Green, r.greenOptions(base))
	rep, err := kinds.Run(ctx, command, rd, restorers, r.o.Log)
	if rep != nil {
		countUnchanged(rep, full, same)
	}
	return rep, err
}

// greenOptions are the options of the run's restore and verify onto green. Green's writers are
// stopped until the shift (the restored ones, and in an upgrade its release's): an object whose
// admission webhook's server cannot be called awaits them (admitOnGreen). base is the backup
// a warm run's last round left green's claims as.
func (r *Runner) greenOptions(base string) kinds.RestoreOptions {
	return kinds.RestoreOptions{Mapping: r.o.Mapping, Existing: resources.ExistingSkip, ExactData: r.warm() != nil,
		Parallel: r.o.Parallel, MoverImage: r.o.MoverImage, WaitTimeout: r.o.WaitTimeout, Upgrade: r.o.Upgrade != nil, Base: base,
		AwaitAdmission: true, Log: r.o.Log}
}

// awaitingOf are the objects the restore of state's step (Restored, CarriedBack) left awaiting
// the target's writers, as its journaled Summary holds them.
func (r *Runner) awaitingOf(state State) []string {
	var s Summary
	if e, ok := r.Journal.Last(state, Done, 0); ok && json.Unmarshal(e.Data, &s) == nil {
		return s.Awaiting
	}
	return nil
}

// NoteAwaitingMade is journaled, in the state that started the target's writers, once the objects
// a restore left awaiting them are made and verified: a step resumed after it does not make them
// again, over what the writers and users changed since.
const NoteAwaitingMade = "awaiting-made"

// startAndAdmit starts the writers q stopped and, unless state's step noted it did already, makes
// the objects a restore left awaiting them (awaiting, by admit; nil when none are to be made),
// journals NoteAwaitingMade, and starts what they brought stopped: they come with the quiesce
// record of the cluster they were read from. The first start leaves the copies of them already
// there stopped, as the objects made in their place may differ. It returns what it started and
// how many objects it made.
func (r *Runner) startAndAdmit(ctx context.Context, q Quiescer, state State, awaiting []string, admit func(context.Context, []string) error) ([]QuiesceItem, int, error) {
	pending := len(awaiting) > 0 && admit != nil && !r.notedIn(state, NoteAwaitingMade)
	if pending {
		q.Later = awaiting
	}
	items, err := q.Start(ctx)
	if err != nil || !pending {
		return items, 0, err
	}
	if err := admit(ctx, awaiting); err != nil {
		return items, 0, err
	}
	if err := r.record(ctx, Event{State: state, Phase: Note, Detail: NoteAwaitingMade}); err != nil {
		return items, len(awaiting), err
	}
	q.Later = nil
	more, err := q.Start(ctx)
	return append(items, more...), len(awaiting), err
}

// notedIn says whether the journal holds the note detail of state (of any state: "").
func (r *Runner) notedIn(state State, detail string) bool {
	for _, e := range r.Journal.Events() {
		if (state == "" || e.State == state) && e.Phase == Note && e.Detail == detail {
			return true
		}
	}
	return false
}

// admitOnGreen makes on green, once its writers started, the objects the run's restore left
// awaiting them (ids), and verifies them (admit).
func (r *Runner) admitOnGreen(ctx context.Context, ids []string) error {
	rd, err := r.reader(ctx)
	if err != nil {
		return err
	}
	o := r.greenOptions("")
	o.AwaitAdmission, o.AdmissionWait, o.Only = false, AdmissionWait, ids
	return admit(ctx, kinds.Restorers(rd, r.o.Green, o)[0], rd, len(ids), "green")
}

// admit makes the n objects a restore left awaiting the writers of the target (named where), now
// that they started: objects is the restore's, narrowed to them, which makes each as soon as its
// admission webhook's server takes it (within AdmissionWait). It then verifies them.
func admit(ctx context.Context, objects snapshot.Restorer, rd *snapshot.Reader, n int, where string) error {
	rep := &snapshot.Report{}
	if err := objects.Restore(ctx, rd, rep); err != nil {
		return fmt.Errorf("make the objects that awaited %s's writers: %w", where, err)
	}
	if err := objects.Verify(ctx, rd, rep); err != nil {
		return fmt.Errorf("verify the objects that awaited %s's writers: %w", where, err)
	}
	// What a restore leaves by design (a type the target does not serve) is not wrong.
	if problems := rep.Problems(snapshot.StatusFailed, snapshot.StatusAwaiting, snapshot.StatusSkipped, snapshot.StatusMissing, snapshot.StatusDifferent,
		snapshot.StatusUnhealthy); len(problems) > 0 {
		return fmt.Errorf("%d of the %d objects that awaited %s's writers are not as the backup holds them, e.g. %s %s: %s: %w",
			len(problems), n, where, problems[0].Status, problems[0].Name, problems[0].Detail, ErrStopped)
	}
	return nil
}

// Summary is what the journal keeps of a restore or verify report.
type Summary struct {
	Counts map[string]map[string]int `json:"counts"`
	Items  []snapshot.ReportItem     `json:"items,omitempty"`
	// Sent are the bytes a restore sent to the target, by kind (snapshot.Report.Sent).
	Sent map[string]int64 `json:"sent,omitempty"`
	// Awaiting are the objects a restore left awaiting the target's writers, all of them
	// (snapshot.StatusAwaiting): one of those writers may serve their admission webhook.
	Awaiting []string `json:"awaiting,omitempty"`
}

func summarize(rep *snapshot.Report) Summary {
	// The problems first, then the notes (snapshot.Report.Problems): the journal keeps 50.
	s := Summary{Counts: rep.Counts, Items: append(rep.Problems(), rep.Notes()...), Sent: rep.Sent}
	for _, it := range rep.Problems(snapshot.StatusAwaiting) {
		s.Awaiting = append(s.Awaiting, it.Name)
	}
	if len(s.Items) > 50 {
		s.Items = s.Items[:50]
	}
	return s
}

// refusedStops makes a restore's refusal before it applied anything (snapshot.ErrRefused) a
// stopped step, something to fix first, not an interruption to resume.
func refusedStops(err error) error {
	if errors.Is(err, snapshot.ErrRefused) {
		return fmt.Errorf("%w: %w", err, ErrStopped)
	}
	return err
}

func (r *Runner) restoreStep(ctx context.Context) (any, string, error) {
	rep, err := r.kindsRun(ctx, kinds.Restore)
	if errors.Is(err, snapshot.ErrRefused) {
		return summarize(rep), "", refusedStops(err)
	}
	if err != nil {
		return nil, "", err
	}
	if failed := rep.Problems(snapshot.StatusFailed); len(failed) > 0 {
		return summarize(rep), "", fmt.Errorf("%d items failed to restore on green, e.g. %s %s: %s: %w", len(failed), failed[0].Kind, failed[0].Name, failed[0].Detail, ErrStopped)
	}
	sum := summarize(rep)
	detail := countLine(rep, snapshot.StatusRestored, snapshot.StatusUnchanged)
	if len(sum.Awaiting) > 0 {
		detail += fmt.Sprintf("; %d await green's writers, one of which may serve their admission webhook (e.g. %s): made once they start", len(sum.Awaiting), sum.Awaiting[0])
	}
	return sum, detail, nil
}

func (r *Runner) verifyStep(ctx context.Context) (any, string, error) {
	rep, err := r.kindsRun(ctx, kinds.Verify)
	if err != nil {
		return nil, "", err
	}
	awaiting := r.awaitingOf(Restored)
	if problems := withoutUnchecked(withoutAwaiting(rep.Problems(), awaiting), r.skippedBy(BackedUp)); len(problems) > 0 {
		return summarize(rep), "", fmt.Errorf("green differs from the backup in %d items, e.g. %s %s %s: %s: %w", len(problems), problems[0].Kind, problems[0].Status, problems[0].Name, problems[0].Detail, ErrStopped)
	}
	detail := "green holds every item of the backup: " + countLine(rep, snapshot.StatusIdentical, snapshot.StatusHealthy)
	if len(awaiting) > 0 {
		detail += fmt.Sprintf(", but for the %d objects that await green's writers", len(awaiting))
	}
	return summarize(rep), detail, nil
}

// withoutAwaiting are the problems of a verification but those of the objects that await the
// target's writers: they are verified once made (admit).
func withoutAwaiting(problems []snapshot.ReportItem, awaiting []string) []snapshot.ReportItem {
	return slices.DeleteFunc(problems, func(it snapshot.ReportItem) bool { return it.Kind == "objects" && slices.Contains(awaiting, it.Name) })
}

// skippedBy are the items the backup of step state skipped, allowed: the step's journaled data.
func (r *Runner) skippedBy(state State) []snapshot.Skipped {
	var skipped []snapshot.Skipped
	if e, ok := r.Journal.Last(state, Done, 0); ok {
		json.Unmarshal(e.Data, &skipped)
	}
	return skipped
}

// withoutUnchecked are the problems of a verification but the tables that verify could not check
// as they were written to while dumped, which the backup's step named and allowed (skipped):
// what the dump holds of them, no reading says.
func withoutUnchecked(problems []snapshot.ReportItem, skipped []snapshot.Skipped) []snapshot.ReportItem {
	return slices.DeleteFunc(problems, func(it snapshot.ReportItem) bool {
		return it.Kind == "databases" && it.Status == snapshot.StatusSkipped &&
			slices.ContainsFunc(skipped, func(s snapshot.Skipped) bool { return s.Kind == "database" && s.Name == it.Name })
	})
}

func countLine(rep *snapshot.Report, statuses ...string) string {
	var parts []string
	for _, k := range []string{"objects", "volumes", "databases", "buckets", "health"} {
		for _, s := range statuses {
			if n := rep.Counts[k][s]; n > 0 {
				parts = append(parts, fmt.Sprintf("%s %d %s", k, n, s))
			}
		}
	}
	return strings.Join(parts, ", ")
}

// Notes of the journal.
const (
	// NoteTrafficSaved holds the switcher's saved state, what a rollback puts back.
	NoteTrafficSaved = "traffic-saved"
	// NoteGreenWrites marks when green may first have taken writes: from then on a rollback is a
	// data operation.
	NoteGreenWrites = "green-may-take-writes"
	// NoteQuiesceRules holds the rules a quiesce stops blue's writers by (ferry.yaml's and those
	// the plan implies), journaled before it stops any.
	NoteQuiesceRules = "quiesce-rules"
	// NoteTrafficReturned marks a failed gate's return of traffic to blue's saved state; its data
	// says why.
	NoteTrafficReturned = "traffic-returned-to-blue"
)

// shift starts green's writers and moves traffic step by step, each step watched by the gates.
func (r *Runner) shift(ctx context.Context) error {
	if err := r.mayTakeWrites(ctx, Shifting); err != nil {
		return err
	}
	if err := r.step(ctx, Shifting, 0, func() (any, string, error) {
		// What blue's writers wrote after the backup would stay behind on blue.
		if err := writersHeld(ctx, r.writers()[:1], "the restore onto green"); err != nil {
			return nil, "", fmt.Errorf("%w; green lacks what they wrote since the backup: stop what starts them, then roll the run back and migrate again", err)
		}
		items, admitted, err := r.startAndAdmit(ctx, r.quiescer(r.o.Green, true), Shifting, r.awaitingOf(Restored), r.admitOnGreen)
		if err != nil {
			return items, "", fmt.Errorf("start green's writers: %w", err)
		}
		detail := fmt.Sprintf("%d writers started on green", writerCount(items))
		if admitted > 0 {
			detail += fmt.Sprintf(", and %d objects that awaited them made and verified", admitted)
		}
		return items, detail, nil
	}); err != nil {
		return err
	}
	if r.o.Switcher == nil {
		return r.record(ctx, Event{State: Shifting, Phase: Note, Detail: "no traffic switcher in ferry.yaml: move traffic to green yourself"})
	}
	if err := r.saveTraffic(ctx, Shifting); err != nil {
		return err
	}
	rollout := config.Rollout{}
	if r.o.Config.Rollout != nil {
		rollout = *r.o.Config.Rollout
	}
	rollout = rollout.WithDefaults()
	for _, percent := range rollout.Steps {
		var verdict gates.Verdict
		err := r.step(ctx, Shifting, percent, func() (any, string, error) {
			split := traffic.Green(percent)
			if err := r.mayTakeWrites(ctx, Shifting); err != nil {
				return nil, "", err
			}
			if err := r.o.Switcher.Apply(ctx, split); err != nil {
				return nil, "", fmt.Errorf("%s: apply %s: %w", r.o.Switcher.Name(), split, err)
			}
			if err := r.o.Switcher.WaitSettled(ctx, split); err != nil {
				return nil, "", fmt.Errorf("%s: %s did not settle: %w", r.o.Switcher.Name(), split, err)
			}
			if len(r.o.Gates) == 0 {
				// Nothing watches the step, but it still lasts its soak: the operator, green's
				// own alerts and the next step's readers count on that time.
				if err := r.soak(ctx, rollout.Soak.D()); err != nil {
					return nil, "", fmt.Errorf("soak at %d %% stopped: %w: %w", percent, err, ErrPaused)
				}
				return nil, fmt.Sprintf("%s, no gates, soaked %s", split, rollout.Soak), nil
			}
			verdict = gates.Evaluate(ctx, r.o.Gates, rollout.Soak.D(), rollout.Interval.D(), *rollout.FailureBudget)
			switch {
			case verdict.Failed:
				return verdict, "", fmt.Errorf("gate failed at %d %%: %s", percent, verdict.Reason)
			case verdict.Inconclusive:
				return verdict, "", fmt.Errorf("gates inconclusive at %d %%: %s: %w", percent, verdict.Reason, ErrPaused)
			}
			return verdict, fmt.Sprintf("%s, gates passed (%d measurements)", split, len(verdict.Measurements)), nil
		})
		switch {
		case err == nil:
			continue
		case errors.Is(err, ErrPaused):
			return err
		case verdict.Failed:
			// A failed gate sends traffic back at once, as green fails requests. Green may have taken
			// writes, and dropping them is the operator's choice, never a gate's: the writers stay as
			// they are (blue's stopped, so blue serves reads) until ferry rollback carries them
			// back or is told to discard them.
			// (Green may take writes from before the first split: shift journals it first.)
			e, _ := r.lastNote(NoteGreenWrites)
			if rerr := r.returnTraffic(context.WithoutCancel(ctx), "automatic: "+err.Error()); rerr != nil {
				return fmt.Errorf("%w; sending traffic back to blue failed too, so it may still reach green: %v; move it by hand (ferry flip --run %s --to blue): %w",
					err, rerr, r.Journal.Run.ID, ErrStopped)
			}
			return fmt.Errorf("%w: traffic is back on blue; green may hold writes taken since %s, so blue's writers stay stopped until you carry them back (ferry rollback --run %s --carry-back) or drop them (--discard-green-writes): %w",
				err, e.At.Local().Format(time.RFC3339), r.Journal.Run.ID, ErrStopped)
		default:
			return err
		}
	}
	return nil
}

// soak waits d, or until ctx ends.
func (r *Runner) soak(ctx context.Context, d time.Duration) error {
	t := r.o.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C():
		return nil
	}
}

// mayTakeWrites journals, once, that green may take writes from now on. It is written before
// green's writers start and before any split that gives green traffic is applied: a step cut
// short (a Ctrl-C, a route never accepted, a switcher that applied half its commands) may
// already have sent green requests, and a plain rollback must then refuse.
func (r *Runner) mayTakeWrites(ctx context.Context, state State) error {
	if r.noted(NoteGreenWrites) {
		return nil
	}
	return r.record(ctx, Event{State: state, Phase: Note, Detail: NoteGreenWrites})
}

// saveTraffic journals, once, the switcher's state before ferry first changes it: what a
// rollback puts back.
func (r *Runner) saveTraffic(ctx context.Context, state State) error {
	if r.noted(NoteTrafficSaved) {
		return nil
	}
	saved, err := r.o.Switcher.Save(ctx)
	if err != nil {
		return fmt.Errorf("save the traffic state (%s): %w", r.o.Switcher.Name(), err)
	}
	return r.record(ctx, Event{State: state, Phase: Note, Detail: NoteTrafficSaved, Data: json.RawMessage(saved)})
}

func (r *Runner) noted(detail string) bool { return r.notedIn("", detail) }

func (r *Runner) rollback(ctx context.Context, why string, byHand bool) error {
	if r.Journal.IsDone(RolledBack, 0) {
		return nil
	}
	started := time.Now()
	return r.step(ctx, RolledBack, 0, func() (any, string, error) {
		if err := r.restoreTraffic(ctx); err != nil {
			return nil, "", err
		}
		// A carry-back that was verified is done only with the objects that awaited blue's writers;
		// one that was not is left as it is (green's writes discarded).
		admit := r.admitCarried
		if !r.Journal.IsDone(BlueVerified, 0) {
			admit = nil
		}
		if !r.noted(NoteBlueStarting) {
			if err := r.record(ctx, Event{State: RolledBack, Phase: Note, Detail: NoteBlueStarting}); err != nil {
				return nil, "", err
			}
		}
		blueItems, admitted, err := r.startAndAdmit(ctx, r.quiescer(r.o.Blue, false), RolledBack, r.awaitingOf(CarriedBack), admit)
		if err != nil {
			return nil, "", fmt.Errorf("start blue's writers: %w", err)
		}
		var greenItems, greenStarted []QuiesceItem
		switch {
		case r.Journal.IsDone(Restored, 0):
			// One writer at a time: green's stop, as blue's did.
			if greenItems, err = r.quiescer(r.o.Green, true).Stop(ctx); err != nil {
				return nil, "", fmt.Errorf("stop green's writers: %w", err)
			}
		case r.o.Upgrade != nil:
			// Green's release never got blue's data: its own writers run again as they did.
			if greenStarted, err = r.quiescer(r.o.Green, true).Start(ctx); err != nil {
				return nil, "", fmt.Errorf("start green's release's writers again: %w", err)
			}
		}
		took := time.Since(started).Round(time.Millisecond)
		detail := fmt.Sprintf("%s; traffic on blue, %d writers started on blue, %d stopped on green", why, writerCount(blueItems), writerCount(greenItems))
		if len(greenStarted) > 0 {
			detail += fmt.Sprintf(", %d of green's release started again (it never got blue's data)", writerCount(greenStarted))
		}
		if resumed, paused := gitOpsPaused(blueItems), gitOpsPaused(greenItems); len(resumed)+len(paused) > 0 {
			detail += fmt.Sprintf(", GitOps objects resumed on blue %d, paused on green %d", len(resumed), len(paused))
		}
		if admitted > 0 {
			detail += fmt.Sprintf(", %d carried-back objects made once blue's writers started and verified", admitted)
		}
		return map[string]any{"why": why, "byHand": byHand, "blueStarted": blueItems, "greenStopped": greenItems, "greenStarted": greenStarted, "seconds": took.Seconds()},
			fmt.Sprintf("%s, in %s", detail, took), nil
	})
}

// restoreTraffic puts traffic back to the switcher's state saved before ferry first changed it.
func (r *Runner) restoreTraffic(ctx context.Context) error {
	e, ok := r.lastNote(NoteTrafficSaved)
	if !ok || r.o.Switcher == nil {
		return nil
	}
	if err := r.o.Switcher.Restore(ctx, traffic.State(e.Data)); err != nil {
		return fmt.Errorf("restore the traffic state (%s): %w", r.o.Switcher.Name(), err)
	}
	return nil
}

// returnTraffic is restoreTraffic for a failed gate, journaling why.
func (r *Runner) returnTraffic(ctx context.Context, why string) error {
	if err := r.restoreTraffic(ctx); err != nil {
		return err
	}
	data, _ := json.Marshal(map[string]string{"why": why})
	return r.record(ctx, Event{State: r.Journal.Current(), Phase: Note, Detail: NoteTrafficReturned, Data: data})
}

func (r *Runner) lastNote(detail string) (Event, bool) {
	events := r.Journal.Events()
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Phase == Note && events[i].Detail == detail {
			return events[i], true
		}
	}
	return Event{}, false
}

// Flip moves traffic by hand and journals it.
func (r *Runner) Flip(ctx context.Context, split traffic.Split) error {
	ctx, stop := r.lease.bind(ctx) // ends when the lease is lost
	defer stop()
	if r.o.Switcher == nil {
		return fmt.Errorf("run %s has no traffic switcher in its ferry.yaml: %w", r.Journal.Run.ID, ErrStopped)
	}
	if e, ok := r.Journal.Last(RolledBack, Begin, 0); ok && split.Green > 0 {
		// Blue's writers may run, or green's be stopped: traffic to green would meet either.
		return fmt.Errorf("run %s began rolling back at %s: traffic goes to blue only: %w", r.Journal.Run.ID, e.At.Local().Format(time.RFC3339), ErrStopped)
	}
	if _, ok := r.carryBackNote(); ok && split.Green > 0 {
		return fmt.Errorf("run %s is carrying green's writes back to blue, with green's writers stopped: traffic goes to blue only: %w", r.Journal.Run.ID, ErrStopped)
	}
	state := r.Journal.Current()
	if err := r.saveTraffic(ctx, state); err != nil {
		return err
	}
	if split.Green > 0 {
		if err := r.mayTakeWrites(ctx, state); err != nil {
			return err
		}
	}
	if err := r.o.Switcher.Apply(ctx, split); err != nil {
		return fmt.Errorf("%s: apply %s: %w", r.o.Switcher.Name(), split, err)
	}
	if err := r.o.Switcher.WaitSettled(ctx, split); err != nil {
		return fmt.Errorf("%s: %s did not settle: %w", r.o.Switcher.Name(), split, err)
	}
	data, _ := json.Marshal(split)
	return r.record(ctx, Event{State: state, Phase: Note, Detail: "flipped by hand: " + split.String(), Data: data})
}

// Finalize ends a run that shifted: the journal keeps it, blue is left as it is.
func (r *Runner) Finalize(ctx context.Context) error {
	ctx, stop := r.lease.bind(ctx) // ends when the lease is lost
	defer stop()
	if !r.Journal.IsDone(Shifted, 0) {
		return fmt.Errorf("run %s has not shifted (state %q): finalize only after green serves all traffic: %w", r.Journal.Run.ID, r.Journal.Current(), ErrStopped)
	}
	if err := r.goingBack(); err != nil {
		return err
	}
	if e, ok := r.carryBackNote(); ok {
		return fmt.Errorf("run %s is carrying green's writes back to blue (%s at %s): finish it with ferry rollback --run %s: %w",
			r.Journal.Run.ID, e.Detail, e.At.Local().Format(time.RFC3339), r.Journal.Run.ID, ErrStopped)
	}
	return r.step(ctx, Finalized, 0, func() (any, string, error) {
		return r.readSchemas(ctx, "green at finalize"), "run ended; blue is intact and was not deleted", nil
	})
}
