package migrate

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/migrate/traffic"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
)

// failGreensFirstStop makes green's first (not dry-run) CronJob patch fail, as an API server that
// cannot be reached would: a rollback stops there, after blue's writers started.
func failGreensFirstStop(green fakeCluster) {
	fail := true
	green.dyn.PrependReactor("patch", "cronjobs", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if p := a.(clienttesting.PatchActionImpl); fail && len(p.PatchOptions.DryRun) == 0 {
			fail = false
			return true, nil, errors.New("green's API server cannot be reached")
		}
		return false, nil, nil
	})
}

// setColor writes the shop's settings on c, as its users do.
func setColor(t *testing.T, c fakeCluster, value string) {
	t.Helper()
	cm := c.get(t, configMapsGVR, "shop", "settings")
	unstructured.SetNestedField(cm.Object, value, "data", "color")
	if _, err := c.dyn.Resource(configMapsGVR).Namespace("shop").Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestRollbackThatStoppedHalfWay: a rollback discarding green's writes started blue's writers and
// then failed to stop green's. Blue serves and takes writes: a carry-back now would overwrite
// them, so it is refused; migrate --resume and finalize, which would run both clusters' writers,
// are refused; the rollback itself goes on, as decided, without the flag again.
func TestRollbackThatStoppedHalfWay(t *testing.T) {
	ctx := context.Background()
	o, blue, green, _, id := shifted(t)
	greenWrites(t, green)
	failGreensFirstStop(green)
	r := resume(t, o, id)
	if err := r.Rollback(ctx, RollbackOptions{DiscardGreenWrites: true, By: "ops"}); err == nil {
		t.Fatal("the rollback did not fail at green's stop")
	}
	if s, _ := blue.suspended(t, "shop", "report"); s {
		t.Fatal("blue's writer was not started before green's stop failed")
	}
	setColor(t, blue, "blue-after-rollback")
	r.Close(ctx)
	r = resume(t, o, id)
	if err := r.Drive(ctx); !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "began rolling back") {
		t.Errorf("migrate --resume after a rollback began: %v, want it refused", err)
	}
	if err := r.Finalize(ctx); !errors.Is(err, ErrStopped) {
		t.Errorf("finalize after a rollback began: %v, want it refused", err)
	}
	if err := r.Flip(ctx, traffic.Green(50)); !errors.Is(err, ErrStopped) {
		t.Errorf("ferry flip to green after a rollback began: %v, want it refused", err)
	}
	if !r.RollingBack() {
		t.Error("RollingBack: false, want the command line to say the rollback goes on")
	}
	if err := r.Rollback(ctx, RollbackOptions{CarryBack: true, By: "ops"}); !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "started blue's writers again") {
		t.Errorf("carry-back once blue's writers started: %v, want it refused", err)
	}
	if err := r.Rollback(ctx, RollbackOptions{By: "ops"}); err != nil {
		t.Fatalf("the rollback going on: %v", err)
	}
	if c := color(t, blue, "settings"); c != "blue-after-rollback" {
		t.Errorf("blue's settings %q, want blue's write since the traffic came back", c)
	}
	if s, marked := green.suspended(t, "shop", "report"); !s || !marked {
		t.Error("green's writer was not stopped")
	}
	if err := r.Rollback(ctx, RollbackOptions{CarryBack: true, By: "ops"}); !errors.Is(err, ErrStopped) {
		t.Errorf("carry-back of a run rolled back without green's writes: %v, want it refused", err)
	}
	if err := r.Finalize(ctx); !errors.Is(err, ErrStopped) {
		t.Errorf("finalize of a rolled-back run: %v, want it refused", err)
	}
}

// TestRollbackOfAQuiesceThatFailedHalfWay: the quiesce stops one of blue's writers and fails on
// the next (a webhook refuses it): the rollback starts the one it stopped.
func TestRollbackOfAQuiesceThatFailedHalfWay(t *testing.T) {
	ctx := context.Background()
	store, blue, green, sw := fileStore(t), shopBlue(t, cronJob("shop", "zreport")), newFakeCluster(t, "green"), &fakeSwitcher{}
	blue.dyn.PrependReactor("patch", "cronjobs", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if p := a.(clienttesting.PatchActionImpl); p.GetName() == "zreport" && len(p.PatchOptions.DryRun) == 0 {
			return true, nil, errors.New("admission webhook denied the request")
		}
		return false, nil, nil
	})
	r := start(t, runOn(t, store, blue, green, sw))
	if err := r.Drive(ctx); err == nil {
		t.Fatal("the quiesce did not fail")
	}
	if s, _ := blue.suspended(t, "shop", "report"); !s {
		t.Fatal("the quiesce did not stop blue's first writer")
	}
	if err := r.Rollback(ctx, RollbackOptions{By: "ops"}); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	if s, marked := blue.suspended(t, "shop", "report"); s || marked {
		t.Errorf("blue's CronJob shop/report: suspended %v, quiesce record %v after the rollback; want it as it was", s, marked)
	}
}

// TestCarryBackRefusesGreensLateWrites: green's writer is started again after green's backup
// for the carry-back (a GitOps tool's self-heal) and writes: the carry-back does not end as done,
// a retry refuses too, and going back without those writes is the operator's choice.
func TestCarryBackRefusesGreensLateWrites(t *testing.T) {
	ctx := context.Background()
	o, blue, green, sw, id := shifted(t)
	greenWrites(t, green)
	o.Crash = func(e Event) {
		if e.State == GreenBackedUp && e.Phase == Done {
			cj := green.get(t, cronJobsGVR, "shop", "report")
			unstructured.SetNestedField(cj.Object, false, "spec", "suspend")
			if _, err := green.dyn.Resource(cronJobsGVR).Namespace("shop").Update(ctx, cj, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			setColor(t, green, "green-late")
		}
	}
	r := resume(t, o, id)
	err := r.Rollback(ctx, RollbackOptions{CarryBack: true, By: "ops"})
	if !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "shop/report") {
		t.Fatalf("carry-back with green's writer run after its backup: %v, want it stopped naming the writer", err)
	}
	if r.Journal.IsDone(RolledBack, 0) || len(sw.restored) != 0 {
		t.Fatal("the traffic went back to blue")
	}
	o.Crash = nil
	r.Close(ctx)
	r = resume(t, o, id)
	// Stopped by hand since: the carry-back still lacks what it wrote.
	if err := r.Rollback(ctx, RollbackOptions{CarryBack: true, By: "ops"}); !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "ran after green's backup") ||
		!strings.Contains(err.Error(), "--discard-green-writes") || !r.GreenRanLate() {
		t.Errorf("the carry-back again: %v, want it refused, naming the way back", err)
	}
	if err := r.Rollback(ctx, RollbackOptions{DiscardGreenWrites: true, By: "ops"}); err != nil {
		t.Fatalf("going back with what was carried: %v", err)
	}
	if c := color(t, blue, "settings"); c != "green" {
		t.Errorf("blue's settings %q, want green's as carried back", c)
	}
}
