package migrate

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

// labObject is an object of namespace lab, controlled by owner ("Kind/name", or none).
func labObject(apiVersion, kind, name, owner string, fields map[string]any) *unstructured.Unstructured {
	meta := map[string]any{"name": name, "namespace": "lab", "uid": kind + "-" + name}
	if ownerKind, ownerName, ok := strings.Cut(owner, "/"); ok {
		ownerAPI := map[string]string{"CronJob": "batch/v1", "Job": "batch/v1", "ReplicaSet": "apps/v1", "Deployment": "apps/v1", "Rollout": "argoproj.io/v1alpha1",
			"ScaledJob": "keda.sh/v1alpha1", "Agent": "example.com/v1"}[ownerKind]
		meta["ownerReferences"] = []any{map[string]any{"apiVersion": ownerAPI, "kind": ownerKind, "name": ownerName, "uid": ownerKind + "-" + ownerName, "controller": true}}
	}
	obj := map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": meta}
	for k, v := range fields {
		obj[k] = v
	}
	return &unstructured.Unstructured{Object: obj}
}

// labPod is a pod of namespace lab in phase, controlled by owner, mounting claim as mount says:
// "rw", "ro-volume" (the volume read-only) or "ro-mount" (its only mount read-only).
func labPod(name, owner, phase, claim, mount string) *unstructured.Unstructured {
	return labObject("v1", "Pod", name, owner, map[string]any{
		"spec": map[string]any{
			"containers": []any{map[string]any{"name": "c", "volumeMounts": []any{map[string]any{"name": "data", "mountPath": "/data", "readOnly": mount == "ro-mount"}}}},
			"volumes":    []any{map[string]any{"name": "data", "persistentVolumeClaim": map[string]any{"claimName": claim, "readOnly": mount == "ro-volume"}}},
		},
		"status": map[string]any{"phase": phase},
	})
}

// labCluster is a fake cluster of namespace lab whose pods write to claims in every way a pod
// may: a Job's, a CronJob's Job's, a Rollout's ReplicaSet's, an operator's ReplicaSet's, a
// ReplicaSet's of nothing, pods run by hand (writing, reading, ended), and a pod of a claim that
// does not move.
func labCluster(rules []config.QuiesceRule) (Quiescer, *plans.Plan) {
	rolloutsGVR := schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "rollouts"}
	objs := []runtime.Object{
		labObject("batch/v1", "Job", "export", "", nil), labPod("export-x", "Job/export", "Running", "results", "rw"),
		labObject("batch/v1", "CronJob", "nightly", "", nil), labObject("batch/v1", "Job", "nightly-1", "CronJob/nightly", nil),
		labPod("nightly-1-x", "Job/nightly-1", "Running", "results", "rw"),
		labObject("argoproj.io/v1alpha1", "Rollout", "web", "", nil), labObject("apps/v1", "ReplicaSet", "web-1", "Rollout/web", nil),
		labPod("web-1-x", "ReplicaSet/web-1", "Running", "cache", "rw"),
		labObject("example.com/v1", "Agent", "agent", "", nil), labObject("apps/v1", "ReplicaSet", "agent-1", "Agent/agent", nil),
		labPod("agent-1-x", "ReplicaSet/agent-1", "Running", "cache", "rw"),
		labObject("apps/v1", "ReplicaSet", "cache", "", nil), labPod("cache-x", "ReplicaSet/cache", "Running", "cache", "rw"),
		labPod("reader", "", "Running", "cache", "ro-volume"), labPod("viewer", "", "Running", "cache", "ro-mount"),
		labPod("toolbox", "", "Running", "notes", "rw"), labPod("done", "", "Succeeded", "notes", "rw"),
		labPod("elsewhere", "", "Running", "scratch", "rw"),
		labObject("keda.sh/v1alpha1", "ScaledJob", "ingest", "", nil), labObject("batch/v1", "Job", "ingest-1", "ScaledJob/ingest", nil),
		labPod("ingest-1-x", "Job/ingest-1", "Running", "results", "rw"),
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		kube.PodsGVR: "PodList", jobsGVR: "JobList", replicaSetsGVR: "ReplicaSetList", rolloutsGVR: "RolloutList",
		{Group: "keda.sh", Version: "v1alpha1", Resource: "scaledjobs"}: "ScaledJobList",
		{Group: "example.com", Version: "v1", Resource: "agents"}:       "AgentList",
		{Group: "batch", Version: "v1", Resource: "cronjobs"}:           "CronJobList"}, objs...)
	mapper := meta.NewDefaultRESTMapper(nil)
	for _, gvk := range []schema.GroupVersionKind{{Group: "batch", Version: "v1", Kind: "Job"}, {Group: "batch", Version: "v1", Kind: "CronJob"},
		{Group: "apps", Version: "v1", Kind: "ReplicaSet"}, {Group: "argoproj.io", Version: "v1alpha1", Kind: "Rollout"},
		{Group: "keda.sh", Version: "v1alpha1", Kind: "ScaledJob"}, {Group: "example.com", Version: "v1", Kind: "Agent"}} {
		mapper.Add(gvk, meta.RESTScopeNamespace)
	}
	use := func(pods ...string) []plans.PodUse {
		var out []plans.PodUse
		for _, p := range pods {
			out = append(out, plans.PodUse{Name: p})
		}
		return out
	}
	plan := &plans.Plan{Volumes: []plans.Volume{
		{Namespace: "lab", Name: "results", Phase: "Bound", Pods: use("export-x", "nightly-1-x", "ingest-1-x")},
		{Namespace: "lab", Name: "cache", Phase: "Bound", Pods: use("web-1-x", "agent-1-x", "cache-x", "reader", "viewer")},
		{Namespace: "lab", Name: "notes", Phase: "Bound", Pods: use("toolbox", "done")},
		{Namespace: "lab", Name: "scratch", Phase: "Pending", Pods: use("elsewhere")},
	}}
	return Quiescer{Dynamic: dyn, Mapper: mapper, Log: slog.New(slog.DiscardHandler), Rules: rules}, plan
}

// TestWriterRulesStopTheWorkloadsNothingElseRuns: a Job of no controller is suspended and a
// ReplicaSet of none scaled to zero, an Argo Rollout scaled to zero as a Deployment is, a KEDA
// ScaledJob paused; a CronJob's Job is its CronJob's rule's, and an operator's ReplicaSet is
// left to ferry.yaml (the operator would scale it up again).
func TestWriterRulesStopTheWorkloadsNothingElseRuns(t *testing.T) {
	q, plan := labCluster(nil)
	rules, err := WriterRules(context.Background(), q.Dynamic, plan)
	if err != nil {
		t.Fatal(err)
	}
	want := []config.QuiesceRule{
		{Resource: "jobs.batch", Namespace: "lab", Names: []string{"export"}, Action: Suspend, Why: "writes to a claim whose files move"},
		{Resource: "replicasets.apps", Namespace: "lab", Names: []string{"cache"}, Action: ScaleToZero, Why: "writes to a claim whose files move"},
		{Resource: "rollouts.argoproj.io", Namespace: "lab", Names: []string{"web"}, Action: ScaleToZero, Why: "writes to a claim whose files move"},
		{Resource: "scaledjobs.keda.sh", Namespace: "lab", Names: []string{"ingest"}, Action: Annotate,
			Annotations: map[string]string{"autoscaling.keda.sh/paused": "true"}, WaitForPods: true,
			Why: "runs jobs that write to a claim whose files move: paused, its running jobs waited for"},
	}
	if len(rules) != len(want) {
		t.Fatalf("rules %+v, want %+v", rules, want)
	}
	for i := range want {
		if got := rules[i]; got.Resource != want[i].Resource || got.Action != want[i].Action || !slices.Equal(got.Names, want[i].Names) || got.Why != want[i].Why ||
			!maps.Equal(got.Annotations, want[i].Annotations) || got.WaitForPods != want[i].WaitForPods {
			t.Errorf("rule %d: %+v, want %+v", i, got, want[i])
		}
	}
}

// TestUnstoppedWritersAreNamed: with the rules a plan implies, the pods that still write to a
// moved claim are the operator's, the CronJob's Job's (unless its CronJob is suspended) and the
// one run by hand; readers, ended pods and writers of a claim whose files do not move are not
// writers; a rule of ferry.yaml stopping the operator's object (its pods' owner's owner) covers
// its pods.
func TestUnstoppedWritersAreNamed(t *testing.T) {
	ctx := context.Background()
	agent := config.QuiesceRule{Resource: "agents.example.com", Namespace: "lab", Names: []string{"agent"}, Action: Patch, Patch: `{"spec":{"paused":true}}`}
	cronJobs := config.QuiesceRule{Resource: "cronjobs.batch", Namespace: "lab", Action: Suspend}
	for _, tc := range []struct {
		name       string
		configured []config.QuiesceRule
		want       []string
	}{
		{"implied rules only", nil, []string{
			"pod lab/agent-1-x (run by ReplicaSet agent-1) writes to claim cache",
			"pod lab/nightly-1-x (run by Job nightly-1) writes to claim results",
			"pod lab/toolbox (run by hand) writes to claim notes"}},
		{"the CronJob and the operator's object stopped", []config.QuiesceRule{cronJobs, agent}, []string{
			"pod lab/toolbox (run by hand) writes to claim notes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, plan := labCluster(nil)
			implied, err := WriterRules(ctx, q.Dynamic, plan)
			if err != nil {
				t.Fatal(err)
			}
			q.Rules = append(tc.configured, implied...)
			got, err := q.UnstoppedWriters(ctx, movedClaims(plan, nil))
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("unstopped writers:\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

// A table written to while its database was dumped, with the writers stopped, has a writer the
// quiesce did not stop: the run's backup lacks its last writes, which stops the run unless
// --allow-skipped; verify, which cannot check the table, is then not stopped by it.
func TestTablesWrittenWhileDumpedAreSkipped(t *testing.T) {
	m := &snapshot.Manifest{Name: "b1", Databases: []snapshot.Database{{Name: "app-db", Tables: []snapshot.Table{
		{Schema: "app", Name: "settled", Rows: 1, Checksum: "s"},
		{Schema: "app", Name: "events", Rows: 4, Checksum: "d", BeforeDump: &snapshot.Reading{Count: 3, Checksum: "c"}},
	}}}}
	written := writtenWhileDumped(m)
	if len(written) != 1 || written[0].Kind != "database" || written[0].Name != "app-db/app.events" {
		t.Fatalf("written while dumped: %+v", written)
	}
	r := &Runner{}
	_, _, err := r.gateSkipped(m, written, "")
	if !errors.Is(err, ErrSkipped) || !strings.Contains(err.Error(), "database app-db/app.events: written to while it was dumped") {
		t.Fatalf("a table written to while dumped: %v, want the run stopped naming it", err)
	}
	r.o.AllowSkipped = true
	data, _, err := r.gateSkipped(m, written, "")
	if err != nil || !reflect.DeepEqual(data, written) {
		t.Fatalf("allowed: %v, data %+v", err, data)
	}
	problems := []snapshot.ReportItem{
		{Kind: "databases", Status: snapshot.StatusSkipped, Name: "app-db/app.events", Detail: "not compared: written to while it was dumped"},
		{Kind: "databases", Status: snapshot.StatusDifferent, Name: "app-db/app.events", Detail: "rows"},
		{Kind: "databases", Status: snapshot.StatusSkipped, Name: "app-db/app.other", Detail: "not compared"},
	}
	if got := withoutUnchecked(slices.Clone(problems), written); !reflect.DeepEqual(got, problems[1:]) {
		t.Errorf("verify's problems but the allowed unchecked tables: %+v", got)
	}
}
