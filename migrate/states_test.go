package migrate

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/migrate/gates"
	"github.com/ferrykube/ferry/migrate/traffic"
	"github.com/ferrykube/ferry/snapshot"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"
)

// last is the journal's last event that is not a note.
func last(j *Journal) Event {
	events := j.Events()
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Phase != Note {
			return events[i]
		}
	}
	return Event{}
}

// TestStartRefuses: a run whose blue and green are one cluster, or whose clusters another run
// holds, is refused before anything is written: no journal.
func TestStartRefuses(t *testing.T) {
	ctx := context.Background()
	t.Run("one cluster", func(t *testing.T) {
		store, blue := fileStore(t), shopBlue(t)
		_, err := Start(ctx, runOn(t, store, blue, blue, nil))
		if !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "same cluster") {
			t.Fatalf("start: %v, want ErrStopped naming the same cluster", err)
		}
		if ids, _ := ListRuns(ctx, store); len(ids) != 0 {
			t.Errorf("runs %v written", ids)
		}
	})
	t.Run("lease held", func(t *testing.T) {
		store, blue, green := fileStore(t), shopBlue(t), newFakeCluster(t, "green")
		first := start(t, runOn(t, store, blue, green, nil))
		_, err := Start(ctx, runOn(t, store, blue, green, nil))
		if !errors.Is(err, ErrLeaseHeld) || !strings.Contains(err.Error(), first.Journal.Run.ID) {
			t.Fatalf("a second run: %v, want ErrLeaseHeld naming %s", err, first.Journal.Run.ID)
		}
		if ids, _ := ListRuns(ctx, store); len(ids) != 1 {
			t.Errorf("runs %v, want the first alone", ids)
		}
		// Nor may the first run be resumed by a second process while it holds the lease.
		if _, err := Resume(ctx, runOn(t, store, blue, green, nil), first.Journal.Run.ID); !errors.Is(err, ErrLeaseHeld) {
			t.Errorf("resume while held: %v, want ErrLeaseHeld", err)
		}
	})
	t.Run("unknown run", func(t *testing.T) {
		for _, id := range []string{"run-none", "", "../x"} {
			if _, err := Resume(ctx, Options{Store: fileStore(t)}, id); !badinput.Is(err) {
				t.Errorf("resume %q: %v, want bad input", id, err)
			}
		}
	})
}

// TestPreflightBlocksThenResumes: a blocking finding on green stops the run in planned, before
// blue's writers are touched; once it is fixed, the resumed run takes up the preflight again.
func TestPreflightBlocksThenResumes(t *testing.T) {
	ctx := context.Background()
	hook := obj("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "", "policy")
	hook.Object["webhooks"] = []any{map[string]any{"name": "check.example.com", "failurePolicy": "Fail",
		"clientConfig": map[string]any{"service": map[string]any{"namespace": "hooks", "name": "gone"}}}}
	store, blue, green := fileStore(t), shopBlue(t), newFakeCluster(t, "green", hook)
	r := start(t, runOn(t, store, blue, green, nil))
	err := r.Drive(ctx)
	if !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "hooks/gone") {
		t.Fatalf("drive: %v, want ErrStopped naming the webhook's missing service", err)
	}
	if e := last(r.Journal); e.State != Preflighted || e.Phase != Failed || !strings.Contains(e.Detail, "blocking") {
		t.Errorf("last event %s %s %q, want preflighted failed with the finding", e.State, e.Phase, e.Detail)
	}
	if r.Journal.Current() != Planned {
		t.Errorf("state %q, want planned", r.Journal.Current())
	}
	if suspend, marked := blue.suspended(t, "shop", "report"); suspend || marked {
		t.Error("blue's writer was stopped by a run that did not pass its preflight")
	}
	if err := r.Rollback(ctx, RollbackOptions{}); !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "never quiesced") {
		t.Errorf("rollback before the quiesce: %v, want it refused: nothing to roll back", err)
	}
	r.Close(ctx)

	if err := green.dyn.Resource(schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}).
		Delete(ctx, "policy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err = Resume(ctx, runOn(t, store, blue, green, nil), r.Journal.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if err := r.Drive(ctx); err != nil {
		t.Fatalf("resumed: %v", err)
	}
	if n := countPhase(r.Journal, Planned, Begin); n != 1 {
		t.Errorf("planned begun %d times, want once: the plan is the journal's", n)
	}
	if n := countPhase(r.Journal, Preflighted, Begin); n != 2 {
		t.Errorf("preflighted begun %d times, want again after its failure", n)
	}
}

func countPhase(j *Journal, s State, phase string) int {
	n := 0
	for _, e := range j.Events() {
		if e.State == s && e.Phase == phase {
			n++
		}
	}
	return n
}

// scratchClaim is claim shop/scratch of class standard, in phase, bound to volume (or none).
func scratchClaim(phase, volume string) *unstructured.Unstructured {
	claim := obj("v1", "PersistentVolumeClaim", "shop", "scratch")
	spec := map[string]any{"accessModes": []any{"ReadWriteOnce"}, "storageClassName": "standard",
		"resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}}}
	if volume != "" {
		spec["volumeName"] = volume
	}
	claim.Object["spec"] = spec
	claim.Object["status"] = map[string]any{"phase": phase}
	return claim
}

// TestBackupSkippedStopsUnlessAllowed: a backup that skipped an item (a claim whose volume is
// lost) stops the run in quiesced, naming it; resumed with skipped items allowed, the same backup
// is kept, not made again, and the run goes on.
func TestBackupSkippedStopsUnlessAllowed(t *testing.T) {
	ctx := context.Background()
	claim, class := scratchClaim("Lost", "pv-gone"), obj("storage.k8s.io/v1", "StorageClass", "", "standard")
	store, blue, green := fileStore(t), shopBlue(t, claim, class), newFakeCluster(t, "green", class.DeepCopy())
	r := start(t, runOn(t, store, blue, green, nil))
	err := r.Drive(ctx)
	if !errors.Is(err, ErrStopped) || !errors.Is(err, ErrSkipped) || !strings.Contains(err.Error(), "volume shop/scratch") {
		t.Fatalf("drive: %v, want ErrStopped naming the skipped claim", err)
	}
	if e := last(r.Journal); e.State != BackedUp || e.Phase != Failed {
		t.Errorf("last event %s %s, want backed-up failed", e.State, e.Phase)
	}
	if r.Journal.Current() != Quiesced {
		t.Errorf("state %q, want quiesced", r.Journal.Current())
	}
	r.Close(ctx)

	o := runOn(t, store, blue, green, nil)
	o.AllowSkipped = true
	r, err = Resume(ctx, o, r.Journal.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	err = r.Drive(ctx)
	e, ok := r.Journal.Last(BackedUp, Done, 0)
	if !ok || !strings.Contains(e.Detail, "the backup finished before the run was interrupted") || !strings.Contains(e.Detail, "skipped (allowed): volume shop/scratch") {
		t.Fatalf("resumed (%v): backed-up %q, want the backup kept with its skipped claim named", err, e.Detail)
	}
}

// TestClaimWithoutAVolumeIsNoLoss: a claim that never had a volume (pending, as a notebook's
// workspace is until its notebook first starts) holds no data: the backup names it as having
// nothing to copy, not as skipped, the run goes on without --allow-skipped, and green's copy,
// pending too, is not held to be bound.
func TestClaimWithoutAVolumeIsNoLoss(t *testing.T) {
	ctx := context.Background()
	claim, class := scratchClaim("Pending", ""), obj("storage.k8s.io/v1", "StorageClass", "", "standard")
	store, blue, green := fileStore(t), shopBlue(t, claim, class), newFakeCluster(t, "green", class.DeepCopy())
	r := start(t, runOn(t, store, blue, green, &fakeSwitcher{}))
	if err := r.Drive(ctx); err != nil {
		t.Fatalf("drive: %v, want the run done\njournal %q", err, states(r.Journal))
	}
	m, err := snapshot.ReadManifest(ctx, store, r.Journal.Run.Backup)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Skipped) > 0 || len(m.NoData) != 1 || m.NoData[0].Name != "shop/scratch" {
		t.Errorf("the backup skipped %+v and found no data in %+v, want nothing skipped and shop/scratch without data", m.Skipped, m.NoData)
	}
	if e, _ := r.Journal.Last(BackedUp, Done, 0); !strings.Contains(e.Detail, "nothing to copy (no data, not a loss; made again as they are): volume shop/scratch") {
		t.Errorf("backed-up %q, want the claim named as having nothing to copy", e.Detail)
	}
}

// TestRestoreFailureStopsThenResumes: an object green refuses fails the restore, which stops the
// run in backed-up and names it; the resumed run restores again from the same backup.
func TestRestoreFailureStopsThenResumes(t *testing.T) {
	ctx := context.Background()
	store, blue, green := fileStore(t), shopBlue(t), newFakeCluster(t, "green")
	var refuse atomic.Bool
	refuse.Store(true)
	green.dyn.PrependReactor("create", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if refuse.Load() {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "settings", errors.New("quota exceeded"))
		}
		return false, nil, nil
	})
	r := start(t, runOn(t, store, blue, green, nil))
	err := r.Drive(ctx)
	if !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "failed to restore on green") || !strings.Contains(err.Error(), "shop/settings") {
		t.Fatalf("drive: %v, want ErrStopped naming the ConfigMap", err)
	}
	if r.Journal.Current() != BackedUp {
		t.Errorf("state %q, want backed-up", r.Journal.Current())
	}
	if rep := BuildReport(r.Journal); rep.Verification == nil || rep.Verification.Counts["objects"]["failed"] == 0 {
		t.Errorf("the report's verification %+v, want the failed restore's counts", rep.Verification)
	}
	r.Close(ctx)

	refuse.Store(false)
	r, err = Resume(ctx, runOn(t, store, blue, green, nil), r.Journal.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if err := r.Drive(ctx); err != nil {
		t.Fatalf("resumed: %v", err)
	}
	if n := countPhase(r.Journal, BackedUp, Begin); n != 1 {
		t.Errorf("backed-up begun %d times, want once", n)
	}
	if green.get(t, configMapsGVR, "shop", "settings") == nil {
		t.Error("green lacks the ConfigMap after the resumed restore")
	}
}

// TestVerifyDifferenceStops: an object changed on green between the restore and the verify
// stops the run in restored, naming it, before green's writers start or traffic moves.
func TestVerifyDifferenceStops(t *testing.T) {
	ctx := context.Background()
	store, blue, green, sw := fileStore(t), shopBlue(t), newFakeCluster(t, "green"), &fakeSwitcher{}
	o := runOn(t, store, blue, green, sw)
	o.Crash = func(e Event) {
		if e.State == Restored && e.Phase == Done {
			cm := green.get(t, configMapsGVR, "shop", "settings")
			unstructured.SetNestedField(cm.Object, "green", "data", "color")
			if _, err := green.dyn.Resource(configMapsGVR).Namespace("shop").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
				t.Error(err)
			}
		}
	}
	r := start(t, o)
	err := r.Drive(ctx)
	if !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "green differs from the backup") || !strings.Contains(err.Error(), "shop/settings") {
		t.Fatalf("drive: %v, want ErrStopped naming the ConfigMap", err)
	}
	if r.Journal.Current() != Restored {
		t.Errorf("state %q, want restored", r.Journal.Current())
	}
	if len(sw.applied) != 0 || r.noted(NoteGreenWrites) {
		t.Errorf("traffic moved (%v) or green noted as taking writes after a failed verify", sw.applied)
	}
	if suspend, marked := green.suspended(t, "shop", "report"); !suspend || !marked {
		t.Error("green's writer started after a failed verify")
	}
	rep := BuildReport(r.Journal)
	if rep.Verification == nil || len(rep.Verification.Items) == 0 || !strings.Contains(rep.Problem, "green differs") {
		t.Errorf("report: verification %+v, problem %q; want the difference", rep.Verification, rep.Problem)
	}
}

// TestGateFailureReturnsTraffic: a failed gate sends traffic back to blue's saved state at once,
// and leaves the writers as they are: green may hold writes, and dropping them is the operator's
// choice, never a gate's. A plain rollback then refuses; one that discards them goes back.
func TestGateFailureReturnsTraffic(t *testing.T) {
	ctx := context.Background()
	store, blue, green, sw := fileStore(t), shopBlue(t), newFakeCluster(t, "green"), &fakeSwitcher{}
	gate := &fakeGate{results: []gates.Measurement{{OK: false, Detail: "500s"}}}
	o := runOn(t, store, blue, green, sw, gate)
	budget := 0
	o.Config.Rollout.FailureBudget = &budget
	r := start(t, o)
	err := r.Drive(ctx)
	if !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "gate failed at 50 %") || !strings.Contains(err.Error(), "traffic is back on blue") ||
		!strings.Contains(err.Error(), "--carry-back") {
		t.Fatalf("drive: %v, want ErrStopped: the gate failed, traffic is back on blue, the ways on named", err)
	}
	if len(sw.restored) != 1 || string(sw.restored[0]) != `{"blue":100,"green":0}` {
		t.Errorf("traffic put back %q, want blue's saved state once", sw.restored)
	}
	if e, ok := r.lastNote(NoteTrafficReturned); !ok || !strings.Contains(string(e.Data), "automatic: gate failed at 50 %") {
		t.Errorf("note %q: %s, want why the traffic went back", NoteTrafficReturned, e.Data)
	}
	if _, ok := r.Journal.Last(RolledBack, Begin, 0); ok {
		t.Error("the gate rolled the writers back: green's writes are lost to a carry-back")
	}
	if suspend, marked := blue.suspended(t, "shop", "report"); !suspend || !marked {
		t.Error("blue's writer started: it would write beside green's")
	}
	if suspend, _ := green.suspended(t, "shop", "report"); suspend {
		t.Error("green's writer was stopped")
	}
	if rep := BuildReport(r.Journal); len(rep.TrafficSteps) != 1 || rep.TrafficSteps[0].Result != Failed {
		t.Errorf("report: traffic steps %+v", rep.TrafficSteps)
	}
	if err := r.Drive(ctx); !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "sent traffic back to blue") || len(sw.applied) != 1 {
		t.Errorf("migrate --resume after the gate sent traffic back: %v, splits %v; want it refused, no split applied again", err, sw.applied)
	}
	if err := r.Rollback(ctx, RollbackOptions{}); !errors.Is(err, ErrGreenWrites) {
		t.Errorf("plain rollback after the gate: %v, want it refused", err)
	}
	if err := r.Rollback(ctx, RollbackOptions{DiscardGreenWrites: true, By: "ops"}); err != nil {
		t.Fatalf("rollback discarding green's writes: %v", err)
	}
	if suspend, marked := blue.suspended(t, "shop", "report"); suspend || marked {
		t.Error("blue's writer did not start again")
	}
	if suspend, marked := green.suspended(t, "shop", "report"); !suspend || !marked {
		t.Error("green's writer was not stopped")
	}
	if err := r.Drive(ctx); !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "rolled back") {
		t.Errorf("driving a rolled-back run: %v, want it refused", err)
	}
	if n := countPhase(r.Journal, RolledBack, Begin); n != 1 {
		t.Errorf("rolled back %d times", n)
	}
}

// TestInconclusiveGatePausesThenResumes: an inconclusive gate pauses the run at its step (the
// journal says paused, not failed); resumed, the same step is taken again and the run shifts.
func TestInconclusiveGatePausesThenResumes(t *testing.T) {
	ctx := context.Background()
	store, blue, green, sw := fileStore(t), shopBlue(t), newFakeCluster(t, "green"), &fakeSwitcher{}
	r := start(t, runOn(t, store, blue, green, sw, &fakeGate{results: []gates.Measurement{{Inconclusive: true, Detail: "no data"}}}))
	err := r.Drive(ctx)
	if !errors.Is(err, ErrPaused) || !strings.Contains(err.Error(), "inconclusive at 50 %") {
		t.Fatalf("drive: %v, want ErrPaused at 50 %%", err)
	}
	if e := last(r.Journal); e.State != Shifting || e.Step != 50 || e.Phase != Paused {
		t.Errorf("last event %s@%d %s, want shifting@50 paused", e.State, e.Step, e.Phase)
	}
	if rep := BuildReport(r.Journal); len(rep.TrafficSteps) != 1 || rep.TrafficSteps[0].Result != Paused || !strings.Contains(rep.Problem, "inconclusive") {
		t.Errorf("report: traffic steps %+v, problem %q; want the 50 %% step paused", rep.TrafficSteps, rep.Problem)
	}
	r.Close(ctx)

	r, err = Resume(ctx, runOn(t, store, blue, green, sw, &fakeGate{results: []gates.Measurement{{OK: true}}}), r.Journal.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if err := r.Drive(ctx); err != nil {
		t.Fatalf("resumed: %v", err)
	}
	if r.Journal.Current() != Shifted || countPhase(r.Journal, Shifting, Begin) != 4 {
		t.Errorf("resumed: state %q, journal %q; want shifted, the 50 %% step begun again", r.Journal.Current(), states(r.Journal))
	}
	if want := []traffic.Split{traffic.Green(50), traffic.Green(50), traffic.Green(100)}; len(sw.applied) != 3 || sw.applied[1] != want[1] || sw.applied[2] != want[2] {
		t.Errorf("splits %v, want %v", sw.applied, want)
	}
}

// TestNoSwitcher: without a traffic switcher the run starts green's writers and stops at
// shifted with a note for the operator; a flip by hand is refused, finalize is not.
func TestNoSwitcher(t *testing.T) {
	ctx := context.Background()
	store, blue, green := fileStore(t), shopBlue(t), newFakeCluster(t, "green")
	r := start(t, runOn(t, store, blue, green, nil))
	if err := r.Finalize(ctx); !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "has not shifted") {
		t.Errorf("finalize before the shift: %v, want it refused", err)
	}
	if err := r.Drive(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(states(r.Journal), " "), "no traffic switcher") || r.Journal.Current() != Shifted {
		t.Errorf("journal %q, want the operator told to move traffic, and shifted", states(r.Journal))
	}
	if suspend, _ := green.suspended(t, "shop", "report"); suspend {
		t.Error("green's writer was not started")
	}
	if err := r.Flip(ctx, traffic.Green(100)); !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "no traffic switcher") {
		t.Errorf("flip: %v, want it refused", err)
	}
	if err := r.Finalize(ctx); err != nil {
		t.Errorf("finalize: %v", err)
	}
}

// TestFlipByHand: a flip journals blue's traffic state once, notes green's writes before the
// split towards green is applied, and records the split.
func TestFlipByHand(t *testing.T) {
	ctx := context.Background()
	sw := &fakeSwitcher{}
	r := testRunner(t, Options{Switcher: sw}, doneUpTo(Verified)...)
	for _, split := range []traffic.Split{traffic.Green(0), traffic.Green(30), traffic.Green(0)} {
		if err := r.Flip(ctx, split); err != nil {
			t.Fatal(err)
		}
	}
	var notes []string
	for _, e := range r.Journal.Events() {
		if e.Phase == Note {
			notes = append(notes, e.Detail)
		}
	}
	want := []string{NoteTrafficSaved, "flipped by hand: " + traffic.Green(0).String(), NoteGreenWrites,
		"flipped by hand: " + traffic.Green(30).String(), "flipped by hand: " + traffic.Green(0).String()}
	if strings.Join(notes, "|") != strings.Join(want, "|") {
		t.Errorf("notes %q, want %q", notes, want)
	}
}
