package migrate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrykube/ferry/migrate/traffic"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/kinds"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeSwitcher is a front that records what it was asked for; applyErr and settleErr make it fail
// after it took the split in (a partly applied command list, a route never accepted), and
// settleHook runs while it settles.
type fakeSwitcher struct {
	mu         sync.Mutex
	applied    []traffic.Split
	applyErr   error
	settleErr  error
	settleHook func()
	restored   []traffic.State // what Restore was asked to put back
}

func (f *fakeSwitcher) Name() string                                   { return "fake" }
func (f *fakeSwitcher) Preflight(context.Context) error                { return nil }
func (f *fakeSwitcher) Current(context.Context) (traffic.Split, error) { return traffic.Green(0), nil }
func (f *fakeSwitcher) Save(context.Context) (traffic.State, error) {
	return traffic.State(`{"blue":100,"green":0}`), nil
}
func (f *fakeSwitcher) Restore(_ context.Context, st traffic.State) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.restored = append(f.restored, st)
	return nil
}

func (f *fakeSwitcher) Apply(_ context.Context, s traffic.Split) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = append(f.applied, s)
	return f.applyErr
}

func (f *fakeSwitcher) WaitSettled(ctx context.Context, _ traffic.Split) error {
	if f.settleHook != nil {
		f.settleHook()
	}
	if f.settleErr != nil {
		return f.settleErr
	}
	return ctx.Err()
}

// testRunner is a runner of a new run on file storage, with what its journal already holds.
func testRunner(t *testing.T, o Options, events ...Event) *Runner {
	t.Helper()
	ctx := context.Background()
	if o.Store == nil {
		o.Store = fileStore(t)
	}
	j, err := CreateJournal(ctx, o.Store, Run{ID: NewID(time.Now()), Blue: plans.Cluster{UID: "b"}, Green: plans.Cluster{UID: "g"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if _, err := j.Append(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	return &Runner{o: o.withDefaults(), Journal: j}
}

// doneUpTo are the events of a run whose steps up to state finished.
func doneUpTo(state State) []Event {
	var out []Event
	for _, s := range Forward {
		out = append(out, Event{State: s, Phase: Begin}, Event{State: s, Phase: Done})
		if s == state {
			break
		}
	}
	return out
}

// TestFlipNotesGreenWritesBeforeApplying: a flip towards green that fails half way (the switcher
// applied part of the split and then failed, never settled, or was interrupted) has already
// journaled that green may take writes, and blue's saved traffic state, before the switcher was
// asked for anything; a flip to blue alone notes no writes.
func TestFlipNotesGreenWritesBeforeApplying(t *testing.T) {
	for _, tc := range []struct {
		name       string
		split      traffic.Split
		sw         *fakeSwitcher
		cancel     bool
		wantWrites bool
	}{
		{"apply fails half way", traffic.Green(100), &fakeSwitcher{applyErr: errors.New("server app/green: no such server")}, false, true},
		{"never settles", traffic.Green(50), &fakeSwitcher{settleErr: errors.New("route not accepted")}, false, true},
		{"interrupted while settling", traffic.Green(10), &fakeSwitcher{}, true, true},
		{"all to blue", traffic.Green(0), &fakeSwitcher{applyErr: errors.New("down")}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				tc.sw.settleHook = cancel
			}
			r := testRunner(t, Options{Switcher: tc.sw}, doneUpTo(Verified)...)
			if err := r.Flip(ctx, tc.split); err == nil {
				t.Fatal("the flip should fail")
			}
			if len(tc.sw.applied) != 1 {
				t.Fatalf("the switcher was asked for %v, want the split once", tc.sw.applied)
			}
			var writesAt, savedAt int
			for _, e := range r.Journal.Events() {
				switch {
				case e.Phase == Note && e.Detail == NoteGreenWrites:
					writesAt = e.Seq
				case e.Phase == Note && e.Detail == NoteTrafficSaved:
					savedAt = e.Seq
				}
			}
			if got := writesAt > 0; got != tc.wantWrites {
				t.Errorf("journal notes %q: %v, want %v", NoteGreenWrites, got, tc.wantWrites)
			}
			if savedAt == 0 {
				t.Errorf("the journal lacks blue's traffic state (%q), which a rollback puts back", NoteTrafficSaved)
			}
		})
	}
}

// TestShiftNotesGreenWritesBeforeItsWritersStart: the note comes before green's writers are
// started and before any split is applied, so a run cut short there is refused a plain rollback.
func TestShiftNotesGreenWritesBeforeItsWritersStart(t *testing.T) {
	sw := &fakeSwitcher{applyErr: errors.New("partly applied")}
	// No quiesce rules: starting green's writers finds nothing to start.
	r := testRunner(t, Options{Switcher: sw}, doneUpTo(Verified)...)
	r.plan = &plans.Plan{}
	if err := r.shift(context.Background()); err == nil || !strings.Contains(err.Error(), "partly applied") {
		t.Fatalf("shift: %v, want the switcher's failure", err)
	}
	var order []string
	for _, e := range r.Journal.Events() {
		switch {
		case e.Phase == Note:
			order = append(order, e.Detail)
		case e.State == Shifting:
			order = append(order, fmt.Sprintf("shifting@%d:%s", e.Step, e.Phase))
		}
	}
	if len(order) == 0 || order[0] != NoteGreenWrites {
		t.Errorf("journal of the shift: %q, want %q first", order, NoteGreenWrites)
	}
}

// TestShiftSoaksEachStepWithoutGates: with no gates, each traffic step still lasts its soak (on
// an injected clock) before the next split is applied.
func TestShiftSoaksEachStepWithoutGates(t *testing.T) {
	soak := 2 * time.Minute
	clk := clocktesting.NewFakeClock(time.Now())
	sw := &fakeSwitcher{}
	cfg := config.Config{Rollout: &config.Rollout{Steps: []int{50, 100}, Soak: config.Duration(soak)}}
	r := testRunner(t, Options{Switcher: sw, Config: cfg, Clock: clk},
		append(doneUpTo(Verified), Event{State: Shifting, Phase: Begin}, Event{State: Shifting, Phase: Done})...)
	done := make(chan error, 1)
	go func() { done <- r.shift(context.Background()) }()
	// waitSoak waits (in real time, briefly) until the step waits on the clock, or shift returned.
	waitSoak := func(percent int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !clk.HasWaiters() {
			select {
			case err := <-done:
				t.Fatalf("shift returned (%v) at the %d %% step without waiting its %s soak", err, percent, soak)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("the %d %% step never waited", percent)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for i, percent := range []int{50, 100} {
		waitSoak(percent)
		sw.mu.Lock()
		applied := len(sw.applied)
		sw.mu.Unlock()
		if applied != i+1 {
			t.Fatalf("at the %d %% step's soak the switcher was asked for %d splits, want %d", percent, applied, i+1)
		}
		clk.Step(soak - time.Second)
		if !clk.HasWaiters() {
			t.Fatalf("the %d %% step ended a second before its soak", percent)
		}
		clk.Step(time.Second)
		if percent < 100 {
			// The next step's wait replaces this one's once the step is journaled.
			deadline := time.Now().Add(10 * time.Second)
			for r.Journal.IsDone(Shifting, percent) == false && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("shift did not end after the last soak")
	}
	for _, percent := range []int{50, 100} {
		e, ok := r.Journal.Last(Shifting, Done, percent)
		if !ok || !strings.Contains(e.Detail, "soaked "+soak.String()) {
			t.Errorf("the %d %% step's journal: %q, want it soaked %s", percent, e.Detail, soak)
		}
	}
}

// TestResumedBackupAppliesTheGate: a backup a run that died left complete passes only the gate a
// fresh one would: skipped items stop it unless allowed (it is made again, since what was missing
// may be back), and a backup that lacks an item of the run is made again.
func TestResumedBackupAppliesTheGate(t *testing.T) {
	errAgain := errors.New("backed up again")
	for _, tc := range []struct {
		name         string
		skipped      []snapshot.Skipped
		allowSkipped bool
		lacks        []string
		wantAgain    bool
		wantDetail   string
	}{
		{"skipped, not allowed", []snapshot.Skipped{{Kind: "database", Name: "kfp-mysql", Reason: "no running pod"}}, false, nil, true, ""},
		{"skipped, allowed", []snapshot.Skipped{{Kind: "database", Name: "kfp-mysql", Reason: "no running pod"}}, true, nil, false,
			"skipped (allowed): database kfp-mysql: no running pod"},
		{"lacks an item of the run", nil, true, []string{"database kfp-mysql"}, true, ""},
		{"complete", nil, false, nil, false, "the backup finished before the run was interrupted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			r := testRunner(t, Options{AllowSkipped: tc.allowSkipped})
			name := r.Journal.Run.ID
			data, _ := json.Marshal(snapshot.Manifest{FormatVersion: "1", Name: name, Skipped: tc.skipped})
			if err := r.o.Store.Create(ctx, snapshot.Prefix(name)+snapshot.ManifestFile, bytes.NewReader(data)); err != nil {
				t.Fatal(err)
			}
			_, detail, err := r.backupOnce(ctx, name, kinds.Cluster{}, nil, func() (*plans.Plan, error) { return nil, errAgain },
				func(*snapshot.Manifest) []string { return tc.lacks })
			if again := errors.Is(err, errAgain); again != tc.wantAgain {
				t.Fatalf("backed up again: %v (%v), want %v", again, err, tc.wantAgain)
			}
			if !tc.wantAgain && (err != nil || !strings.Contains(detail, tc.wantDetail)) {
				t.Errorf("the kept backup: %q, %v; want it passed with %q", detail, err, tc.wantDetail)
			}
		})
	}
}

// TestLacks: the databases, volumes (in green's namespaces) and buckets the run moved that a
// backup of green does not hold.
func TestLacks(t *testing.T) {
	original := &snapshot.Manifest{
		Databases: []snapshot.Database{{Name: "kfp-mysql"}, {Name: "pg"}},
		Volumes:   []snapshot.Volume{{Namespace: "team", Name: "data"}, {Namespace: "ops", Name: "logs"}},
		Buckets:   []snapshot.Bucket{{Name: "mlpipeline"}},
	}
	carried := &snapshot.Manifest{
		Databases: []snapshot.Database{{Name: "pg"}},
		Volumes:   []snapshot.Volume{{Namespace: "team-green", Name: "data"}, {Namespace: "ops", Name: "other"}},
	}
	m := snapshot.Mapping{Namespaces: map[string]string{"team": "team-green"}}
	want := []string{"database kfp-mysql", "volume ops/logs", "bucket mlpipeline"}
	if got := lacks(original, carried, m); !slices.Equal(got, want) {
		t.Errorf("lacks = %q, want %q", got, want)
	}
	if got := lacks(original, original, snapshot.Mapping{}); len(got) != 0 {
		t.Errorf("a backup holding everything lacks %q", got)
	}
}

// TestBackupWhileAWriterRanIsDeleted: a writer started again while the backup read (here, when
// the backup's gate looks at it) makes the backup untrustworthy: it is deleted and the run stops,
// naming the writer. With the writers stopped, the same backup passes.
func TestBackupWhileAWriterRanIsDeleted(t *testing.T) {
	ctx := context.Background()
	for _, selfHeal := range []bool{false, true} {
		r := testRunner(t, Options{})
		name := r.Journal.Run.ID
		data, _ := json.Marshal(snapshot.Manifest{FormatVersion: "1", Name: name})
		if err := r.o.Store.Create(ctx, snapshot.Prefix(name)+snapshot.ManifestFile, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		q, dyn := deploymentQuiescer(nil, shopDeployment("web", 2))
		if _, err := q.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		_, _, err := r.backup(ctx, name, kinds.Cluster{}, []Quiescer{q}, nil, nil, func(*snapshot.Manifest) []string {
			if selfHeal {
				if _, err := dyn.Resource(deploymentsGVR).Namespace("shop").Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":2}}`), metav1.PatchOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			return nil
		})
		_, readErr := snapshot.ReadManifest(ctx, r.o.Store, name)
		switch {
		case !selfHeal && (err != nil || readErr != nil):
			t.Errorf("writers stopped: %v, the backup: %v; want it passed and kept", err, readErr)
		case selfHeal && (!errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "deployments.apps shop/web: started again (spec.replicas is 2, the quiesce set 0)")):
			t.Errorf("a writer started during the backup: %v; want the run stopped, naming it", err)
		case selfHeal && readErr == nil:
			t.Error("a writer started during the backup: the backup is still there")
		}
	}
}
