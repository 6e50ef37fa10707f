package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/storage"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func fileStore(t *testing.T) storage.Backend {
	t.Helper()
	store, err := storage.Open(context.Background(), "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return store
}

func TestJournalRecordsAndReopens(t *testing.T) {
	ctx := context.Background()
	store := fileStore(t)
	run := Run{ID: NewID(time.Now()), Blue: plans.Cluster{UID: "b"}, Green: plans.Cluster{UID: "g"}}
	j, err := CreateJournal(ctx, store, run)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CreateJournal(ctx, store, run); err == nil {
		t.Fatal("a second journal of the same run must be refused")
	}
	for _, e := range []Event{{State: Planned, Phase: Begin}, {State: Planned, Phase: Done}, {State: Preflighted, Phase: Begin}} {
		if _, err := j.Append(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	again, err := OpenJournal(ctx, store, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := again.Current(); got != Planned {
		t.Errorf("current state %q, want planned (preflight only began)", got)
	}
	if again.IsDone(Preflighted, 0) || !again.IsDone(Planned, 0) {
		t.Error("IsDone disagrees with the journal")
	}
	// A second process appending from a stale view collides instead of interleaving.
	if _, err := j.Append(ctx, Event{State: Preflighted, Phase: Done}); err != nil {
		t.Fatal(err)
	}
	if _, err := again.Append(ctx, Event{State: Preflighted, Phase: Done}); err == nil {
		t.Error("an append from a stale view must fail")
	}
	ids, err := ListRuns(ctx, store)
	if err != nil || !reflect.DeepEqual(ids, []string{run.ID}) {
		t.Errorf("ListRuns = %v, %v", ids, err)
	}
	if _, err := OpenJournal(ctx, store, "no-such-run"); err == nil {
		t.Error("opening a missing run must fail")
	}
}

func TestLeaseKeepsASecondRunOff(t *testing.T) {
	ctx := context.Background()
	store := fileStore(t)
	log := slog.New(slog.DiscardHandler)
	a := Run{ID: "run-a", Blue: plans.Cluster{UID: "b"}, Green: plans.Cluster{UID: "g"}}
	b := Run{ID: "run-b", Blue: plans.Cluster{UID: "g"}, Green: plans.Cluster{UID: "b"}} // the same pair, either way round
	la, err := AcquireLease(ctx, store, a, time.Second, log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := AcquireLease(ctx, store, b, time.Second, log); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("a second run on the same clusters: %v, want ErrLeaseHeld", err)
	}
	la.cancel() // the holder dies: no renewal, no release
	<-la.done
	time.Sleep(1100 * time.Millisecond)
	lb, err := AcquireLease(ctx, store, b, time.Second, log)
	if err != nil {
		t.Fatalf("an expired lease must be taken over: %v", err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	other := Run{ID: "run-c", Blue: plans.Cluster{UID: "x"}, Green: plans.Cluster{UID: "y"}}
	lc, err := AcquireLease(ctx, store, other, time.Second, log)
	if err != nil {
		t.Fatalf("other clusters are free: %v", err)
	}
	lc.Release(ctx)
}

func TestQuiescePatchAndUndo(t *testing.T) {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "x", "annotations": map[string]any{"keep": "1", "kubeflow-resource-stopped": "old"}},
		"spec":     map[string]any{"replicas": int64(3), "enabled": true, "schedule": map[string]any{"cron": "* * * * *"}},
	}}
	for _, tc := range []struct {
		rule     plans.QuiesceRule
		patch    string
		original string
	}{
		{plans.QuiesceRule{Action: ScaleToZero}, `{"spec":{"replicas":0}}`, `{"action":"scale-to-zero","replicas":3}`},
		{plans.QuiesceRule{Action: Suspend}, `{"spec":{"suspend":true}}`, `{"action":"suspend","suspend":false}`},
		{plans.QuiesceRule{Action: Annotate, Annotations: map[string]string{"kubeflow-resource-stopped": "ferry", "new": "y"}},
			`{"metadata":{"annotations":{"kubeflow-resource-stopped":"ferry","new":"y"}}}`,
			`{"action":"annotate","undo":{"metadata":{"annotations":{"kubeflow-resource-stopped":"old","new":null}}}}`},
		{plans.QuiesceRule{Action: Patch, Patch: `{"spec":{"enabled":false,"added":1}}`}, `{"spec":{"added":1,"enabled":false}}`,
			`{"action":"patch","undo":{"spec":{"added":null,"enabled":true}}}`},
	} {
		orig, patch, err := quiescePatch(tc.rule, obj)
		if err != nil {
			t.Fatal(err)
		}
		if string(patch) != tc.patch {
			t.Errorf("%s: patch %s, want %s", tc.rule.Action, patch, tc.patch)
		}
		if got, _ := json.Marshal(orig); string(got) != tc.original {
			t.Errorf("%s: record %s, want %s", tc.rule.Action, got, tc.original)
		}
	}
	if _, _, err := quiescePatch(plans.QuiesceRule{Action: "explode"}, obj); err == nil {
		t.Error("an unknown action must fail")
	}
}
