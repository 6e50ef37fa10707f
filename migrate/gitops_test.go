package migrate

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans/config"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

func TestManagersOf(t *testing.T) {
	for _, tc := range []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		owners      []metav1.OwnerReference
		want        []manager
	}{
		{name: "none", labels: map[string]string{"app": "api"}},
		{name: "flux kustomization", labels: map[string]string{"kustomize.toolkit.fluxcd.io/name": "apps", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"},
			want: []manager{{resource: fluxKustomizations, namespace: "flux-system", name: "apps"}}},
		{name: "flux helm release inside a kustomization's", labels: map[string]string{"helm.toolkit.fluxcd.io/name": "minio", "helm.toolkit.fluxcd.io/namespace": "ml"},
			want: []manager{{resource: fluxHelmReleases, namespace: "ml", name: "minio"}}},
		{name: "flux label without its namespace", labels: map[string]string{"kustomize.toolkit.fluxcd.io/name": "apps"}},
		{name: "argo tracking annotation", annotations: map[string]string{argoTrackingID: "shop:apps/Deployment:shop/api"},
			want: []manager{{resource: argoApplications, name: "shop", tracked: true}}},
		{name: "argo tracking annotation of an application in any namespace", annotations: map[string]string{argoTrackingID: "team-a_shop:apps/Deployment:shop/api"},
			want: []manager{{resource: argoApplications, namespace: "team-a", name: "shop", tracked: true}}},
		{name: "argo annotation wins over the instance label", labels: map[string]string{argoInstanceLabel: "minio"}, annotations: map[string]string{argoTrackingID: "ml:apps/Deployment:ml/minio"},
			want: []manager{{resource: argoApplications, name: "ml", tracked: true}}},
		{name: "instance label", labels: map[string]string{argoInstanceLabel: "minio"},
			want: []manager{{resource: argoApplications, name: "minio"}}},
		{name: "application of an applicationset", owners: []metav1.OwnerReference{{APIVersion: "argoproj.io/v1alpha1", Kind: "ApplicationSet", Name: "teams", Controller: ptr.To(true)}},
			want: []manager{{resource: argoApplicationSets, namespace: "argocd", name: "teams", tracked: true}}},
		{name: "owned by another kind of that name", owners: []metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "ApplicationSet", Name: "teams", Controller: ptr.To(true)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &unstructured.Unstructured{Object: map[string]any{}}
			obj.SetNamespace("argocd")
			obj.SetOwnerReferences(tc.owners)
			obj.SetLabels(tc.labels)
			obj.SetAnnotations(tc.annotations)
			if got := managersOf(obj); !slices.Equal(got, tc.want) {
				t.Errorf("managersOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestManagerRule(t *testing.T) {
	writer := &unstructured.Unstructured{Object: map[string]any{"kind": "Deployment", "metadata": map[string]any{"name": "api"}}}
	app := func(automated any, recorded bool) *unstructured.Unstructured {
		obj := &unstructured.Unstructured{Object: map[string]any{"kind": "Application", "metadata": map[string]any{"name": "shop", "namespace": "argocd"}, "spec": map[string]any{}}}
		if automated != nil {
			obj.Object["spec"] = map[string]any{"syncPolicy": map[string]any{"automated": automated}}
		}
		if recorded {
			obj.SetAnnotations(map[string]string{QuiescedAnnotation: `{"action":"patch"}`})
		}
		return obj
	}
	appSet := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "teams", "namespace": "argocd"},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"syncPolicy": map[string]any{"automated": map[string]any{}}}}}}}
	kustomization := func(suspend bool) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "apps", "namespace": "flux-system"}, "spec": map[string]any{"suspend": suspend}}}
	}
	leaveShop := fmt.Sprintf(`{"spec":{"ignoreApplicationDifferences":[{"jsonPointers":["/spec/syncPolicy"],"name":"shop"}],"preservedFields":{"annotations":[%q]}}}`, QuiescedAnnotation)
	for _, tc := range []struct {
		name       string
		resource   string
		obj, of    *unstructured.Unstructured
		wantAction string
		wantPause  bool
		wantPatch  string
	}{
		{"automated application", argoApplications, app(map[string]any{"selfHeal": true}, false), writer, Patch, true, argoAutomatedOff},
		{"automated application, empty", argoApplications, app(map[string]any{}, false), writer, Patch, true, argoAutomatedOff},
		{"automated application with argo cd 3's switch on", argoApplications, app(map[string]any{"enabled": true}, false), writer, Patch, true, ""},
		{"argo cd 3's switch off", argoApplications, app(map[string]any{"enabled": false}, false), writer, Patch, false, ""},
		{"manual application", argoApplications, app(nil, false), writer, Patch, false, ""},
		{"application ferry paused", argoApplications, app(nil, true), writer, Patch, true, ""},
		{"applicationset of an automated application", argoApplicationSets, appSet, app(map[string]any{"selfHeal": true}, false), Patch, true, leaveShop},
		{"applicationset of a manual application", argoApplicationSets, appSet, app(nil, false), Patch, false, ""},
		{"kustomization", fluxKustomizations, kustomization(false), writer, Suspend, true, ""},
		{"suspended kustomization", fluxKustomizations, kustomization(true), writer, Suspend, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rule, pause := managerRule(tc.resource, tc.obj, tc.of)
			if tc.wantPatch != "" && rule.Patch != tc.wantPatch {
				t.Errorf("managerRule's patch = %s, want %s", rule.Patch, tc.wantPatch)
			}
			if rule.Action != tc.wantAction || pause != tc.wantPause || !slices.Equal(rule.Names, []string{tc.obj.GetName()}) || rule.Namespace != tc.obj.GetNamespace() {
				t.Errorf("managerRule = %+v, %v; want action %s, %v", rule, pause, tc.wantAction, tc.wantPause)
			}
		})
	}
}

// TestAppSetLeavesSyncKeepsWhatItHad: the ApplicationSet's lists keep their entries, ferry's are
// added once.
func TestAppSetLeavesSyncKeepsWhatItHad(t *testing.T) {
	appSet := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"ignoreApplicationDifferences": []any{map[string]any{"name": "shop", "jsonPointers": []any{"/spec/source/targetRevision"}}, map[string]any{"jsonPointers": []any{"/spec/info"}}},
		"preservedFields":              map[string]any{"annotations": []any{"team", QuiescedAnnotation}}}}}
	got := appSetLeavesSync(appSet, []string{"shop", "mail", "mail"})
	want := fmt.Sprintf(`{"spec":{"ignoreApplicationDifferences":[{"jsonPointers":["/spec/source/targetRevision"],"name":"shop"},{"jsonPointers":["/spec/info"]},`+
		`{"jsonPointers":["/spec/syncPolicy"],"name":"mail"}],"preservedFields":{"annotations":["team",%q]}}}`, QuiescedAnnotation)
	if got != want {
		t.Errorf("appSetLeavesSync:\n%s\nwant\n%s", got, want)
	}
}

// TestGitOpsObjectsArePausedWithTheirWriters: Stop pauses the Argo CD Applications and Flux
// Kustomizations that apply the writers it stops, through an app of apps, before the writers and
// the farthest first; Start resumes them after the writers, the nearest first, and not while it
// leaves some stopped. An Application of the instance label's name that does not manage the
// labelled object (a Helm release's label) is left.
func TestGitOpsObjectsArePausedWithTheirWriters(t *testing.T) {
	ctx := context.Background()
	deploymentsGVR := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	applicationsGVR := schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "applications"}
	kustomizationsGVR := schema.GroupVersionResource{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Resource: "kustomizations"}
	deployment := func(name string, labels, annotations map[string]string) *unstructured.Unstructured {
		d := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": name, "namespace": "shop"}, "spec": map[string]any{"replicas": int64(2)}}}
		d.SetLabels(labels)
		d.SetAnnotations(annotations)
		return d
	}
	application := func(ns, name string, manages []any, labels map[string]string) *unstructured.Unstructured {
		a := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec":     map[string]any{"syncPolicy": map[string]any{"automated": map[string]any{"selfHeal": true, "prune": true}, "syncOptions": []any{"CreateNamespace=true"}}},
			"status":   map[string]any{"resources": manages}}}
		a.SetLabels(labels)
		return a
	}
	kustomization := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
		"metadata": map[string]any{"name": "reports", "namespace": "flux-system"}, "spec": map[string]any{"interval": "10m"}}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{deploymentsGVR: "DeploymentList", applicationsGVR: "ApplicationList", kustomizationsGVR: "KustomizationList",
			kube.PodsGVR: "PodList", replicaSetsGVR: "ReplicaSetList",
			{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"}:   "MutatingWebhookConfigurationList",
			{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}: "ValidatingWebhookConfigurationList"},
		deployment("api", nil, map[string]string{argoTrackingID: "argocd_shop:apps/Deployment:shop/api"}),
		deployment("worker", map[string]string{"kustomize.toolkit.fluxcd.io/name": "reports", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}, nil),
		deployment("cache", map[string]string{argoInstanceLabel: "cache"}, nil),
		application("argocd", "root", []any{map[string]any{"group": "argoproj.io", "kind": "Application", "namespace": "argocd", "name": "shop"}}, nil),
		application("argocd", "shop", nil, map[string]string{argoInstanceLabel: "root"}),
		application("argocd", "cache", []any{map[string]any{"kind": "Service", "namespace": "shop", "name": "cache"}}, nil),
		kustomization)
	var patched []string
	dyn.PrependReactor("patch", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		patched = append(patched, a.GetResource().Resource+"/"+a.(clienttesting.PatchActionImpl).GetName())
		return false, nil, nil
	})
	mapper := meta.NewDefaultRESTMapper(nil)
	for _, gvk := range []schema.GroupVersionKind{{Group: "apps", Version: "v1", Kind: "Deployment"}, {Group: "argoproj.io", Version: "v1alpha1", Kind: "Application"},
		{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Kind: "Kustomization"}} {
		mapper.Add(gvk, meta.RESTScopeNamespace)
	}
	q := Quiescer{Dynamic: dyn, Mapper: mapper, Log: slog.New(slog.DiscardHandler), StopTimeout: time.Minute,
		Rules: []config.QuiesceRule{{Resource: "deployments.apps", Namespace: "shop", Names: []string{"api", "worker", "cache"}, Action: ScaleToZero}}}
	get := func(gvr schema.GroupVersionResource, ns, name string) *unstructured.Unstructured {
		t.Helper()
		obj, err := dyn.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return obj
	}
	automated := func(name string) bool {
		_, on, _ := unstructured.NestedMap(get(applicationsGVR, "argocd", name).Object, "spec", "syncPolicy", "automated")
		return on
	}
	suspended := func() bool {
		s, _, _ := unstructured.NestedBool(get(kustomizationsGVR, "flux-system", "reports").Object, "spec", "suspend")
		return s
	}

	items, err := q.Stop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"applications/root", "applications/shop", "kustomizations/reports", "deployments/api", "deployments/cache", "deployments/worker"}
	if !slices.Equal(patched, want) {
		t.Errorf("Stop patched %v, want %v (the GitOps objects first, the app of apps before its app)", patched, want)
	}
	if automated("root") || automated("shop") || !automated("cache") || !suspended() {
		t.Errorf("after Stop: automated root %v, shop %v, cache %v; kustomization suspended %v; want false, false, true, true",
			automated("root"), automated("shop"), automated("cache"), suspended())
	}
	wantLine := "3 writers stopped on blue; GitOps objects paused with them: 3 (applications.argoproj.io argocd/root, applications.argoproj.io argocd/shop, " +
		"kustomizations.kustomize.toolkit.fluxcd.io flux-system/reports)"
	if got := stoppedLine(items, "writers stopped on blue"); got != wantLine {
		t.Errorf("Stop's report line:\n%s\nwant\n%s", got, wantLine)
	}

	later := q
	later.Later = []string{"apps/v1 Deployment shop/api"}
	patched = nil
	if _, err := later.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if want := []string{"deployments/cache", "deployments/worker"}; !slices.Equal(patched, want) {
		t.Errorf("Start with api left stopped patched %v, want %v (the GitOps objects left paused)", patched, want)
	}
	if _, err := q.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// Something (a sync of its parent) gives the Application its automated sync back: it counts as
	// started again, and a repeated Stop stops it again, its record kept.
	if _, err := dyn.Resource(applicationsGVR).Namespace("argocd").Patch(ctx, "shop", types.MergePatchType, []byte(`{"spec":{"syncPolicy":{"automated":{}}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	broken, err := q.Held(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := "applications.argoproj.io argocd/shop: started again (spec.syncPolicy.automated is set, the quiesce set unset)"; !slices.Contains(broken, want) {
		t.Errorf("Held = %q, want it to hold %q", broken, want)
	}
	if _, err := q.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if automated("shop") {
		t.Error("a repeated Stop left the Application shop syncing by itself")
	}
	// The writer no longer names the Kustomization (relabelled since): its record still has it
	// resume, after the rest.
	if _, err := dyn.Resource(deploymentsGVR).Namespace("shop").Patch(ctx, "worker", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"kustomize.toolkit.fluxcd.io/name":null,"kustomize.toolkit.fluxcd.io/namespace":null}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	patched = nil
	if _, err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	want = []string{"deployments/api", "deployments/cache", "deployments/worker", "applications/shop", "applications/root", "kustomizations/reports"}
	if !slices.Equal(patched, want) {
		t.Errorf("Start patched %v, want %v (the GitOps objects last, the app of apps after its app, one found by its record last)", patched, want)
	}
	if !automated("root") || !automated("shop") || suspended() {
		t.Errorf("after Start: automated root %v, shop %v; kustomization suspended %v; want true, true, false", automated("root"), automated("shop"), suspended())
	}
	if heal, _, _ := unstructured.NestedBool(get(applicationsGVR, "argocd", "shop").Object, "spec", "syncPolicy", "automated", "selfHeal"); !heal {
		t.Error("Start did not give the Application shop back its selfHeal")
	}
	if _, recorded := get(applicationsGVR, "argocd", "root").GetAnnotations()[QuiescedAnnotation]; recorded {
		t.Error("the Application root keeps the quiesce record after Start")
	}
}
