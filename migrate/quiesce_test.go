package migrate

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans/config"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
)

func TestDataWorkloadsAreNeverImpliedWriters(t *testing.T) {
	cfg := config.Planning{
		Databases: []config.Database{{Name: "db", Namespace: "shop", Workload: "StatefulSet/mariadb"}, {Name: "pg", Namespace: "shop", Workload: "deployment/pg"}},
		Buckets:   []config.Bucket{{Name: "art", Namespace: "ml", Workload: "statefulset/minio"}, {Name: "s3", Endpoint: "https://s3.example"}},
	}
	got := dataWorkloads(cfg)
	for _, want := range [][3]string{{"statefulsets.apps", "shop", "mariadb"}, {"deployments.apps", "shop", "pg"}, {"statefulsets.apps", "ml", "minio"}} {
		if !got[want] {
			t.Errorf("%v is not among the data workloads %v", want, got)
		}
	}
	if len(got) != 3 {
		t.Errorf("data workloads %v, want 3", got)
	}
}

// TestStopWaitsForTheWritersPods: scaling a writer to zero leaves its pods to end in their grace
// period, writing meanwhile; Stop returns once the last is gone (pods that ended, and pods of
// other workloads, are not waited for), also when a run before stopped the writer, and says
// which still run when they outlast its timeout.
func TestStopWaitsForTheWritersPods(t *testing.T) {
	ctx := context.Background()
	pod := func(name, app, phase string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": name, "namespace": "shop", "labels": map[string]any{"app": app}},
			"status":   map[string]any{"phase": phase}}}
	}
	deployment := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "namespace": "shop"},
		"spec":     map[string]any{"replicas": int64(2), "selector": map[string]any{"matchLabels": map[string]any{"app": "web"}}}}}
	deploymentsGVR := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	newQuiescer := func(timeout time.Duration) (Quiescer, *dynamicfake.FakeDynamicClient) {
		dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
			withWebhookLists(map[schema.GroupVersionResource]string{kube.PodsGVR: "PodList", deploymentsGVR: "DeploymentList"}),
			deployment.DeepCopy(), pod("web-1", "web", "Running"), pod("web-0", "web", "Succeeded"), pod("db-0", "db", "Running"))
		mapper := meta.NewDefaultRESTMapper(nil)
		mapper.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
		return Quiescer{Dynamic: dyn, Mapper: mapper, Log: slog.New(slog.DiscardHandler), StopTimeout: timeout,
			Rules: []config.QuiesceRule{{Resource: "deployments.apps", Namespace: "shop", Action: ScaleToZero}}}, dyn
	}
	q, dyn := newQuiescer(time.Minute)
	for _, run := range []string{"the run that stops the writer", "a resumed run"} {
		if run == "a resumed run" { // the pod is back: a run that died had seen it end
			if _, err := dyn.Resource(kube.PodsGVR).Namespace("shop").Create(ctx, pod("web-1", "web", "Running"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		done := stopAsync(ctx, q)
		mustStillWait(t, done, run+": web-1 still runs")
		if err := dyn.Resource(kube.PodsGVR).Namespace("shop").Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("%s: Stop: %v; want no error once web-1 is gone", run, err)
		}
	}

	q, _ = newQuiescer(time.Second)
	if err := <-stopAsync(ctx, q); err == nil || !strings.Contains(err.Error(), "1 pods of the writers stopped still run after 1s (shop/web-1 of deployments.apps shop/web)") {
		t.Fatalf("Stop past its timeout: %v", err)
	}
}

// stopAsync runs q.Stop in the background; its error comes on the channel.
func stopAsync(ctx context.Context, q Quiescer) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := q.Stop(ctx)
		done <- err
	}()
	return done
}

// mustStillWait fails the test if Stop returns within a second: it must wait, as why says.
func mustStillWait(t *testing.T, done <-chan error, why string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("Stop returned (%v), but %s", err, why)
	case <-time.After(time.Second):
	}
}

// mustReturnSoon fails the test unless Stop returns without an error within 10 s, as why says it
// should.
func mustReturnSoon(t *testing.T, done <-chan error, why string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Stop: %v; want no error %s", err, why)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Stop still waits %s", why)
	}
}

// TestStopWaitsForTheJobsASuspendedCronJobRuns: suspending a CronJob stops only its next Jobs;
// Stop waits for the pods of those it started, and a pod that ended no longer counts.
func TestStopWaitsForTheJobsASuspendedCronJobRuns(t *testing.T) {
	ctx := context.Background()
	cronJobsGVR := schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "cronjobs"}
	cronJob := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "batch/v1", "kind": "CronJob",
		"metadata": map[string]any{"name": "nightly", "namespace": "shop"},
		"spec":     map[string]any{"schedule": "0 1 * * *"},
		"status":   map[string]any{"active": []any{map[string]any{"kind": "Job", "name": "nightly-1", "namespace": "shop"}}}}}
	job := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "batch/v1", "kind": "Job",
		"metadata": map[string]any{"name": "nightly-1", "namespace": "shop"},
		"spec":     map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"batch.kubernetes.io/controller-uid": "u1"}}}}}
	pod := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "nightly-1-x", "namespace": "shop", "labels": map[string]any{"batch.kubernetes.io/controller-uid": "u1"}},
		"status":   map[string]any{"phase": "Running"}}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{kube.PodsGVR: "PodList", cronJobsGVR: "CronJobList", jobsGVR: "JobList"}, cronJob, job, pod)
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "CronJob"}, meta.RESTScopeNamespace)
	q := Quiescer{Dynamic: dyn, Mapper: mapper, Log: slog.New(slog.DiscardHandler), StopTimeout: time.Minute,
		Rules: []config.QuiesceRule{{Resource: "cronjobs.batch", Namespace: "shop", Action: Suspend}}}

	done := stopAsync(ctx, q)
	mustStillWait(t, done, "the Job nightly-1 still runs")
	if err := unstructured.SetNestedField(pod.Object, "Succeeded", "status", "phase"); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(kube.PodsGVR).Namespace("shop").Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Stop: %v; want no error once the Job's pod ended", err)
	}
	got, _, _ := unstructured.NestedBool(mustGet(t, dyn, cronJobsGVR, "nightly").Object, "spec", "suspend")
	if !got {
		t.Fatal("the CronJob is not suspended")
	}
}

func mustGet(t *testing.T, dyn *dynamicfake.FakeDynamicClient, gvr schema.GroupVersionResource, name string) *unstructured.Unstructured {
	t.Helper()
	obj, err := dyn.Resource(gvr).Namespace("shop").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

// TestStopWaitsForThePodsAnAnnotatedObjectOwns: a rule with waitForPods (the Notebook rule's)
// waits until no pod the object owns, through a StatefulSet, runs; pods of other owners do not
// count.
func TestStopWaitsForThePodsAnAnnotatedObjectOwns(t *testing.T) {
	ctx := context.Background()
	notebooksGVR := schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "notebooks"}
	statefulSetsGVR := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}
	owned := func(apiVersion, kind, name, uid string) []any {
		return []any{map[string]any{"apiVersion": apiVersion, "kind": kind, "name": name, "uid": uid}}
	}
	notebook := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeflow.org/v1", "kind": "Notebook",
		"metadata": map[string]any{"name": "lab", "namespace": "shop", "uid": "nb-1"}}}
	statefulSet := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "StatefulSet",
		"metadata": map[string]any{"name": "lab", "namespace": "shop", "uid": "sts-1", "ownerReferences": owned("kubeflow.org/v1", "Notebook", "lab", "nb-1")}}}
	pod := func(name string, owners []any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": name, "namespace": "shop", "ownerReferences": owners},
			"status":   map[string]any{"phase": "Running"}}}
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{kube.PodsGVR: "PodList", notebooksGVR: "NotebookList", statefulSetsGVR: "StatefulSetList"},
		notebook, statefulSet, pod("lab-0", owned("apps/v1", "StatefulSet", "lab", "sts-1")), pod("other-0", owned("apps/v1", "StatefulSet", "other", "sts-2")))
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Group: "kubeflow.org", Version: "v1", Kind: "Notebook"}, meta.RESTScopeNamespace)
	mapper.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}, meta.RESTScopeNamespace)
	q := Quiescer{Dynamic: dyn, Mapper: mapper, Log: slog.New(slog.DiscardHandler), StopTimeout: time.Minute,
		Rules: []config.QuiesceRule{{Resource: "notebooks.kubeflow.org", Action: Annotate, Annotations: map[string]string{"kubeflow-resource-stopped": "ferry"}, WaitForPods: true}}}

	done := stopAsync(ctx, q)
	mustStillWait(t, done, "the Notebook's pod lab-0 still runs")
	if err := dyn.Resource(kube.PodsGVR).Namespace("shop").Delete(ctx, "lab-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	mustReturnSoon(t, done, "with the Notebook's pod lab-0 gone (other-0 is not the Notebook's)")
}

// TestStopWaitsLongerForALongGracePeriod: a pod given more than the default 30 s to end lengthens
// Stop's wait by as much.
func TestStopWaitsLongerForALongGracePeriod(t *testing.T) {
	ctx := context.Background()
	deploymentsGVR := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	deployment := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "db", "namespace": "shop"},
		"spec":     map[string]any{"replicas": int64(1), "selector": map[string]any{"matchLabels": map[string]any{"app": "db"}}}}}
	pod := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "db-0", "namespace": "shop", "labels": map[string]any{"app": "db"}},
		"spec":     map[string]any{"terminationGracePeriodSeconds": int64(32)},
		"status":   map[string]any{"phase": "Running"}}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		withWebhookLists(map[schema.GroupVersionResource]string{kube.PodsGVR: "PodList", deploymentsGVR: "DeploymentList"}), deployment, pod)
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	q := Quiescer{Dynamic: dyn, Mapper: mapper, Log: slog.New(slog.DiscardHandler), StopTimeout: time.Second,
		Rules: []config.QuiesceRule{{Resource: "deployments.apps", Namespace: "shop", Action: ScaleToZero}}}
	start := time.Now()
	_, err := q.Stop(ctx)
	if took := time.Since(start); took < 3*time.Second {
		t.Fatalf("Stop returned (%v) after %s, within its 1 s timeout plus the 2 s db-0's grace period exceeds the default by", err, took)
	}
	if err == nil || !strings.Contains(err.Error(), "1 pods of the writers stopped still run after") {
		t.Fatalf("Stop: %v; want it to give up, naming db-0", err)
	}
}

// TestKubeflowPresetWaitsForRunningWorkflowSteps: the preset's rule for Argo workflows annotates
// only the running ones, and Stop waits for their steps' pods, not for a pod a finished workflow
// left running.
func TestKubeflowPresetWaitsForRunningWorkflowSteps(t *testing.T) {
	ctx := context.Background()
	preset, err := config.LoadPreset("kubeflow")
	if err != nil {
		t.Fatal(err)
	}
	var rules []config.QuiesceRule
	for _, r := range preset.Quiesce {
		if r.Resource == "workflows.argoproj.io" {
			rules = append(rules, r)
		}
	}
	if len(rules) != 1 {
		t.Fatalf("the kubeflow preset has %d rules for workflows.argoproj.io, want 1", len(rules))
	}
	workflowsGVR := schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "workflows"}
	workflow := func(name, uid, completed string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
			"metadata": map[string]any{"name": name, "namespace": "shop", "uid": uid, "labels": map[string]any{"workflows.argoproj.io/completed": completed}}}}
	}
	step := func(name, workflow, uid string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": name, "namespace": "shop",
				"ownerReferences": []any{map[string]any{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": workflow, "uid": uid}}},
			"status": map[string]any{"phase": "Running"}}}
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{kube.PodsGVR: "PodList", workflowsGVR: "WorkflowList"},
		workflow("train", "wf-1", "false"), workflow("old", "wf-2", "true"), step("train-step", "train", "wf-1"), step("old-step", "old", "wf-2"))
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "Workflow"}, meta.RESTScopeNamespace)
	q := Quiescer{Dynamic: dyn, Mapper: mapper, Log: slog.New(slog.DiscardHandler), StopTimeout: time.Minute, Rules: rules}

	done := stopAsync(ctx, q)
	mustStillWait(t, done, "the step train-step of the running workflow still runs")
	if err := dyn.Resource(kube.PodsGVR).Namespace("shop").Delete(ctx, "train-step", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	mustReturnSoon(t, done, "with the running workflow's step gone (old-step is a finished workflow's)")
	if ann := mustGet(t, dyn, workflowsGVR, "old").GetAnnotations(); len(ann) > 0 {
		t.Fatalf("the finished workflow was annotated: %v", ann)
	}
	if _, ok := mustGet(t, dyn, workflowsGVR, "train").GetAnnotations()[QuiescedAnnotation]; !ok {
		t.Fatal("the running workflow carries no quiesce record")
	}
}

// TestHeldFindsWritersStartedAgain: while the backup reads, something may start a stopped writer
// again (a GitOps tool's self-heal puts back its repository's replicas, an autoscaler, an
// operator), or a new writer may appear; what they write then is not all in the backup. Held
// names each, and nothing while the writers stay stopped.
func TestHeldFindsWritersStartedAgain(t *testing.T) {
	ctx := context.Background()
	q, dyn := deploymentQuiescer(nil, shopDeployment("web", 2))
	if _, err := q.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	held := func(want ...string) {
		t.Helper()
		got, err := q.Held(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("Held: %q, want %q", got, want)
		}
	}
	held()
	deployments := dyn.Resource(deploymentsGVR).Namespace("shop")
	if _, err := deployments.Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	held("deployments.apps shop/web: started again (spec.replicas is 3, the quiesce set 0)")
	if _, err := deployments.Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(kube.PodsGVR).Namespace("shop").Create(ctx, shopPod("web-2", "web"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	held("pod shop/web-2 of deployments.apps shop/web runs")
	if err := dyn.Resource(kube.PodsGVR).Namespace("shop").Delete(ctx, "web-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := deployments.Create(ctx, shopDeployment("api", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	held("deployments.apps shop/api: not stopped: made, or its quiesce record removed, since the quiesce")
}

// TestStopSaysAtOnceWhenAWriterIsStartedAgain: a writer started again as soon as Stop stopped it
// (a GitOps tool's self-heal) keeps its pods running; Stop says so at once, naming it, rather
// than after waiting its whole timeout for the pods.
func TestStopSaysAtOnceWhenAWriterIsStartedAgain(t *testing.T) {
	ctx := context.Background()
	q, dyn := deploymentQuiescer(nil, shopDeployment("web", 2), shopPod("web-1", "web"))
	q.StopTimeout = time.Minute
	done := stopAsync(ctx, q)
	mustStillWait(t, done, "web-1 still runs")
	if _, err := dyn.Resource(deploymentsGVR).Namespace("shop").Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":2}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "deployments.apps shop/web: started again (spec.replicas is 2, the quiesce set 0)") {
			t.Fatalf("Stop: %v; want it stopped, naming the writer started again", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stop still waits for the pods of a writer started again")
	}
}

// TestTwoRulesOnOneObject: the object carries the record of the rule that stopped it first; the
// other rule's is not its record, so it is not taken for started again, nor stopped again
// without a record that Start would undo.
func TestTwoRulesOnOneObject(t *testing.T) {
	ctx := context.Background()
	q, dyn := deploymentQuiescer([]config.QuiesceRule{
		{Resource: "deployments.apps", Namespace: "shop", Action: Annotate, Annotations: map[string]string{"example.com/paused": "true"}},
		{Resource: "deployments.apps", Namespace: "shop", Action: ScaleToZero}}, shopDeployment("web", 2))
	for range 2 {
		if _, err := q.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if broken, err := q.Held(ctx); err != nil || len(broken) > 0 {
		t.Fatalf("Held: %q, %v; want nothing", broken, err)
	}
	if _, err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	web := mustGet(t, dyn, deploymentsGVR, "web")
	if replicas, _, _ := unstructured.NestedInt64(web.Object, "spec", "replicas"); replicas != 2 || len(web.GetAnnotations()) > 0 {
		t.Fatalf("after Start: replicas %d, annotations %v; want 2 and none", replicas, web.GetAnnotations())
	}
}

// shopDeployment is Deployment name in namespace shop, of replicas, its pods labelled app=name.
func shopDeployment(name string, replicas int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": name, "namespace": "shop"},
		"spec":     map[string]any{"replicas": replicas, "selector": map[string]any{"matchLabels": map[string]any{"app": name}}}}}
}

// shopPod is a running pod name in namespace shop, labelled app=app.
func shopPod(name, app string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": "shop", "labels": map[string]any{"app": app}},
		"status":   map[string]any{"phase": "Running"}}}
}

var deploymentsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}

// deploymentQuiescer is a Quiescer of rules (by default: scale shop's Deployments to zero) on a
// fake cluster holding objs, which serves Deployments, their ReplicaSets and pods.
func deploymentQuiescer(rules []config.QuiesceRule, objs ...runtime.Object) (Quiescer, *dynamicfake.FakeDynamicClient) {
	if rules == nil {
		rules = []config.QuiesceRule{{Resource: "deployments.apps", Namespace: "shop", Action: ScaleToZero}}
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		withWebhookLists(map[schema.GroupVersionResource]string{kube.PodsGVR: "PodList", deploymentsGVR: "DeploymentList", replicaSetsGVR: "ReplicaSetList"}), objs...)
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	return Quiescer{Dynamic: dyn, Mapper: mapper, Log: slog.New(slog.DiscardHandler), Rules: rules}, dyn
}

func TestScaledWorkload(t *testing.T) {
	workload := func(apiVersion, kind, name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": map[string]any{"name": name}}}
	}
	workloads := []*unstructured.Unstructured{workload("apps/v1", "Deployment", "consumer"), workload("apps/v1", "StatefulSet", "indexer")}
	for _, c := range []struct {
		name string
		ref  map[string]any
		want string
	}{
		{"a Deployment by default", map[string]any{"name": "consumer"}, "consumer"},
		{"a StatefulSet named", map[string]any{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "indexer"}, "indexer"},
		{"another kind of that name", map[string]any{"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "name": "consumer"}, ""},
		{"a workload not stopped", map[string]any{"name": "mailer"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			so := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"scaleTargetRef": c.ref}}}
			var name string
			if got := scaledWorkload(so, workloads); got != nil {
				name = got.GetName()
			}
			if name != c.want {
				t.Errorf("scaledWorkload = %q, want %q", name, c.want)
			}
		})
	}
}

// TestRefusedNamesWhatTheClusterRefuses: the quiesce's changes are tried as dry runs: one a policy
// refuses is named with the refusal, nothing changes, and an object already stopped (a resumed
// run's) is not tried again.
func TestRefusedNamesWhatTheClusterRefuses(t *testing.T) {
	ctx := context.Background()
	deploymentsGVR := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	deployment := func(name string, annotations map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": name, "namespace": "shop", "annotations": annotations}, "spec": map[string]any{"replicas": int64(1)}}}
	}
	cronJob := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "batch/v1", "kind": "CronJob",
		"metadata": map[string]any{"name": "report", "namespace": "shop"}, "spec": map[string]any{"schedule": "0 1 * * *"}}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{deploymentsGVR: "DeploymentList", cronJobsGVR: "CronJobList", kube.PodsGVR: "PodList"},
		deployment("writer", nil), deployment("stopped", map[string]any{QuiescedAnnotation: `{"action":"scale-to-zero","replicas":1}`}), cronJob)
	honorDryRun(dyn)
	var tried []string // the reactor below runs first
	dyn.PrependReactor("patch", "deployments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p := a.(clienttesting.PatchActionImpl)
		tried = append(tried, p.GetName())
		if p.GetName() == "writer" && len(p.PatchOptions.DryRun) > 0 {
			return true, nil, apierrors.NewForbidden(deploymentsGVR.GroupResource(), "writer", errors.New("a Deployment here keeps at least one replica"))
		}
		return false, nil, nil
	})
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "CronJob"}, meta.RESTScopeNamespace)
	mapper.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	q := Quiescer{Dynamic: dyn, Mapper: mapper, Log: slog.New(slog.DiscardHandler), Rules: []config.QuiesceRule{
		{Resource: "cronjobs.batch", Namespace: "shop", Action: Suspend},
		{Resource: "deployments.apps", Namespace: "shop", Action: ScaleToZero}}}
	refused, err := q.Refused(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(refused) != 1 || !strings.HasPrefix(refused[0], "deployments.apps shop/writer (scale-to-zero): ") || !strings.Contains(refused[0], "keeps at least one replica") {
		t.Errorf("refused %q, want the writer's scale to zero with the policy's words", refused)
	}
	if slices.Contains(tried, "stopped") {
		t.Errorf("the Deployment stopped already was tried again: %v", tried)
	}
	if suspend, _, _ := unstructured.NestedBool(mustGet(t, dyn, cronJobsGVR, "report").Object, "spec", "suspend"); suspend {
		t.Error("a dry run suspended the CronJob")
	}
	if replicas, _, _ := unstructured.NestedInt64(mustGet(t, dyn, deploymentsGVR, "writer").Object, "spec", "replicas"); replicas != 1 {
		t.Errorf("the writer has %d replicas after the dry runs", replicas)
	}
}

// TestAutoscalersArePausedWithTheirWorkloads: a KEDA ScaledObject that scales a workload a rule
// scales to zero is paused at zero before the workload is scaled down, and unpaused before it is
// scaled up (KEDA holds a paused workload at the paused count); one whose workload Start leaves
// stopped stays paused, and one of a workload no rule stops is left alone.
func TestAutoscalersArePausedWithTheirWorkloads(t *testing.T) {
	ctx := context.Background()
	deploymentsGVR := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	scaledObjectsGVR := schema.GroupVersionResource{Group: "keda.sh", Version: "v1alpha1", Resource: "scaledobjects"}
	deployment := func(name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": name, "namespace": "shop"}, "spec": map[string]any{"replicas": int64(2)}}}
	}
	scaledObject := func(name, target string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
			"metadata": map[string]any{"name": name, "namespace": "shop"}, "spec": map[string]any{"scaleTargetRef": map[string]any{"name": target}}}}
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{deploymentsGVR: "DeploymentList", scaledObjectsGVR: "ScaledObjectList", kube.PodsGVR: "PodList", replicaSetsGVR: "ReplicaSetList",
			{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"}:   "MutatingWebhookConfigurationList",
			{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}: "ValidatingWebhookConfigurationList"},
		deployment("consumer"), deployment("mailer"), scaledObject("consumer", "consumer"), scaledObject("mailer", "mailer"))
	var patched []string
	dyn.PrependReactor("patch", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		patched = append(patched, a.GetResource().Resource+"/"+a.(clienttesting.PatchActionImpl).GetName())
		return false, nil, nil
	})
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	mapper.Add(schema.GroupVersionKind{Group: "keda.sh", Version: "v1alpha1", Kind: "ScaledObject"}, meta.RESTScopeNamespace)
	q := Quiescer{Dynamic: dyn, Mapper: mapper, Log: slog.New(slog.DiscardHandler), StopTimeout: time.Minute,
		Rules: []config.QuiesceRule{{Resource: "deployments.apps", Namespace: "shop", Names: []string{"consumer"}, Action: ScaleToZero}}}
	if _, err := q.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if want := []string{"scaledobjects/consumer", "deployments/consumer"}; !slices.Equal(patched, want) {
		t.Errorf("Stop patched %v, want %v (the ScaledObject paused first)", patched, want)
	}
	if got := mustGet(t, dyn, scaledObjectsGVR, "consumer").GetAnnotations()[kedaPausedReplicas]; got != "0" {
		t.Errorf("the consumer's ScaledObject is paused at %q, want 0", got)
	}
	if _, paused := mustGet(t, dyn, scaledObjectsGVR, "mailer").GetAnnotations()[kedaPausedReplicas]; paused {
		t.Error("the ScaledObject of a workload no rule stops was paused")
	}

	later := q
	later.Later = []string{"apps/v1 Deployment shop/consumer"}
	patched = nil
	if _, err := later.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if len(patched) != 0 {
		t.Errorf("Start with the consumer left stopped patched %v", patched)
	}
	if _, err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if want := []string{"scaledobjects/consumer", "deployments/consumer"}; !slices.Equal(patched, want) {
		t.Errorf("Start patched %v, want %v (the ScaledObject unpaused first)", patched, want)
	}
	if _, paused := mustGet(t, dyn, scaledObjectsGVR, "consumer").GetAnnotations()[kedaPausedReplicas]; paused {
		t.Error("the consumer's ScaledObject is still paused after Start")
	}
	if replicas, _, _ := unstructured.NestedInt64(mustGet(t, dyn, deploymentsGVR, "consumer").Object, "spec", "replicas"); replicas != 2 {
		t.Errorf("the consumer has %d replicas after Start, want 2", replicas)
	}
}
