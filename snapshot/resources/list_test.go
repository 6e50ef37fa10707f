package resources

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// listedScopes are the namespaces of the LIST requests the fake served, by resource ("" for the
// whole cluster).
func listedScopes(actions []k8stesting.Action) map[string][]string {
	scopes := map[string][]string{}
	for _, a := range actions {
		if a.GetVerb() == "list" {
			r := a.GetResource().Resource
			if !slices.Contains(scopes[r], a.GetNamespace()) {
				scopes[r] = append(scopes[r], a.GetNamespace())
			}
		}
	}
	for _, s := range scopes {
		slices.Sort(s)
	}
	return scopes
}

// A backup of named namespaces lists each of them, not the whole cluster's objects of every type
// (on a big cluster most of a type's objects are elsewhere); verify lists the namespaces its
// objects went to. A backup that names no namespace lists the cluster.
func TestListsOnlyTheNamedNamespaces(t *testing.T) {
	ctx := context.Background()
	var objs []runtime.Object
	for _, ns := range []string{"team-a", "team-b", "other"} {
		for i := range 3 {
			objs = append(objs, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"name": fmt.Sprintf("cm-%d", i), "namespace": ns},
				"data":     map[string]any{"n": fmt.Sprint(i)},
			}})
		}
	}
	for _, tc := range []struct {
		name       string
		namespaces []string
		want       []string // listed namespaces of configmaps
		objects    int
	}{
		{"named namespaces", []string{"team-a", "team-b"}, []string{"team-a", "team-b"}, 6},
		{"whole cluster", nil, []string{""}, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := &plans.Plan{Config: config.Planning{Include: config.Selection{Namespaces: tc.namespaces}}, Resources: secretsPlan.Resources}
			store, err := storage.NewFile(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			blue := fakeCluster(objs...)
			w, err := snapshot.Create(ctx, store, "b", plans.Cluster{}, plan, time.Now(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := (Objects{Dynamic: blue, Plan: plan}).Capture(ctx, w); err != nil {
				t.Fatal(err)
			}
			m, err := w.Commit(ctx, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Objects) != tc.objects {
				t.Errorf("backed up %d objects, want %d", len(m.Objects), tc.objects)
			}
			if got := listedScopes(blue.Actions())["configmaps"]; !slices.Equal(got, tc.want) {
				t.Errorf("the backup listed configmaps in %q, want %q", got, tc.want)
			}

			green := fakeCluster(objs...)
			r, err := snapshot.Open(ctx, store, "b", nil)
			if err != nil {
				t.Fatal(err)
			}
			var report snapshot.Report
			if err := (Objects{Dynamic: green, WaitTimeout: time.Second}).Verify(ctx, r, &report); err != nil {
				t.Fatal(err)
			}
			if got := report.Counts["objects"][snapshot.StatusIdentical]; got != tc.objects || len(report.Items) > 0 {
				t.Errorf("verify: %d identical, items %v; want %d identical", got, report.Items, tc.objects)
			}
			want := tc.want
			if want[0] == "" {
				want = []string{"other", "team-a", "team-b"} // few namespaces: each listed
			}
			if got := listedScopes(green.Actions())["configmaps"]; !slices.Equal(got, want) {
				t.Errorf("verify listed configmaps in %q, want %q", got, want)
			}
		})
	}
}

func TestVerifyScopes(t *testing.T) {
	cm := plans.Resource{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true}
	keys := func(namespaces, each int) map[string]int {
		m := map[string]int{}
		for n := range namespaces {
			for i := range each {
				m[fmt.Sprintf("ns-%03d/o-%d", n, i)] = len(m)
			}
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		res   plans.Resource
		want  map[string]int
		lists int // 1: the whole cluster
	}{
		{"cluster-scoped", plans.Resource{Version: "v1", Resource: "namespaces", Kind: "Namespace"}, map[string]int{"/a": 0}, 1},
		{"few namespaces", cm, keys(fewNamespaces, 1), fewNamespaces},
		{"many namespaces of few objects", cm, keys(500, 3), 1},
		{"many namespaces of many objects", cm, keys(100, manyObjects), 100},
	} {
		got := verifyScopes(tc.res, tc.want)
		if len(got) != tc.lists || (tc.lists == 1 && got[0] != "") && tc.name != "few namespaces" {
			t.Errorf("%s: %d lists (%.3q), want %d", tc.name, len(got), got, tc.lists)
		}
	}
}
