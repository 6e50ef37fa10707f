package plans

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/plans/rules"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
)

// servedTypes are the resource types of the fake clusters of these tests.
var servedTypes = []struct {
	gv, resource, kind string
	namespaced         bool
}{
	{"v1", "namespaces", "Namespace", false},
	{"v1", "configmaps", "ConfigMap", true},
	{"v1", "secrets", "Secret", true},
	{"v1", "pods", "Pod", true},
	{"v1", "persistentvolumeclaims", "PersistentVolumeClaim", true},
	{"v1", "persistentvolumes", "PersistentVolume", false},
	{"v1", "services", "Service", true},
	{"v1", "endpoints", "Endpoints", true},
	{"v1", "events", "Event", true},
	{"v1", "resourcequotas", "ResourceQuota", true},
	{"v1", "limitranges", "LimitRange", true},
	{"apps/v1", "deployments", "Deployment", true},
	{"apps/v1", "replicasets", "ReplicaSet", true},
	{"apps/v1", "statefulsets", "StatefulSet", true},
	{"storage.k8s.io/v1", "storageclasses", "StorageClass", false},
	{"apiextensions.k8s.io/v1", "customresourcedefinitions", "CustomResourceDefinition", false},
	{"example.com/v1", "widgets", "Widget", true},
	{"admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", "ValidatingWebhookConfiguration", false},
	{"admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration", false},
}

// discoveryErr is a fake discovery whose preferred resources are its resources, with err.
type discoveryErr struct {
	*fakediscovery.FakeDiscovery
	err error
}

func (d discoveryErr) ServerPreferredResources() ([]*metav1.APIResourceList, error) {
	return d.Resources, d.err
}

// fakeClients are client-go's fakes serving servedTypes (but for those left out) and holding
// objs and a kube-system namespace of UID "uid-"+name, at Kubernetes version v.
func fakeClients(name, v string, leaveOut []string, objs ...runtime.Object) (Clients, *dynfake.FakeDynamicClient) {
	byGV := map[string]*metav1.APIResourceList{}
	var lists []*metav1.APIResourceList
	listKinds := map[schema.GroupVersionResource]string{}
	for _, s := range servedTypes {
		gv, _ := schema.ParseGroupVersion(s.gv)
		listKinds[gv.WithResource(s.resource)] = s.kind + "List"
		if slices.Contains(leaveOut, s.resource) {
			continue
		}
		l := byGV[s.gv]
		if l == nil {
			l = &metav1.APIResourceList{GroupVersion: s.gv}
			byGV[s.gv] = l
			lists = append(lists, l)
		}
		l.APIResources = append(l.APIResources, metav1.APIResource{Name: s.resource, Kind: s.kind, Namespaced: s.namespaced,
			Verbs: metav1.Verbs{"get", "list", "create", "delete"}})
	}
	kubeSystem := object("v1", "Namespace", "", "kube-system")
	kubeSystem.SetUID(types.UID("uid-" + name))
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, append([]runtime.Object{kubeSystem}, objs...)...)
	disc := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{Resources: lists}, FakedServerVersion: &version.Info{GitVersion: v}}
	return Clients{Discovery: discoveryErr{FakeDiscovery: disc}, Dynamic: dyn}, dyn
}

func object(apiVersion, kind, ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": map[string]any{"name": name}}}
	if ns != "" {
		u.SetNamespace(ns)
	}
	return u
}

// boundTo binds a PersistentVolume to a claim in namespace ns.
func boundTo(u *unstructured.Unstructured, ns string) *unstructured.Unstructured {
	return withRef(u, "claimRef", ns)
}

// withRef sets spec.<field> to a reference to an object named "x" in namespace ns.
func withRef(u *unstructured.Unstructured, field, ns string) *unstructured.Unstructured {
	_ = unstructured.SetNestedMap(u.Object, map[string]any{"namespace": ns, "name": "x"}, "spec", field)
	return u
}

func withLabels(u *unstructured.Unstructured, l map[string]string) *unstructured.Unstructured {
	u.SetLabels(l)
	return u
}

// source is a cluster of two namespaces, shop (a Deployment and its ReplicaSet, a ConfigMap, a
// claim its pod uses, custom resources) and other, with what never moves besides.
func source() []runtime.Object {
	claim := object("v1", "PersistentVolumeClaim", "shop", "data")
	claim.Object["spec"] = map[string]any{"storageClassName": "fast", "accessModes": []any{"ReadWriteOnce"}, "volumeName": "pv-1",
		"resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}}}
	claim.Object["status"] = map[string]any{"phase": "Bound", "capacity": map[string]any{"storage": "2Gi"}}
	pod := object("v1", "Pod", "shop", "web-1")
	pod.Object["spec"] = map[string]any{"nodeName": "node-a", "volumes": []any{map[string]any{"name": "d", "persistentVolumeClaim": map[string]any{"claimName": "data", "readOnly": true}}}}
	deploy := object("apps/v1", "Deployment", "shop", "web")
	rs := object("apps/v1", "ReplicaSet", "shop", "web-1")
	ctrl := true
	rs.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "u", Controller: &ctrl}})
	crd := object("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", "widgets.example.com")
	crd.Object["spec"] = map[string]any{"group": "example.com", "scope": "Namespaced", "names": map[string]any{"kind": "Widget"},
		"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true}, map[string]any{"name": "v1beta1", "served": false}}}
	crd.Object["status"] = map[string]any{"storedVersions": []any{"v1beta1", "v1"}}
	token := object("v1", "Secret", "shop", "default-token-x7k2q") // made by a cluster before 1.24
	token.Object["type"] = "kubernetes.io/service-account-token"
	token.SetAnnotations(map[string]string{"kubernetes.io/service-account.name": "default"})
	return []runtime.Object{
		object("v1", "Namespace", "", "shop"), object("v1", "Namespace", "", "other"), object("v1", "Namespace", "", "default"),
		withLabels(object("v1", "ConfigMap", "shop", "settings"), map[string]string{"app": "shop"}),
		object("v1", "ConfigMap", "shop", "kube-root-ca.crt"), object("v1", "ConfigMap", "other", "x"),
		token, object("v1", "Event", "shop", "e1"), claim, pod, deploy, rs, crd,
		object("example.com/v1", "Widget", "shop", "w1"), object("example.com/v1", "Widget", "shop", "w2"),
	}
}

func resourceOf(p *Plan, gr string) *Resource {
	for i := range p.Resources {
		if p.Resources[i].GroupResource() == gr {
			return &p.Resources[i]
		}
	}
	return nil
}

func excludedFor(p *Plan, gr, name string) string {
	for _, e := range p.Excluded {
		if e.Resource == gr && (name == "" || e.Name == name || e.Namespace == name) {
			return e.Reason
		}
	}
	return ""
}

// TestInventory: the plan of a cluster: which cluster it is, each type's objects by namespace,
// what does not move and why (by type, by object, by selection), claims with the pods that use
// them, CRDs with their custom resources counted, owners before what they own, data the
// configuration names that is not found.
func TestInventory(t *testing.T) {
	cl, _ := fakeClients("blue", "v1.37.2", nil, source()...)
	cfg := config.Planning{Include: config.Selection{Namespaces: []string{"shop"}},
		Databases: []config.Database{{Name: "db", Engine: "mysql", Namespace: "shop", Workload: "statefulset/mariadb"}}}
	p, err := Inventory(context.Background(), cl, Options{Config: cfg, Context: "blue", PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if p.Source.UID != "uid-blue" || p.Source.Version != "v1.37.2" || p.Source.Context != "blue" {
		t.Errorf("source %+v", p.Source)
	}
	for gr, want := range map[string]int{"configmaps": 1, "widgets.example.com": 2, "deployments.apps": 1, "replicasets.apps": 1,
		"persistentvolumeclaims": 1, "pods": 1, "namespaces": 1, "customresourcedefinitions.apiextensions.k8s.io": 1} {
		r := resourceOf(p, gr)
		if r == nil || r.Count != want {
			t.Errorf("%s: %+v, want %d objects", gr, r, want)
		}
	}
	if r := resourceOf(p, "configmaps"); r != nil && (r.Namespaces["shop"].Count != 1 || r.Namespaces["other"].Count != 0 || r.Bytes == 0) {
		t.Errorf("configmaps by namespace %+v", r.Namespaces)
	}
	for _, c := range []struct{ gr, name, want string }{
		{"configmaps", "kube-root-ca.crt", "root-CA publisher"},
		{"secrets", "default-token-x7k2q", "the target issues its own"},
		{"events", "", "record of the source cluster's past"},
		{"configmaps", "other", "namespace not included"},
		{"namespaces", "default", "every cluster has this namespace"},
	} {
		if reason := excludedFor(p, c.gr, c.name); !strings.Contains(reason, c.want) {
			t.Errorf("%s %s excluded for %q, want %q", c.gr, c.name, reason, c.want)
		}
	}
	if len(p.Volumes) != 1 {
		t.Fatalf("volumes %+v", p.Volumes)
	}
	v := p.Volumes[0]
	if v.StorageClass != "fast" || v.Bytes != 2<<30 || v.Phase != "Bound" || len(v.Pods) != 1 || v.Pods[0].Node != "node-a" || !v.Pods[0].ReadOnly {
		t.Errorf("volume %+v, want class fast, 2Gi bound, used read-only by web-1 on node-a", v)
	}
	if len(p.CRDs) != 1 || p.CRDs[0].Count != 2 || p.CRDs[0].StorageVersion != "v1" || !slices.Equal(p.CRDs[0].ServedVersions, []string{"v1"}) ||
		!slices.Equal(p.CRDs[0].StoredVersions, []string{"v1beta1", "v1"}) {
		t.Errorf("crds %+v", p.CRDs)
	}
	wave := func(gr string) int {
		if r := resourceOf(p, gr); r != nil {
			return r.Wave
		}
		return -1
	}
	if wave("deployments.apps") > wave("replicasets.apps") || wave("customresourcedefinitions.apiextensions.k8s.io") >= wave("widgets.example.com") ||
		wave("namespaces") > wave("configmaps") {
		t.Errorf("waves: deployments %d, replicasets %d, crds %d, widgets %d, namespaces %d, configmaps %d", wave("deployments.apps"), wave("replicasets.apps"),
			wave("customresourcedefinitions.apiextensions.k8s.io"), wave("widgets.example.com"), wave("namespaces"), wave("configmaps"))
	}
	if len(p.Databases) != 1 || p.Databases[0].Found || !slices.ContainsFunc(p.Findings, func(f Finding) bool {
		return f.Severity == Warning && f.Subject == "database db" && strings.Contains(f.Message, "not in the plan")
	}) {
		t.Errorf("databases %+v, findings %+v; want db not found, warned", p.Databases, p.Findings)
	}
	if p.Estimate.Objects != 9 {
		t.Errorf("estimate: %d objects, want 9", p.Estimate.Objects)
	}
}

// TestInventoryLabelSelector: a label selector leaves out the objects it does not match, but
// never namespaces nor CRDs, which carry what the selected objects need.
func TestInventoryLabelSelector(t *testing.T) {
	cl, _ := fakeClients("blue", "v1.37.2", nil, source()...)
	p, err := Inventory(context.Background(), cl, Options{Config: config.Planning{Include: config.Selection{Namespaces: []string{"shop"}, LabelSelector: "app=shop"}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := resourceOf(p, "configmaps"); r == nil || r.Count != 1 {
		t.Errorf("configmaps %+v, want the labelled one", r)
	}
	if resourceOf(p, "deployments.apps") != nil {
		t.Error("an unlabelled Deployment is in the plan")
	}
	if reason := excludedFor(p, "deployments.apps", "shop"); reason != "labels do not match the selector" {
		t.Errorf("the Deployment excluded for %q", reason)
	}
	for _, gr := range []string{"namespaces", "customresourcedefinitions.apiextensions.k8s.io"} {
		if resourceOf(p, gr) == nil {
			t.Errorf("%s left out by labels", gr)
		}
	}
	if _, err := Inventory(context.Background(), cl, Options{Config: config.Planning{Include: config.Selection{LabelSelector: "app in (("}}}); err == nil {
		t.Error("a bad label selector was taken")
	}
}

// TestInventoryDiscovery: a group whose discovery failed (a dead aggregated API) is a warning
// naming it and its objects are not planned; discovery that fails as a whole fails the plan, as
// does a type that moves and cannot be listed.
func TestInventoryDiscovery(t *testing.T) {
	ctx := context.Background()
	cl, dyn := fakeClients("blue", "v1.37.2", nil, source()...)
	d := cl.Discovery.(discoveryErr)
	d.err = &discovery.ErrGroupDiscoveryFailed{Groups: map[schema.GroupVersion]error{{Group: "metrics.k8s.io", Version: "v1beta1"}: errors.New("503")}}
	cl.Discovery = d
	p, err := Inventory(ctx, cl, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if u := p.Undiscovered(); !strings.Contains(u["metrics.k8s.io"], NotDiscovered) {
		t.Errorf("undiscovered %v, want metrics.k8s.io", u)
	}
	d.err = errors.New("connection refused")
	cl.Discovery = d
	if _, err := Inventory(ctx, cl, Options{}); err == nil || !strings.Contains(err.Error(), "discover the API") {
		t.Errorf("discovery down: %v", err)
	}
	d.err = nil
	cl.Discovery = d
	dyn.PrependReactor("list", "widgets", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("conversion webhook down")
	})
	if _, err := Inventory(ctx, cl, Options{}); err == nil || !strings.Contains(err.Error(), "list widgets.example.com") {
		t.Errorf("widgets not listable: %v, want the plan failed naming them", err)
	}
}

// TestFilterAgreesWithInventory: the filter a backup applies to live objects leaves out what the
// plan left out, for the same reasons.
func TestFilterAgreesWithInventory(t *testing.T) {
	cfg := config.Planning{Include: config.Selection{Namespaces: []string{"shop"}}, Exclude: config.Selection{Resources: []string{"persistentvolumeclaims"}}}
	f, err := NewFilter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cm := Resource{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true}
	pv := Resource{Version: "v1", Resource: "persistentvolumes", Kind: "PersistentVolume"}
	snapContent := Resource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents", Kind: "VolumeSnapshotContent"}
	for _, c := range []struct {
		r    Resource
		obj  *unstructured.Unstructured
		want string
	}{
		{cm, object("v1", "ConfigMap", "shop", "settings"), ""},
		{cm, object("v1", "ConfigMap", "other", "x"), "namespace not included"},
		{cm, object("v1", "ConfigMap", "shop", "kube-root-ca.crt"), "published into every namespace by the target's root-CA publisher"},
		{Resource{Version: "v1", Resource: "events", Kind: "Event", Namespaced: true}, object("v1", "Event", "shop", "e"), "events are a record of the source cluster's past"},
		{Resource{Version: "v1", Resource: "persistentvolumeclaims", Kind: "PersistentVolumeClaim", Namespaced: true}, object("v1", "PersistentVolumeClaim", "shop", "d"), "in the excluded resources"},
		// A volume goes with its claim's namespace; one bound to no claim is the cluster's.
		{pv, boundTo(object("v1", "PersistentVolume", "", "pv-shop"), "shop"), ""},
		{pv, boundTo(object("v1", "PersistentVolume", "", "pv-other"), "other"), "bound to a claim in namespace other: namespace not included"},
		{pv, object("v1", "PersistentVolume", "", "pv-free"), ""},
		{snapContent, withRef(object("snapshot.storage.k8s.io/v1", "VolumeSnapshotContent", "", "snapcontent-x"), "volumeSnapshotRef", "other"), "bound to a snapshot in namespace other: namespace not included"},
	} {
		if got := f.Reason(c.r, c.obj); got != c.want {
			t.Errorf("%s %s/%s: %q, want %q", c.r.Resource, c.obj.GetNamespace(), c.obj.GetName(), got, c.want)
		}
	}
	if got := f.DataReason("shop", true); got != "claims in the excluded resources" {
		t.Errorf("a claim's files in shop: %q", got)
	}
	if got := f.DataReason("shop", false); got != "" {
		t.Errorf("a database in shop: %q, want it moved", got)
	}
	if got := f.DataReason("other", false); got != "namespace not included" {
		t.Errorf("a database in other: %q", got)
	}
	for _, c := range []struct {
		cfg  config.Planning
		want []string
	}{
		{cfg, []string{"shop"}},
		{config.Planning{Include: config.Selection{Namespaces: []string{"b", "a", "c"}}, Exclude: config.Selection{Namespaces: []string{"c"}}}, []string{"a", "b"}},
		{config.Planning{Include: config.Selection{Namespaces: []string{"*"}}}, nil},
		{config.Planning{Exclude: config.Selection{Namespaces: []string{"c"}}}, nil},
	} {
		f, err := NewFilter(c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.Namespaces(); !slices.Equal(got, c.want) || (got == nil) != (c.want == nil) {
			t.Errorf("namespaces to list of %+v: %q, want %q", c.cfg, got, c.want)
		}
	}
}

// TestClusterOwnNamespaces: what lives in kube-system, kube-public and kube-node-lease stays
// unless include.namespaces names the namespace; default's contents are the user's.
func TestClusterOwnNamespaces(t *testing.T) {
	cm := Resource{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true}
	pv := Resource{Version: "v1", Resource: "persistentvolumes", Kind: "PersistentVolume"}
	for _, c := range []struct {
		name      string
		include   []string
		namespace string
		want      string
	}{
		{"everything: kube-system stays", nil, "kube-system", rules.ClusterOwnReason},
		{"everything: kube-public stays", nil, "kube-public", rules.ClusterOwnReason},
		{"everything: kube-node-lease stays", nil, "kube-node-lease", rules.ClusterOwnReason},
		{"everything: default moves", nil, "default", ""},
		{"everything: a tenant's moves", nil, "team-a", ""},
		{"\"*\": kube-system stays", []string{"*"}, "kube-system", rules.ClusterOwnReason},
		{"\"*\" and kube-system named: it moves", []string{"*", "kube-system"}, "kube-system", ""},
		{"\"*\" and kube-system named: the rest moves", []string{"*", "kube-system"}, "team-a", ""},
		{"kube-system named alone: it moves", []string{"kube-system"}, "kube-system", ""},
		{"another namespace named", []string{"team-a"}, "kube-system", "namespace not included"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := NewFilter(config.Planning{Include: config.Selection{Namespaces: c.include}})
			if err != nil {
				t.Fatal(err)
			}
			if got := f.Reason(cm, object("v1", "ConfigMap", c.namespace, "coredns")); got != c.want {
				t.Errorf("a ConfigMap in %s: %q, want %q", c.namespace, got, c.want)
			}
			// A volume goes with its claim's namespace.
			wantVolume := c.want
			if wantVolume != "" {
				wantVolume = "bound to a claim in namespace " + c.namespace + ": " + c.want
			}
			if got := f.Reason(pv, boundTo(object("v1", "PersistentVolume", "", "pv-1"), c.namespace)); got != wantVolume {
				t.Errorf("a volume bound to a claim in %s: %q, want %q", c.namespace, got, wantVolume)
			}
			if got := f.DataReason(c.namespace, true); got != c.want {
				t.Errorf("a claim's files in %s: %q, want %q", c.namespace, got, c.want)
			}
			// A restore's selection leaves out what it names: the backup's plan chose the rest.
			b, err := NewBackupFilter(config.Planning{Include: config.Selection{Namespaces: c.include}})
			if err != nil {
				t.Fatal(err)
			}
			if got := b.Reason(cm, object("v1", "ConfigMap", c.namespace, "coredns")); got != "" && got != "namespace not included" {
				t.Errorf("a restore's selection: a ConfigMap in %s: %q", c.namespace, got)
			}
		})
	}
}

// TestClusterOwnNamespacesNamedObjects: a platform's parts in kube-system move when
// include.objects (or an upgrade's state.objects) names them; the rest of kube-system stays.
func TestClusterOwnNamespacesNamedObjects(t *testing.T) {
	ds := Resource{Group: "apps", Version: "v1", Resource: "daemonsets", Kind: "DaemonSet", Namespaced: true}
	cm := Resource{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true}
	cfg := config.Planning{
		Include: config.Selection{Objects: []config.ObjectNames{{Resource: "daemonsets.apps", Namespace: "kube-system", Names: []string{"istio-cni-node"}}}},
		State:   config.ReleasePart{Objects: []config.ObjectNames{{Resource: "secrets", Namespace: "kube-system", Names: []string{"sealed-secrets-key"}}}},
	}
	f, err := NewFilter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		r    Resource
		obj  *unstructured.Unstructured
		want string
	}{
		{ds, object("apps/v1", "DaemonSet", "kube-system", "istio-cni-node"), ""},
		{ds, object("apps/v1", "DaemonSet", "kube-system", "kube-proxy"), rules.ClusterOwnReason},
		{cm, object("v1", "ConfigMap", "kube-system", "istio-cni-node"), rules.ClusterOwnReason},
		{Resource{Version: "v1", Resource: "secrets", Kind: "Secret", Namespaced: true}, object("v1", "Secret", "kube-system", "sealed-secrets-key"), ""},
	} {
		if got := f.Reason(c.r, c.obj); got != c.want {
			t.Errorf("%s %s/%s: %q, want %q", c.r.Resource, c.obj.GetNamespace(), c.obj.GetName(), got, c.want)
		}
	}
}

func TestSelector(t *testing.T) {
	cfg := config.Planning{Include: config.Selection{Namespaces: []string{"kubeflow", "team-a"}, LabelSelector: "app!=cache"}, Exclude: config.Selection{Resources: []string{"secrets", "profiles.kubeflow.org"}}}
	s, err := newSelector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cm := servedResource{kind: "ConfigMap", namespaced: true}
	cm.gvr.Version, cm.gvr.Resource = "v1", "configmaps"
	secrets := cm
	secrets.gvr.Resource, secrets.kind = "secrets", "Secret"
	if s.resourceReason(cm) != "" || s.resourceReason(secrets) == "" {
		t.Fatalf("resource reasons: configmaps %q, secrets %q", s.resourceReason(cm), s.resourceReason(secrets))
	}
	in := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"namespace": "kubeflow", "name": "x", "labels": map[string]any{"app": "web"}}}}
	cache := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"namespace": "kubeflow", "name": "y", "labels": map[string]any{"app": "cache"}}}}
	other := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"namespace": "elsewhere", "name": "z"}}}
	if r := s.objectReason(cm, in); r != "" {
		t.Errorf("included object: %q", r)
	}
	if r := s.objectReason(cm, cache); !strings.Contains(r, "labels") {
		t.Errorf("object with app=cache: %q", r)
	}
	if r := s.objectReason(cm, other); !strings.Contains(r, "namespace not included") {
		t.Errorf("object in another namespace: %q", r)
	}
}

// TestInventoryWarnsOfDataOnNodes: pods that write to a node's folder (hostPath) keep data no
// claim holds; the plan warns once per namespace and folder. Read-only mounts, sockets and devices
// are not data, and pods of namespaces the plan leaves out are not its business.
func TestInventoryWarnsOfDataOnNodes(t *testing.T) {
	hostPod := func(ns, name string, volumes []any, mounts []any) *unstructured.Unstructured {
		pod := object("v1", "Pod", ns, name)
		pod.Object["spec"] = map[string]any{"nodeName": "node-a", "volumes": volumes,
			"containers": []any{map[string]any{"name": "app", "volumeMounts": mounts}}}
		return pod
	}
	host := func(name, path, kind string) any {
		return map[string]any{"name": name, "hostPath": map[string]any{"path": path, "type": kind}}
	}
	mount := func(name string, readOnly bool) any {
		return map[string]any{"name": name, "mountPath": "/x/" + name, "readOnly": readOnly}
	}
	objects := []runtime.Object{
		object("v1", "Namespace", "", "shop"), object("v1", "Namespace", "", "other"),
		hostPod("shop", "minio-0", []any{host("data", "/srv/minio", "DirectoryOrCreate")}, []any{mount("data", false)}),
		hostPod("shop", "minio-1", []any{host("data", "/srv/minio", "")}, []any{mount("data", false)}),
		hostPod("shop", "agent", []any{host("tz", "/etc/localtime", "File"), host("sock", "/run/containerd.sock", "Socket"), host("dev", "/dev/fuse", "CharDevice")},
			[]any{mount("tz", true), mount("sock", false), mount("dev", false)}),
		hostPod("other", "cache", []any{host("c", "/var/cache/other", "")}, []any{mount("c", false)}),
	}
	cl, _ := fakeClients("blue", "v1.37.2", nil, objects...)
	p, err := Inventory(context.Background(), cl, Options{Config: config.Planning{Include: config.Selection{Namespaces: []string{"shop"}}}, Context: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range p.Findings {
		if strings.Contains(f.Message, "hostPath") {
			got = append(got, f.Severity+" "+f.Subject+": "+f.Message)
		}
	}
	want := []string{"warning namespace shop: hostPath /srv/minio is written by pods minio-0 and 1 more: ferry moves claims, not a node's folders, so what is kept there does not move"}
	if !slices.Equal(got, want) {
		t.Errorf("findings of hostPath:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestInventoryEndpoints: hand-written endpoints move, the controllers' are counted per namespace
// (not listed one by one), and an identity that may not list endpoints (a schedule's from a ferry
// before they moved) gets a plan without them and a warning, not a failure.
func TestInventoryEndpoints(t *testing.T) {
	ctx := context.Background()
	byHand := object("v1", "Endpoints", "shop", "external-db")
	byHand.Object["subsets"] = []any{map[string]any{"addresses": []any{map[string]any{"ip": "192.0.2.10"}}}}
	var made []runtime.Object
	for _, name := range []string{"web", "api"} {
		made = append(made, withLabels(object("v1", "Endpoints", "shop", name), map[string]string{"endpoints.kubernetes.io/managed-by": "endpoint-controller"}))
	}
	cl, dyn := fakeClients("blue", "v1.37.2", nil, append(made, object("v1", "Namespace", "", "shop"), byHand)...)
	p, err := Inventory(ctx, cl, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r := resourceOf(p, "endpoints"); r == nil || r.Count != 1 {
		t.Errorf("endpoints in the plan: %+v, want the one written by hand", r)
	}
	var rows []Exclusion
	for _, e := range p.Excluded {
		if e.Resource == "endpoints" {
			rows = append(rows, e)
		}
	}
	if len(rows) != 1 || rows[0].Count != 2 || rows[0].Namespace != "shop" || rows[0].Name != "" || !strings.Contains(rows[0].Reason, "endpoints controller") {
		t.Errorf("endpoints left out: %+v, want one row of 2 in shop", rows)
	}

	dyn.PrependReactor("list", "endpoints", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "endpoints"}, "", errors.New("no"))
	})
	p, err = Inventory(ctx, cl, Options{})
	if err != nil {
		t.Fatalf("an identity that may not list endpoints: %v, want a plan", err)
	}
	if r := resourceOf(p, "endpoints"); r != nil {
		t.Errorf("endpoints in the plan though unread: %+v", r)
	}
	if !slices.ContainsFunc(p.Findings, func(f Finding) bool {
		return f.Severity == Warning && f.Subject == "endpoints" && strings.Contains(f.Message, "written by hand")
	}) {
		t.Errorf("findings %+v, want a warning that hand-written endpoints are not in the plan", p.Findings)
	}
}

// TestDataNarrowedBySelection: a selection of namespaces given for the data (the flags of ferry
// plan and backup) leaves out the databases and buckets of the others, listed as not moved with
// the reason, as a restore by the same selection leaves them; without one, ferry.yaml's data is
// planned whatever its selection (TestInventory's).
func TestDataNarrowedBySelection(t *testing.T) {
	cfg := config.Planning{
		Databases: []config.Database{{Name: "db", Engine: "mysql", Namespace: "shop", Workload: "statefulset/mariadb"},
			{Name: "kfp-mysql", Engine: "mysql", Namespace: "kubeflow", Workload: "deployment/mysql"}},
		Buckets: []config.Bucket{{Name: "mlpipeline", Namespace: "kubeflow", Workload: "deployment/minio"},
			{Name: "archive", Endpoint: "http://127.0.0.1:9000"}}, // no namespace: it goes with any selection
	}
	for _, tc := range []struct {
		name               string
		selection          *config.Planning
		databases, buckets []string
		excluded           []string
	}{
		{"no selection", nil, []string{"db", "kfp-mysql"}, []string{"mlpipeline", "archive"}, nil},
		{"include shop", &config.Planning{Include: config.Selection{Namespaces: []string{"shop"}}}, []string{"db"}, []string{"archive"},
			[]string{"buckets kubeflow/mlpipeline: namespace not included", "databases kubeflow/kfp-mysql: namespace not included"}},
		{"exclude kubeflow", &config.Planning{Exclude: config.Selection{Namespaces: []string{"kubeflow"}}}, []string{"db"}, []string{"archive"},
			[]string{"buckets kubeflow/mlpipeline: namespace excluded", "databases kubeflow/kfp-mysql: namespace excluded"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, _ := fakeClients("blue", "v1.37.2", nil, source()...)
			var data *Filter
			if tc.selection != nil {
				var err error
				if data, err = NewBackupFilter(*tc.selection); err != nil {
					t.Fatal(err)
				}
			}
			p, err := Inventory(context.Background(), cl, Options{Config: cfg, Data: data})
			if err != nil {
				t.Fatal(err)
			}
			names := func(items []DataItem) []string {
				var out []string
				for _, it := range items {
					out = append(out, it.Name)
				}
				return out
			}
			var excluded []string
			for _, e := range p.Excluded {
				if e.Resource == "databases" || e.Resource == "buckets" {
					excluded = append(excluded, e.Resource+" "+e.Namespace+"/"+e.Name+": "+e.Reason)
				}
			}
			if !slices.Equal(names(p.Databases), tc.databases) || !slices.Equal(names(p.Buckets), tc.buckets) || !slices.Equal(excluded, tc.excluded) {
				t.Errorf("planned databases %q and buckets %q, excluded %q; want %q, %q and %q",
					names(p.Databases), names(p.Buckets), excluded, tc.databases, tc.buckets, tc.excluded)
			}
		})
	}
}
