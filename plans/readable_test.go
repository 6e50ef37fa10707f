package plans

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/plans/config"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
)

// preferred is a fake discovery that serves lists as the preferred resources.
type preferred struct {
	*fakediscovery.FakeDiscovery
	lists []*metav1.APIResourceList
}

func (p preferred) ServerPreferredResources() ([]*metav1.APIResourceList, error) { return p.lists, nil }

// TestReadable: the types a least-privilege backup identity reads are named one by one: what may
// move and what locates the data; never a subresource, a type that never moves, or one the
// configuration leaves out.
func TestReadable(t *testing.T) {
	rw := []string{"get", "list", "create", "delete"}
	dc := preferred{FakeDiscovery: &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}, lists: []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "configmaps", Namespaced: true, Kind: "ConfigMap", Verbs: rw},
			{Name: "secrets", Namespaced: true, Kind: "Secret", Verbs: rw},
			{Name: "nodes", Kind: "Node", Verbs: rw},
			{Name: "nodes/proxy", Kind: "NodeProxyOptions", Verbs: []string{"get", "create"}},
			{Name: "pods/exec", Namespaced: true, Kind: "PodExecOptions", Verbs: []string{"get", "create"}},
			{Name: "events", Namespaced: true, Kind: "Event", Verbs: rw},
			{Name: "componentstatuses", Kind: "ComponentStatus", Verbs: []string{"get", "list"}},
		}},
		{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{{Name: "widgets", Namespaced: true, Kind: "Widget", Verbs: rw}}},
		{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{{Name: "deployments", Namespaced: true, Kind: "Deployment", Verbs: rw}}},
	}}
	names := func(grs []schema.GroupResource) []string {
		var out []string
		for _, gr := range grs {
			out = append(out, gr.String())
		}
		return out
	}
	got, err := Readable(dc, config.Planning{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"configmaps", "secrets", "widgets.example.com", "deployments.apps", "pods", "persistentvolumeclaims", "namespaces", "customresourcedefinitions.apiextensions.k8s.io"} {
		if !slices.Contains(names(got), want) {
			t.Errorf("Readable = %v, want %s among them", names(got), want)
		}
	}
	for _, r := range names(got) {
		if strings.ContainsAny(r, "*/") || strings.HasPrefix(r, "nodes") || strings.HasPrefix(r, "events") || r == "componentstatuses" {
			t.Errorf("Readable = %v: %s", names(got), r)
		}
	}
	got, err = Readable(dc, config.Planning{Exclude: config.Selection{Resources: []string{"widgets.example.com", "deployments"}}})
	if err != nil {
		t.Fatal(err)
	}
	if n := names(got); slices.Contains(n, "widgets.example.com") || slices.Contains(n, "deployments.apps") || !slices.Contains(n, "configmaps") {
		t.Errorf("with widgets and deployments excluded: %v", n)
	}
}

// TestListTypeForbidden: a type that never moves may be closed to the identity (it is left out,
// uncounted); a type that moves and cannot be listed fails the plan, naming it.
func TestListTypeForbidden(t *testing.T) {
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		{Version: "v1", Resource: "nodes"}: "NodeList", {Version: "v1", Resource: "configmaps"}: "ConfigMapList"})
	dyn.PrependReactor("list", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: a.GetResource().Resource}, "", nil)
	})
	sel, err := newSelector(config.Planning{})
	if err != nil {
		t.Fatal(err)
	}
	nodes := servedResource{gvr: schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, kind: "Node"}
	tally, err := listType(context.Background(), dyn, nodes, sel, Options{PageSize: 10})
	if err != nil {
		t.Fatalf("nodes, which never move, forbidden: %v", err)
	}
	if len(tally.excluded) != 1 || tally.res.Count != 0 {
		t.Errorf("nodes forbidden: %+v", tally)
	}
	for _, e := range tally.excluded {
		if e.Resource != "nodes" || !strings.Contains(e.Reason, "may not list") {
			t.Errorf("nodes forbidden: %+v", e)
		}
	}
	cms := servedResource{gvr: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, kind: "ConfigMap", namespaced: true}
	if _, err := listType(context.Background(), dyn, cms, sel, Options{PageSize: 10}); err == nil || !strings.Contains(err.Error(), "list configmaps") {
		t.Errorf("configmaps forbidden: %v, want an error naming them", err)
	}
}
