package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/migrate"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

var (
	argoApplication    = testCRD{group: "argoproj.io", kind: "Application", version: "v1alpha1"}
	argoApplicationSet = testCRD{group: "argoproj.io", kind: "ApplicationSet", version: "v1alpha1"}
	fluxKustomization  = testCRD{group: "kustomize.toolkit.fluxcd.io", kind: "Kustomization", version: "v1"}
)

// TestWritersAGitOpsToolAppliesStayStopped: platforms deployed by a GitOps tool (deployKF's
// Kubeflow through Argo CD, many others through Flux) have it apply their workloads again from
// the repository: Argo CD's self-heal put a writer's replicas back as soon as the quiesce scaled
// it to zero, and the run stopped ("writers were started again as ferry stopped them"); Flux
// would do so at its next reconcile, on blue, after the cutover. Now the quiesce pauses what
// applies each writer with it, up through an app of apps that applies the ApplicationSet that
// makes the writer's Application: an Application's automated sync is turned off, as is an
// ApplicationSet template's, a Kustomization suspended, on blue for good and on green until its
// writers start.
func TestWritersAGitOpsToolAppliesStayStopped(t *testing.T) {
	const ns = "shapes-gitops"
	blueKC, greenKC := cutoverShapesNamespace(t, ns)
	ctx := context.Background()
	cutoverCRDs(t, argoApplication, argoApplicationSet, fluxKustomization)
	gp3 := func(s *corev1.PersistentVolumeClaimSpec) { s.StorageClassName = ptr.To("gp3") }
	blueClaim(t, ns, "orders", map[string][]byte{"orders.db": []byte("order 1\n")}, gp3)
	blueClaim(t, ns, "reports", map[string][]byte{"march.csv": []byte("month,total\n")}, gp3)
	claimWriter(t, blueKC, ns, "api", "orders")
	claimWriter(t, blueKC, ns, "worker", "reports")
	// The marks each tool puts on what it applies: Argo CD's tracking annotation (of an
	// Application outside Argo CD's namespace), Flux's labels.
	kubectl(t, "blue", "", "-n", ns, "annotate", "deployment/api", "argocd.argoproj.io/tracking-id="+ns+"_shop:apps/Deployment:"+ns+"/api")
	kubectl(t, "blue", "", "-n", ns, "label", "deployment/worker", "kustomize.toolkit.fluxcd.io/name=reports", "kustomize.toolkit.fluxcd.io/namespace="+ns)
	kubectl(t, "blue", `apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: root, namespace: `+ns+`}
spec:
  destination: {server: "https://kubernetes.default.svc", namespace: `+ns+`}
  source: {repoURL: "https://git.example/platform.git", path: apps}
  syncPolicy: {automated: {prune: true, selfHeal: true}}
status:
  resources: [{group: argoproj.io, kind: ApplicationSet, namespace: `+ns+`, name: teams}]
---
apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata:
  name: teams
  namespace: `+ns+`
  labels: {app.kubernetes.io/instance: `+ns+`_root}
spec:
  generators: [{list: {elements: [{team: shop}]}}]
  template:
    metadata: {name: "{{team}}"}
    spec:
      destination: {server: "https://kubernetes.default.svc", namespace: `+ns+`}
      source: {repoURL: "https://git.example/platform.git", path: "{{team}}"}
      syncPolicy: {automated: {selfHeal: true}, syncOptions: [CreateNamespace=true]}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: reports, namespace: `+ns+`}
spec: {interval: 10m, path: ./reports, prune: true, sourceRef: {kind: GitRepository, name: platform}}
`, "apply", "-f", "-")
	blueDyn, cutoverDyn := cutoverDynamic(t)
	teams, err := blueDyn.Resource(argoApplicationSet.gvr()).Namespace(ns).Get(ctx, "teams", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	shop := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
		"metadata": map[string]any{"name": "shop", "namespace": ns},
		"spec": map[string]any{"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": ns},
			"source":     map[string]any{"repoURL": "https://git.example/platform.git", "path": "shop"},
			"syncPolicy": map[string]any{"automated": map[string]any{"selfHeal": true}, "syncOptions": []any{"CreateNamespace=true"}}}}}
	shop.SetOwnerReferences([]metav1.OwnerReference{*metav1.NewControllerRef(teams, argoApplicationSet.gvr().GroupVersion().WithKind("ApplicationSet"))})
	if _, err := blueDyn.Resource(argoApplication.gvr()).Namespace(ns).Create(ctx, shop, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runningPod(t, blueKC, ns, "app=api")
	runningPod(t, blueKC, ns, "app=worker")

	playGitOps(t, blueKC, blueDyn, ns)
	playGitOps(t, greenKC, cutoverDyn, ns)

	// The plan says, before a run, what the quiesce would stop and pause, in its order.
	code, plan, errOut := runFerry(t, "plan", "--from", "blue", "-f", gp3Config(t, ns))
	if code != 0 {
		t.Fatalf("ferry plan exited %d\nstdout: %s\nstderr: %s", code, plan, errOut)
	}
	var order []string
	for _, line := range strings.Split(plan, "\n") {
		if fields := strings.Fields(line); len(fields) >= 3 && strings.HasPrefix(fields[1], ns+"/") {
			order = append(order, fields[0]+" "+fields[1]+" "+fields[2])
		}
	}
	wantOrder := []string{"applications.argoproj.io " + ns + "/root patch", "applicationsets.argoproj.io " + ns + "/teams patch",
		"applications.argoproj.io " + ns + "/shop patch", "kustomizations.kustomize.toolkit.fluxcd.io " + ns + "/reports suspend",
		"deployments.apps " + ns + "/api scale-to-zero", "deployments.apps " + ns + "/worker scale-to-zero"}
	if !slices.Equal(order, wantOrder) {
		t.Errorf("the plan's quiesce:\n%s\nwant, in this order:\n%s\nplan:\n%s", strings.Join(order, "\n"), strings.Join(wantOrder, "\n"), plan)
	}

	out := migrateShapes(t, ns, "writers Argo CD and Flux apply")
	for cluster, want := range map[string]struct {
		kc       kubernetes.Interface
		dyn      dynamic.Interface
		replicas int32
		paused   bool
	}{"blue": {blueKC, blueDyn, 0, true}, "green": {greenKC, cutoverDyn, 1, false}} {
		for _, name := range []string{"api", "worker"} {
			d, err := want.kc.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil || *d.Spec.Replicas != want.replicas {
				t.Errorf("%s's %s after the migration: %v; want %d replicas", cluster, name, err, want.replicas)
			}
		}
		for _, app := range []string{"root", "shop"} {
			if automated := argoAutomated(t, want.dyn, argoApplication, ns, app); automated == want.paused {
				t.Errorf("%s's Application %s after the migration: automated sync %v, want %v", cluster, app, automated, !want.paused)
			}
		}
		if leaves := leavesSync(t, want.dyn, ns, "teams", "shop"); leaves != want.paused {
			t.Errorf("%s's ApplicationSet teams after the migration: leaves shop's sync policy and ferry's record %v, want %v", cluster, leaves, want.paused)
		}
		ks, err := want.dyn.Resource(fluxKustomization.gvr()).Namespace(ns).Get(ctx, "reports", metav1.GetOptions{})
		if suspended, _, _ := unstructured.NestedBool(ks.Object, "spec", "suspend"); err != nil || suspended != want.paused {
			t.Errorf("%s's Kustomization reports after the migration: suspend %v (%v), want %v", cluster, suspended, err, want.paused)
		}
	}
	if !strings.Contains(out, "GitOps objects paused with them: 4 (applications.argoproj.io "+ns+"/root, applicationsets.argoproj.io "+ns+"/teams") {
		t.Errorf("the report does not say which GitOps objects were paused:\n%s", out)
	}
}

// argoAutomated says whether the Argo CD Application name in namespace ns syncs by itself.
func argoAutomated(t *testing.T, dyn dynamic.Interface, crd testCRD, ns, name string) bool {
	t.Helper()
	obj, err := dyn.Resource(crd.gvr()).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%s %s/%s: %v", crd.kind, ns, name, err)
	}
	_, automated, _ := unstructured.NestedMap(obj.Object, "spec", "syncPolicy", "automated")
	return automated
}

// leavesSync says whether the ApplicationSet name in namespace ns leaves the sync policy of its
// Application app as it is, and keeps ferry's record on it.
func leavesSync(t *testing.T, dyn dynamic.Interface, ns, name, app string) bool {
	t.Helper()
	obj, err := dyn.Resource(argoApplicationSet.gvr()).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("ApplicationSet %s/%s: %v", ns, name, err)
	}
	return appSetLeaves(obj, app)
}

// appSetLeaves says whether appSet leaves app's sync policy alone and preserves ferry's record.
func appSetLeaves(appSet *unstructured.Unstructured, app string) bool {
	ignored, _, _ := unstructured.NestedSlice(appSet.Object, "spec", "ignoreApplicationDifferences")
	preserved, _, _ := unstructured.NestedStringSlice(appSet.Object, "spec", "preservedFields", "annotations")
	return slices.ContainsFunc(ignored, func(e any) bool { m, _ := e.(map[string]any); return m["name"] == app }) && slices.Contains(preserved, migrate.QuiescedAnnotation)
}

// playGitOps does, until the test ends, what Argo CD and Flux do on a cluster for namespace ns as
// TestWritersAGitOpsToolAppliesStayStopped sets them up: the repository holds the Deployments api
// (of the Application shop) and worker (of the Kustomization reports) at one replica; the
// ApplicationSet teams makes the Application shop from its template, which syncs by itself with
// self-heal, and drops every annotation of shop it does not preserve. While the tool's object that
// applies each is not paused, it is put back as the repository, or the template, holds it. Each
// check reads what is applied before what applies it: ferry pauses from the top down.
func playGitOps(t *testing.T, kc kubernetes.Interface, dyn dynamic.Interface, ns string) {
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { stop(); <-done })
	get := func(crd testCRD, name string) *unstructured.Unstructured {
		obj, err := dyn.Resource(crd.gvr()).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return obj
	}
	active := func(crd testCRD, name string) bool {
		obj := get(crd, name)
		if obj == nil {
			return false
		}
		if crd == fluxKustomization {
			suspended, _, _ := unstructured.NestedBool(obj.Object, "spec", "suspend")
			return !suspended
		}
		selfHeal, _, _ := unstructured.NestedBool(obj.Object, "spec", "syncPolicy", "automated", "selfHeal")
		return selfHeal
	}
	heal := func(name string, manager testCRD, by string) {
		if d, err := kc.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{}); err == nil && *d.Spec.Replicas != 1 && active(manager, by) {
			kc.AppsV1().Deployments(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{FieldManager: "gitops"})
		}
	}
	generate := func() {
		shop := get(argoApplication, "shop")
		teams := get(argoApplicationSet, "teams")
		if shop == nil || teams == nil || appSetLeaves(teams, "shop") {
			return
		}
		_, automated, _ := unstructured.NestedMap(shop.Object, "spec", "syncPolicy", "automated")
		_, recorded := shop.GetAnnotations()[migrate.QuiescedAnnotation]
		if !automated || recorded {
			dyn.Resource(argoApplication.gvr()).Namespace(ns).Patch(ctx, "shop", types.MergePatchType,
				[]byte(`{"metadata":{"annotations":{"`+migrate.QuiescedAnnotation+`":null}},"spec":{"syncPolicy":{"automated":{"selfHeal":true}}}}`),
				metav1.PatchOptions{FieldManager: "applicationset-controller"})
		}
	}
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			generate()
			heal("api", argoApplication, "shop")
			heal("worker", fluxKustomization, "reports")
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
}

var argoRollout = testCRD{group: "argoproj.io", kind: "Rollout", version: "v1alpha1"}

// TestRolloutWritersAreStopped: a writer run by an Argo Rollout (progressive delivery's
// Deployment) stopped the run before anything was stopped: the Rollout's ReplicaSet may not be
// scaled down (the Rollout would scale it up again), and no implied rule stopped the Rollout, so
// its pod was named as a writer no rule stops. Now the Rollout is scaled to zero as a Deployment
// is, its pods waited for, and green's started from the same record.
func TestRolloutWritersAreStopped(t *testing.T) {
	const ns = "shapes-rollout"
	blueKC, greenKC := cutoverShapesNamespace(t, ns)
	ctx := context.Background()
	cutoverCRDs(t, argoRollout)
	blueClaim(t, ns, "sessions", map[string][]byte{"sessions.db": []byte("session 1\n")}, func(s *corev1.PersistentVolumeClaimSpec) { s.StorageClassName = ptr.To("gp3") })
	kubectl(t, "blue", `apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: web, namespace: `+ns+`}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  strategy: {canary: {steps: [{setWeight: 20}, {pause: {duration: 1m}}]}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: web, volumeMounts: [{name: data, mountPath: /data}]}]
      volumes: [{name: data, persistentVolumeClaim: {claimName: sessions}}]
`, "apply", "-f", "-")
	blueDyn, cutoverDyn := cutoverDynamic(t)
	playRollouts(t, blueKC, blueDyn, ns, "web")
	playRollouts(t, greenKC, cutoverDyn, ns, "web")
	runningPod(t, blueKC, ns, "app=web")
	migrateShapes(t, ns, "a writer an Argo Rollout runs")
	for cluster, want := range map[string]struct {
		dyn      dynamic.Interface
		replicas int64
	}{"blue": {blueDyn, 0}, "green": {cutoverDyn, 1}} {
		rollout, err := want.dyn.Resource(argoRollout.gvr()).Namespace(ns).Get(ctx, "web", metav1.GetOptions{})
		if replicas, _, _ := unstructured.NestedInt64(rollout.Object, "spec", "replicas"); err != nil || replicas != want.replicas {
			t.Errorf("%s's Rollout web after the migration: %d replicas (%v), want %d", cluster, replicas, err, want.replicas)
		}
	}
	runningPod(t, greenKC, ns, "app=web")
}

// playRollouts does, until the test ends, what the Argo Rollouts controller does for the Rollout
// name in namespace ns on a cluster: it keeps one ReplicaSet, controlled by the Rollout, at the
// Rollout's replicas (the one a restore brought, or one it makes).
func playRollouts(t *testing.T, kc kubernetes.Interface, dyn dynamic.Interface, ns, name string) {
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { stop(); <-done })
	reconcile := func() {
		rollout, err := dyn.Resource(argoRollout.gvr()).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return
		}
		replicas, found, _ := unstructured.NestedInt64(rollout.Object, "spec", "replicas")
		if !found {
			replicas = 1
		}
		sets, err := kc.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return
		}
		for _, rs := range sets.Items {
			if owner := metav1.GetControllerOf(&rs); owner != nil && owner.UID == rollout.GetUID() {
				if *rs.Spec.Replicas != int32(replicas) {
					kc.AppsV1().ReplicaSets(ns).Patch(ctx, rs.Name, types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas), metav1.PatchOptions{FieldManager: "rollouts-controller"})
				}
				return
			}
		}
		var template corev1.PodTemplateSpec
		raw, _, _ := unstructured.NestedMap(rollout.Object, "spec", "template")
		if runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &template) != nil {
			return
		}
		template.Labels["rollouts-pod-template-hash"] = "stable"
		rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name + "-stable", Labels: template.Labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rollout, argoRollout.gvr().GroupVersion().WithKind("Rollout"))}},
			Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(int32(replicas)), Selector: &metav1.LabelSelector{MatchLabels: template.Labels}, Template: template}}
		kc.AppsV1().ReplicaSets(ns).Create(ctx, rs, metav1.CreateOptions{})
	}
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			reconcile()
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
}
