package migrate

import (
	"context"
	"encoding/json"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/ferrykube/ferry/migrate/gates"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot/kinds"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// fakeDiscovery serves its resources as the preferred ones too (client-go's fake returns none).
type fakeDiscovery struct{ *fakediscovery.FakeDiscovery }

func (d fakeDiscovery) ServerPreferredResources() ([]*metav1.APIResourceList, error) {
	return d.Resources, nil
}

// served are the resource types of the fake clusters: enough for a plan, a quiesce, a backup of
// objects, a restore and a verify; none that needs a pod to run (volumes, databases, buckets).
var served = []struct {
	gv         string
	resource   string
	kind       string
	namespaced bool
}{
	{"v1", "namespaces", "Namespace", false},
	{"v1", "configmaps", "ConfigMap", true},
	{"v1", "pods", "Pod", true},
	{"v1", "persistentvolumeclaims", "PersistentVolumeClaim", true},
	{"v1", "services", "Service", true},
	{"v1", "resourcequotas", "ResourceQuota", true},
	{"v1", "limitranges", "LimitRange", true},
	{"apps/v1", "replicasets", "ReplicaSet", true},
	{"batch/v1", "cronjobs", "CronJob", true},
	{"storage.k8s.io/v1", "storageclasses", "StorageClass", false},
	{"apiextensions.k8s.io/v1", "customresourcedefinitions", "CustomResourceDefinition", false},
	{"admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", "ValidatingWebhookConfiguration", false},
	{"admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration", false},
}

// fakeCluster is a cluster of client-go's fakes: its dynamic client holds objs and a kube-system
// namespace of the given UID (a cluster's identity).
type fakeCluster struct {
	kinds.Cluster
	dyn *dynamicfake.FakeDynamicClient
}

func newFakeCluster(t *testing.T, uid string, objs ...runtime.Object) fakeCluster {
	t.Helper()
	byGV := map[string]*metav1.APIResourceList{}
	var lists []*metav1.APIResourceList
	listKinds := map[schema.GroupVersionResource]string{}
	for _, s := range served {
		l := byGV[s.gv]
		if l == nil {
			l = &metav1.APIResourceList{GroupVersion: s.gv}
			byGV[s.gv] = l
			lists = append(lists, l)
		}
		l.APIResources = append(l.APIResources, metav1.APIResource{Name: s.resource, Kind: s.kind, Namespaced: s.namespaced,
			Verbs: metav1.Verbs{"get", "list", "create", "update", "patch", "delete"}})
		gv, _ := schema.ParseGroupVersion(s.gv)
		listKinds[gv.WithResource(s.resource)] = s.kind + "List"
	}
	kubeSystem := obj("v1", "Namespace", "", "kube-system")
	kubeSystem.SetUID(k8stypes.UID("uid-" + uid))
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, append([]runtime.Object{kubeSystem}, objs...)...)
	honorDryRun(dyn)
	disc := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{Resources: lists}, FakedServerVersion: &version.Info{GitVersion: "v1.37.2"}}
	return fakeCluster{Cluster: kinds.Cluster{Client: kubefake.NewClientset(), Dynamic: dyn, Discovery: fakeDiscovery{disc}}, dyn: dyn}
}

// honorDryRun has the fake's merge patches and creates that are dry runs (the quiesce tries its
// changes first; verify asks what the target makes of an object) answer with the object patched
// or made and change nothing, as on an API server: its tracker applies every patch and create.
func honorDryRun(dyn *dynamicfake.FakeDynamicClient) {
	dyn.PrependReactor("create", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		c, ok := a.(clienttesting.CreateActionImpl)
		if !ok || len(c.CreateOptions.DryRun) == 0 {
			return false, nil, nil
		}
		made := c.GetObject().DeepCopyObject().(*unstructured.Unstructured)
		if made.GetName() == "" {
			made.SetName(made.GetGenerateName() + "dryrun")
		}
		return true, made, nil
	})
	dyn.PrependReactor("patch", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p, ok := a.(clienttesting.PatchActionImpl)
		if !ok || len(p.PatchOptions.DryRun) == 0 {
			return false, nil, nil
		}
		o, err := dyn.Tracker().Get(p.GetResource(), p.GetNamespace(), p.GetName())
		if err != nil {
			return true, nil, err
		}
		before, err := json.Marshal(o)
		if err != nil {
			return true, nil, err
		}
		after, err := jsonpatch.MergePatch(before, p.Patch)
		if err != nil {
			return true, nil, err
		}
		patched := &unstructured.Unstructured{}
		return true, patched, patched.UnmarshalJSON(after)
	})
}

// obj makes an object of apiVersion and kind, namespaced when ns is set.
func obj(apiVersion, kind, ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": map[string]any{"name": name}}}
	if ns != "" {
		u.SetNamespace(ns)
	}
	return u
}

func configMap(ns, name string, data map[string]any) *unstructured.Unstructured {
	u := obj("v1", "ConfigMap", ns, name)
	u.Object["data"] = data
	return u
}

func cronJob(ns, name string) *unstructured.Unstructured {
	u := obj("batch/v1", "CronJob", ns, name)
	u.Object["spec"] = map[string]any{"schedule": "*/5 * * * *", "suspend": false,
		"jobTemplate": map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"restartPolicy": "Never",
			"containers": []any{map[string]any{"name": "c", "image": "busybox"}}}}}}}
	return u
}

var (
	namespacesGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	cronJobsGVR   = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "cronjobs"}
)

// get reads an object of the cluster, or nil.
func (c fakeCluster) get(t *testing.T, gvr schema.GroupVersionResource, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u, err := c.dyn.Resource(gvr).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return u
}

// suspended says whether a CronJob is suspended and carries the quiesce record.
func (c fakeCluster) suspended(t *testing.T, ns, name string) (suspend, marked bool) {
	t.Helper()
	u := c.get(t, cronJobsGVR, ns, name)
	if u == nil {
		t.Fatalf("cronjob %s/%s is gone", ns, name)
	}
	suspend, _, _ = unstructured.NestedBool(u.Object, "spec", "suspend")
	_, marked = u.GetAnnotations()[QuiescedAnnotation]
	return suspend, marked
}

// shopConfig moves namespace shop, whose CronJob writes: the run suspends it.
func shopConfig() config.Config {
	return config.Config{
		Planning: config.Planning{
			Include: config.Selection{Namespaces: []string{"shop"}},
			Quiesce: []config.QuiesceRule{{Resource: "cronjobs.batch", Namespace: "shop", Action: Suspend, Why: "writes reports"}},
		},
		Rollout: &config.Rollout{Steps: []int{50, 100}, Soak: config.Duration(1), Interval: config.Duration(1)},
	}
}

// shopBlue is a blue cluster of namespace shop: a ConfigMap and a CronJob that writes.
func shopBlue(t *testing.T, extra ...runtime.Object) fakeCluster {
	return newFakeCluster(t, "blue", append([]runtime.Object{obj("v1", "Namespace", "", "shop"),
		configMap("shop", "settings", map[string]any{"color": "blue"}), cronJob("shop", "report")}, extra...)...)
}

// fakeGate gives the verdicts it is told, one per measurement, the last one again and again.
type fakeGate struct{ results []gates.Measurement }

func (g *fakeGate) Name() string { return "fake" }

func (g *fakeGate) Measure(context.Context) gates.Measurement {
	m := g.results[0]
	if len(g.results) > 1 {
		g.results = g.results[1:]
	}
	m.Gate = "fake"
	return m
}
