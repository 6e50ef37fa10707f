package migrate

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/migrate/gates"
	"github.com/ferrykube/ferry/migrate/traffic"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// runOn is the options of a run from blue to green on file storage.
func runOn(t *testing.T, store storage.Backend, blue, green fakeCluster, sw traffic.Switcher, gs ...gates.Gate) Options {
	o := Options{Store: store, Blue: blue.Cluster, Green: green.Cluster, BlueContext: "blue", GreenCtx: "green", Config: shopConfig(),
		WaitTimeout: 50 * time.Millisecond, LeaseTTL: time.Minute, Log: discard, Gates: gs}
	if sw != nil {
		o.Switcher = sw
	}
	return o
}

// states are the states and phases of a journal, as "state:phase" or "state@step:phase".
func states(j *Journal) []string {
	var out []string
	for _, e := range j.Events() {
		s := string(e.State)
		if e.Step > 0 {
			s += "@" + itoa(e.Step)
		}
		s += ":" + e.Phase
		if e.Phase == Note {
			s += "(" + e.Detail + ")"
		}
		out = append(out, s)
	}
	return out
}

func itoa(n int) string {
	b := []byte{}
	for n > 0 || len(b) == 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}

func start(t *testing.T, o Options) *Runner {
	t.Helper()
	r, err := Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

// TestDriveToShifted: a run goes through each forward state in order, each begun before it is
// acted on and done after: blue's writer is suspended before the backup and stays so, green gets
// blue's objects, its writer starts with the shift, and traffic moves by the rollout's steps.
func TestDriveToShifted(t *testing.T) {
	ctx := context.Background()
	blue, green := shopBlue(t), newFakeCluster(t, "green")
	sw := &fakeSwitcher{}
	store := fileStore(t)
	r := start(t, runOn(t, store, blue, green, sw))
	if err := r.Drive(ctx); err != nil {
		t.Fatalf("drive: %v\njournal: %q", err, states(r.Journal))
	}
	// The run pinned its backup, which prune keeps for it; its record needs no reading.
	entries, err := snapshot.History(ctx, store, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name == r.Journal.Run.Backup && (e.State != snapshot.Complete || !slices.Equal(e.Runs, []string{r.Journal.Run.ID})) {
			t.Errorf("the run's backup: %s, pinned by %v; want complete, pinned by %s", e.State, e.Runs, r.Journal.Run.ID)
		}
	}
	if unpinned, err := UnpinnedBackups(ctx, store); err != nil || len(unpinned) != 0 {
		t.Errorf("UnpinnedBackups: %v, %v; want none for a run that pins", unpinned, err)
	}
	want := []string{
		"planned:begin", "planned:done", "preflighted:begin", "preflighted:done", "quiesced:begin", "quiesced:note(" + NoteQuiesceRules + ")", "quiesced:done",
		"backed-up:begin", "backed-up:done", "restored:begin", "restored:done", "verified:begin", "verified:done",
		"shifting:note(" + NoteGreenWrites + ")", "shifting:begin", "shifting:done", "shifting:note(" + NoteTrafficSaved + ")",
		"shifting@50:begin", "shifting@50:done", "shifting@100:begin", "shifting@100:done", "shifted:begin", "shifted:done",
	}
	if got := states(r.Journal); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("journal:\n got %q\nwant %q", got, want)
	}
	if r.Journal.Current() != Shifted {
		t.Errorf("state %q, want %q", r.Journal.Current(), Shifted)
	}
	if suspend, marked := blue.suspended(t, "shop", "report"); !suspend || !marked {
		t.Errorf("blue's writer: suspended %v, record %v; want it stopped, as the run leaves blue", suspend, marked)
	}
	if suspend, marked := green.suspended(t, "shop", "report"); suspend || marked {
		t.Errorf("green's writer: suspended %v, record %v; want it started with the shift", suspend, marked)
	}
	cm := green.get(t, configMapsGVR, "shop", "settings")
	if cm == nil {
		t.Fatal("green lacks blue's ConfigMap")
	}
	if color, _, _ := unstructured.NestedString(cm.Object, "data", "color"); color != "blue" {
		t.Errorf("green's ConfigMap: color %q, want blue's", color)
	}
	if len(sw.applied) != 2 || sw.applied[0] != traffic.Green(50) || sw.applied[1] != traffic.Green(100) {
		t.Errorf("splits %v, want 50 %% then 100 %% to green", sw.applied)
	}
	// Driving a shifted run again does nothing.
	if err := r.Drive(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(r.Journal.Events()); n != len(want) {
		t.Errorf("driving a shifted run again wrote %d events", n-len(want))
	}
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	if r.Journal.Current() != Finalized {
		t.Errorf("state %q after finalize", r.Journal.Current())
	}
	if err := r.Drive(ctx); err != nil {
		t.Errorf("driving a finalized run: %v, want nothing done", err)
	}
	if err := r.Rollback(ctx, RollbackOptions{}); !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "finalized") {
		t.Errorf("rolling back a finalized run: %v, want it refused", err)
	}
}

// errCrash is what the crash hook panics with: the process dies right after an event.
type errCrash struct{ at Event }

// driveUntilCrash drives the run and kills it right after its journal's event n (1-based): it
// reports whether it was killed; the lease is given up, as its expiry would.
func driveUntilCrash(t *testing.T, o Options, n int) (r *Runner, crashed bool) {
	t.Helper()
	seen := 0
	o.Crash = func(e Event) {
		if seen++; seen == n {
			panic(errCrash{e})
		}
	}
	r, err := Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(errCrash); !ok {
				panic(p)
			}
			crashed = true
		}
	}()
	if err := r.Drive(context.Background()); err != nil {
		t.Fatalf("drive: %v", err)
	}
	return r, false
}

// TestResumeAfterEachEvent: a run killed right after any event of its journal resumes from the
// journal alone and reaches shifted without repeating a finished step: each step finishes once,
// only the step killed after its begin is begun again, the notes are written once, and no split
// is applied again once its step finished.
func TestResumeAfterEachEvent(t *testing.T) {
	const events = 22 // of a run to shifted (TestDriveToShifted)
	for n := 1; n <= events; n++ {
		t.Run(itoa(n), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			store, blue, green, sw := fileStore(t), shopBlue(t), newFakeCluster(t, "green"), &fakeSwitcher{}
			first, crashed := driveUntilCrash(t, runOn(t, store, blue, green, sw), n)
			if !crashed {
				t.Fatalf("the run was not killed after event %d", n)
			}
			killedAt := first.Journal.Events()[n-1]
			appliedBefore := len(sw.applied)
			r, err := Resume(ctx, runOn(t, store, blue, green, sw), first.Journal.Run.ID)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close(ctx)
			if err := r.Drive(ctx); err != nil {
				t.Fatalf("resumed after %s %s: %v", killedAt.State, killedAt.Phase, err)
			}
			if r.Journal.Current() != Shifted {
				t.Fatalf("resumed after %s %s: state %q", killedAt.State, killedAt.Phase, r.Journal.Current())
			}
			begins, dones, notes := map[string]int{}, map[string]int{}, map[string]int{}
			for _, e := range r.Journal.Events() {
				key := string(e.State) + "@" + itoa(e.Step)
				switch e.Phase {
				case Begin:
					begins[key]++
				case Done:
					dones[key]++
				case Note:
					notes[e.Detail]++
				default:
					t.Errorf("event %d: %s %s: %s", e.Seq, key, e.Phase, e.Detail)
				}
			}
			killedKey := string(killedAt.State) + "@" + itoa(killedAt.Step)
			// Killed after its begin, or a note between its begin and done, a step begins again.
			open := false
			for _, e := range first.Journal.Events()[:n] {
				if string(e.State)+"@"+itoa(e.Step) == killedKey && e.Phase != Note {
					open = e.Phase == Begin
				}
			}
			for key, d := range dones {
				want := 1
				if key == killedKey && open {
					want = 2
				}
				if d != 1 || begins[key] != want {
					t.Errorf("killed after %s %s: %s begun %d times, finished %d; want %d and 1", killedKey, killedAt.Phase, key, begins[key], d, want)
				}
			}
			for _, note := range []string{NoteGreenWrites, NoteTrafficSaved} {
				if notes[note] != 1 {
					t.Errorf("note %q written %d times, want once", note, notes[note])
				}
			}
			// Each split is applied once: a step killed right after its begin had not applied it.
			if len(sw.applied) != 2 {
				t.Errorf("killed after %s %s: splits %v (%d before the kill), want 50 %% and 100 %% once each", killedKey, killedAt.Phase, sw.applied, appliedBefore)
			}
			if suspend, marked := green.suspended(t, "shop", "report"); suspend || marked {
				t.Errorf("green's writer: suspended %v, record %v; want it started", suspend, marked)
			}
			if suspend, _ := blue.suspended(t, "shop", "report"); !suspend {
				t.Error("blue's writer runs again")
			}
		})
	}
}
