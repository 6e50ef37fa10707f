package migrate

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/storage"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/utils/ptr"
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

func TestQuiescePatchAndUndo(t *testing.T) {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "x", "annotations": map[string]any{"keep": "1", "kubeflow-resource-stopped": "old"}},
		"spec":     map[string]any{"replicas": int64(3), "enabled": true, "schedule": map[string]any{"cron": "* * * * *"}},
	}}
	for _, tc := range []struct {
		rule     config.QuiesceRule
		patch    string
		original string
	}{
		{config.QuiesceRule{Action: ScaleToZero}, `{"spec":{"replicas":0}}`, `{"action":"scale-to-zero","replicas":3}`},
		{config.QuiesceRule{Action: Suspend}, `{"spec":{"suspend":true}}`, `{"action":"suspend","suspend":false}`},
		{config.QuiesceRule{Action: Annotate, Annotations: map[string]string{"kubeflow-resource-stopped": "ferry", "new": "y"}},
			`{"metadata":{"annotations":{"kubeflow-resource-stopped":"ferry","new":"y"}}}`,
			`{"action":"annotate","undo":{"metadata":{"annotations":{"kubeflow-resource-stopped":"old","new":null}}}}`},
		{config.QuiesceRule{Action: Patch, Patch: `{"spec":{"enabled":false,"added":1}}`}, `{"spec":{"added":1,"enabled":false}}`,
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
	// A StatefulSet that deletes the claims of the replicas it removes keeps them while stopped.
	deletes := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"replicas": int64(2),
		"persistentVolumeClaimRetentionPolicy": map[string]any{"whenScaled": "Delete", "whenDeleted": "Retain"}}}}
	for _, tc := range []struct {
		rule            config.QuiesceRule
		patch, original string
	}{
		{config.QuiesceRule{Action: ScaleToZero}, `{"spec":{"persistentVolumeClaimRetentionPolicy":{"whenScaled":"Retain"},"replicas":0}}`,
			`{"action":"scale-to-zero","replicas":2,"undo":{"spec":{"persistentVolumeClaimRetentionPolicy":{"whenScaled":"Delete"}}}}`},
		{config.QuiesceRule{Action: Patch, Patch: `{"spec":{"replicas":1}}`}, `{"spec":{"persistentVolumeClaimRetentionPolicy":{"whenScaled":"Retain"},"replicas":1}}`,
			`{"action":"patch","undo":{"spec":{"persistentVolumeClaimRetentionPolicy":{"whenScaled":"Delete"},"replicas":2}}}`},
		{config.QuiesceRule{Action: Patch, Patch: `{"spec":{"replicas":3}}`}, `{"spec":{"replicas":3}}`, `{"action":"patch","undo":{"spec":{"replicas":2}}}`},
		{config.QuiesceRule{Action: Suspend}, `{"spec":{"suspend":true}}`, `{"action":"suspend","suspend":false}`},
	} {
		orig, patch, err := quiescePatch(tc.rule, deletes)
		if err != nil {
			t.Fatal(err)
		}
		record, _ := json.Marshal(orig)
		if string(patch) != tc.patch || string(record) != tc.original {
			t.Errorf("%s %s on a set that deletes its claims: patch %s, record %s; want %s, %s", tc.rule.Action, tc.rule.Patch, patch, record, tc.patch, tc.original)
		}
	}
	// Stopped again (started since, by hand or by a tool) under a record that lacks the undo (an
	// older ferry's, or one written while the set kept its claims): the record gains it.
	running := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"replicas": int64(2),
		"persistentVolumeClaimRetentionPolicy": map[string]any{"whenScaled": "Delete"}}}}
	orig, patch, err := quiescePatch(config.QuiesceRule{Action: ScaleToZero}, running)
	if err != nil {
		t.Fatal(err)
	}
	for record, want := range map[string]string{
		`{"action":"scale-to-zero","replicas":2}`: `{"metadata":{"annotations":{"ferry.dev/quiesced":"{\"action\":\"scale-to-zero\",\"replicas\":2,\"undo\":{\"spec\":{\"persistentVolumeClaimRetentionPolicy\":{\"whenScaled\":\"Delete\"}}}}"}},"spec":{"persistentVolumeClaimRetentionPolicy":{"whenScaled":"Retain"},"replicas":0}}`,
		`{"action":"scale-to-zero","replicas":2,"undo":{"spec":{"persistentVolumeClaimRetentionPolicy":{"whenScaled":"Delete"}}}}`: string(patch),
	} {
		got, err := keepClaimsInRecord(record, orig, patch)
		if err != nil || string(got) != want {
			t.Errorf("stopped again under record %s: patch %s, %v; want %s", record, got, err, want)
		}
	}
	// Started again from the record, it deletes them as before.
	stopped := `{"metadata":{"annotations":{"ferry.dev/quiesced":"{\"action\":\"scale-to-zero\",\"replicas\":2,\"undo\":{\"spec\":{\"persistentVolumeClaimRetentionPolicy\":{\"whenScaled\":\"Delete\"}}}}"}},` +
		`"spec":{"replicas":0,"persistentVolumeClaimRetentionPolicy":{"whenScaled":"Retain","whenDeleted":"Retain"}}}`
	var in map[string]any
	if err := json.Unmarshal([]byte(stopped), &in); err != nil {
		t.Fatal(err)
	}
	want := `{"metadata":{"annotations":{}},"spec":{"persistentVolumeClaimRetentionPolicy":{"whenDeleted":"Retain","whenScaled":"Delete"},"replicas":2}}`
	if got, _ := json.Marshal(startedForm(in)); string(got) != want {
		t.Errorf("started again: %s, want %s", got, want)
	}
	if _, _, err := quiescePatch(config.QuiesceRule{Action: "explode"}, obj); err == nil {
		t.Error("an unknown action must fail")
	}
}

// TestStartedForm: an object as Start leaves it, from its quiesce record; one without a record is
// left as it is.
func TestStartedForm(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"scaled", `{"metadata":{"name":"x","annotations":{"ferry.dev/quiesced":"{\"action\":\"scale-to-zero\",\"replicas\":3}"}},"spec":{"replicas":0}}`,
			`{"metadata":{"annotations":{},"name":"x"},"spec":{"replicas":3}}`},
		{"patched", `{"metadata":{"annotations":{"ferry.dev/quiesced":"{\"action\":\"patch\",\"undo\":{\"spec\":{\"added\":null,\"on\":true}}}"}},"spec":{"added":1,"on":false}}`,
			`{"metadata":{"annotations":{}},"spec":{"on":true}}`},
		{"never quiesced", `{"metadata":{"name":"y"},"spec":{"replicas":2}}`, `{"metadata":{"name":"y"},"spec":{"replicas":2}}`},
	} {
		var in map[string]any
		if err := json.Unmarshal([]byte(tc.in), &in); err != nil {
			t.Fatal(err)
		}
		if got, _ := json.Marshal(startedForm(in)); string(got) != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestWriterRules(t *testing.T) {
	obj := func(apiVersion, kind, ns, name string, owner ...string) runtime.Object {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind,
			"metadata": map[string]any{"name": name, "namespace": ns}}}
		if len(owner) == 2 {
			u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "apps/v1", Kind: owner[0], Name: owner[1], Controller: ptr.To(true)}})
		}
		return u
	}
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(),
		obj("v1", "Pod", "team", "web-abc-1", "ReplicaSet", "web-abc"),
		obj("apps/v1", "ReplicaSet", "team", "web-abc", "Deployment", "web"),
		obj("v1", "Pod", "team", "db-0", "StatefulSet", "db"),
		obj("v1", "Pod", "team", "lonely"),
		obj("v1", "Pod", "kubeflow", "mysql-1", "ReplicaSet", "mysql-1"),
	)
	plan := &plans.Plan{
		Volumes: []plans.Volume{
			{Namespace: "team", Name: "data", Pods: []plans.PodUse{{Name: "web-abc-1"}, {Name: "db-0"}, {Name: "lonely"}, {Name: "gone"}}},
			{Namespace: "kubeflow", Name: "mysql-pv-claim", Holds: "kfp-mysql", Pods: []plans.PodUse{{Name: "mysql-1"}}},
		},
		Resources: []plans.Resource{{Group: "batch", Version: "v1", Resource: "cronjobs", Namespaces: map[string]plans.Count{"team": {}, "ops": {}}}},
	}
	rules, err := WriterRules(context.Background(), dyn, plan)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rules {
		got = append(got, fmt.Sprintf("%s %s %v %s", r.Resource, r.Namespace, r.Names, r.Action))
	}
	want := []string{
		"cronjobs.batch ops [] suspend",
		"cronjobs.batch team [] suspend",
		"deployments.apps team [web] scale-to-zero",
		"statefulsets.apps team [db] scale-to-zero",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("WriterRules =\n%q\nwant\n%q", got, want)
	}
}
