package resources

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func archiveOf(t *testing.T, objects ...string) *Archive {
	t.Helper()
	a, err := newSpooledArchive()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	for _, s := range objects {
		obj := decode(t, s)
		u := unstructured.Unstructured{Object: obj}
		gr := map[string]string{"ConfigMap": "configmaps", "PersistentVolumeClaim": "persistentvolumeclaims", "Pod": "pods",
			"ReplicaSet": "replicasets.apps", "Deployment": "deployments.apps", "Secret": "secrets", "StatefulSet": "statefulsets.apps", "Widget": "widgets.carry.example.com"}[u.GetKind()]
		if err := a.add(gr, u.GetNamespace(), u.GetName(), obj, nil); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

// TestPlanCarryBack: blue's backup went to green under a namespace and a many-to-one class
// mapping; green then created, changed and deleted objects. The carry-back names each in blue's
// names, expects green's content on blue, and leaves alone what the restore never creates.
func TestPlanCarryBack(t *testing.T) {
	m := snapshot.Mapping{Namespaces: map[string]string{"team": "team-green"}, StorageClasses: map[string]string{"gp3": "standard", "nfs": "standard"}}
	original := archiveOf(t,
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"kept","namespace":"team","uid":"b1","resourceVersion":"5"},"data":{"k":"v"}}`,
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"edited","namespace":"team"},"data":{"a":"1","b":"2"}}`,
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"doomed","namespace":"team"},"data":{"x":"y"}}`,
		`{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"data","namespace":"team"},"spec":{"storageClassName":"nfs","volumeName":"pv-blue"}}`,
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"done","namespace":"team"},"status":{"phase":"Succeeded"}}`,
		`{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"classless","namespace":"team"},"spec":{"resources":{"requests":{"storage":"1Gi"}}}}`,
		`{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"name":"db","namespace":"team"},"spec":{"volumeClaimTemplates":[{"metadata":{"name":"data"},"spec":{"storageClassName":"nfs"}}]}}`,
		// An older ferry backed up kube-system; green's objects are listed without it.
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"coredns","namespace":"kube-system"},"data":{"Corefile":"."}}`,
	)
	carried := archiveOf(t,
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"kept","namespace":"team-green","uid":"g1","resourceVersion":"77"},"data":{"k":"v"}}`,
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"edited","namespace":"team-green","labels":{"on":"green"}},"data":{"a":"10"}}`,
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"created","namespace":"team-green"},"data":{"n":"1"}}`,
		`{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"data","namespace":"team-green"},"spec":{"storageClassName":"standard","volumeName":"pv-green"}}`,
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"failed","namespace":"team-green"},"status":{"phase":"Failed"}}`,
		`{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"classless","namespace":"team-green"},"spec":{"storageClassName":"standard","resources":{"requests":{"storage":"1Gi"}}}}`,
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"greens-own","namespace":"team-green","creationTimestamp":"2026-11-29T11:00:00Z"}}`,
		`{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"name":"db","namespace":"team-green"},"spec":{"volumeClaimTemplates":[{"metadata":{"name":"data"},"spec":{"storageClassName":"standard"}}]}}`,
	)
	cb, err := PlanCarryBack(context.Background(), original, carried, m, time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC), config.Planning{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	if want := []string{"v1 ConfigMap team/created"}; !reflect.DeepEqual(cb.Created, want) {
		t.Errorf("created %q, want %q", cb.Created, want)
	}
	if want := []string{"v1 ConfigMap team/edited"}; !reflect.DeepEqual(cb.Changed, want) {
		t.Errorf("changed %q, want %q", cb.Changed, want)
	}
	if got, want := cb.Differences["v1 ConfigMap team/edited"], `data.a: restored "1", green "10"`; got != want {
		t.Errorf("the first difference of edited: %q, want %q", got, want)
	}
	if want := []string{"v1 ConfigMap team/doomed"}; !reflect.DeepEqual(cb.DeletedIDs(), want) {
		t.Errorf("deleted %q, want %q (finished pods are never restored, so never deleted; what green's listing leaves out is not deleted)", cb.DeletedIDs(), want)
	}
	expected := map[string]map[string]any{}
	for _, entries := range cb.Expected.ByResource {
		for _, e := range entries {
			obj, err := cb.Expected.Object(e)
			if err != nil {
				t.Fatal(err)
			}
			expected[e.ID()] = obj
		}
	}
	if len(expected) != 6 {
		t.Errorf("blue should hold green's 6 restorable objects, got %d: %v", len(expected), expected)
	}
	edited := expected["v1 ConfigMap team/edited"]
	if want := decode(t, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"edited","namespace":"team","labels":{"on":"green"}},"data":{"a":"10"}}`); !reflect.DeepEqual(edited, want) {
		t.Errorf("edited as blue must hold it: %v, want %v", edited, want)
	}
	claim := expected["v1 PersistentVolumeClaim team/data"]
	if class, _, _ := unstructured.NestedString(claim, "spec", "storageClassName"); class != "nfs" {
		t.Errorf("the claim's class on blue: %q, want blue's nfs (standard has two ways back)", class)
	}
	if templates, _, _ := unstructured.NestedSlice(expected["apps/v1 StatefulSet team/db"], "spec", "volumeClaimTemplates"); len(templates) != 1 ||
		templates[0].(map[string]any)["spec"].(map[string]any)["storageClassName"] != "nfs" {
		t.Errorf("the StatefulSet's claim template on blue: %v, want blue's class nfs", templates)
	}
	if class, found, _ := unstructured.NestedString(expected["v1 PersistentVolumeClaim team/classless"], "spec", "storageClassName"); found {
		t.Errorf("a claim blue held without a class got %q on blue: green's default class is green's", class)
	}
}

func TestMappingInverse(t *testing.T) {
	m := snapshot.Mapping{Namespaces: map[string]string{"a": "b", "c": "d"}, StorageClasses: map[string]string{"gp3": "standard", "nfs": "standard", "fast": "ssd", "": "shared"}}
	got := m.Inverse()
	want := snapshot.Mapping{Namespaces: map[string]string{"b": "a", "d": "c"}, StorageClasses: map[string]string{"ssd": "fast"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Inverse = %+v, want %+v", got, want)
	}
}

// TestReplacePatch: the patch sets what changed, removes what the expected object lacks, leaves
// equal fields out, and sends owner references with the target's UIDs.
func TestReplacePatch(t *testing.T) {
	live := decode(t, `{"metadata":{"name":"c","labels":{"x":"1"},"ownerReferences":[{"kind":"D","name":"d"}]},"data":{"a":"1","b":"2"}}`)
	expected := decode(t, `{"metadata":{"name":"c","labels":{"x":"1"},"ownerReferences":[{"kind":"D","name":"e"}]},"data":{"a":"10"}}`)
	refs := []metav1.OwnerReference{{Kind: "D", Name: "e", UID: "uid-on-target"}}
	patch, err := replacePatch(live, expected, refs)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(patch, &got); err != nil {
		t.Fatal(err)
	}
	want := decode(t, `{"data":{"a":"10","b":null},"metadata":{"ownerReferences":[{"apiVersion":"","kind":"D","name":"e","uid":"uid-on-target"}]}}`)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("patch %s, want %v", patch, want)
	}
}

// TestExactCompare: with Exact, a key the target holds and the backup lacks is a difference, named
// from the backup's side as Compare names the others; without, the target may hold more.
func TestExactCompare(t *testing.T) {
	expected := decode(t, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"n"},"data":{"a":"1"}}`)
	live := &unstructured.Unstructured{Object: decode(t, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"n","uid":"u","resourceVersion":"3"},"data":{"a":"1","b":"2"}}`)}
	if d := (Objects{}).compare("configmaps", expected, live); len(d) != 0 {
		t.Errorf("without Exact: %q, want none", d)
	}
	want := []string{`data.b: on the target, not in the backup ("2")`}
	if d := (Objects{Exact: true}).compare("configmaps", expected, live); !reflect.DeepEqual(d, want) {
		t.Errorf("with Exact: %q, want %q", d, want)
	}
}

// TestCheckDeletions: an object missing from green's backup is deleted on blue only when green's
// plan listed its type and discovered its API group without a warning; otherwise the carry-back
// stops naming the group, and nothing of that group is deleted.
func TestCheckDeletions(t *testing.T) {
	original := archiveOf(t,
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"kept","namespace":"team"}}`,
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"doomed","namespace":"team"}}`,
		`{"apiVersion":"carry.example.com/v1","kind":"Widget","metadata":{"name":"w1","namespace":"team"}}`,
		`{"apiVersion":"carry.example.com/v1","kind":"Widget","metadata":{"name":"w2","namespace":"team"}}`,
	)
	// Green deleted ConfigMap doomed; its widgets did not come with its backup.
	carried := archiveOf(t, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"kept","namespace":"team"}}`)
	configmaps := plans.Resource{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true}
	widgets := plans.Resource{Group: "carry.example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Namespaced: true}
	undiscovered := func(gv string) plans.Finding {
		return plans.Finding{Severity: plans.Warning, Subject: gv, Message: plans.NotDiscovered + ", its objects are not in the plan: the server is currently unable to handle the request"}
	}
	for _, tc := range []struct {
		name        string
		green       *plans.Plan
		wantErr     []string // each in the error; none: no error
		wantDeleted []string // left by SureDeletions
	}{
		{"the group failed discovery", &plans.Plan{Resources: []plans.Resource{configmaps}, Findings: []plans.Finding{undiscovered("carry.example.com/v1")}},
			[]string{"API group carry.example.com", "carry.example.com/v1: " + plans.NotDiscovered, "2 objects", "carry.example.com/v1 Widget team/w1"},
			[]string{"v1 ConfigMap team/doomed"}},
		{"another version of the group failed discovery", &plans.Plan{Resources: []plans.Resource{configmaps, widgets}, Findings: []plans.Finding{undiscovered("carry.example.com/v2")}},
			[]string{"API group carry.example.com", "carry.example.com/v2"}, []string{"v1 ConfigMap team/doomed"}},
		{"the type is not listed", &plans.Plan{Resources: []plans.Resource{configmaps}},
			[]string{"API group carry.example.com", "widgets.carry.example.com is not a type green's plan lists"}, []string{"v1 ConfigMap team/doomed"}},
		{"the core group failed discovery", &plans.Plan{Resources: []plans.Resource{configmaps, widgets}, Findings: []plans.Finding{undiscovered("v1")}},
			[]string{"API group core", "1 objects, e.g. v1 ConfigMap team/doomed"}, []string{"carry.example.com/v1 Widget team/w1", "carry.example.com/v1 Widget team/w2"}},
		{"no plan of green", nil, []string{"green's plan is unknown"}, []string{}},
		{"everything listed cleanly", &plans.Plan{Resources: []plans.Resource{configmaps, widgets}}, nil,
			[]string{"carry.example.com/v1 Widget team/w1", "carry.example.com/v1 Widget team/w2", "v1 ConfigMap team/doomed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cb, err := PlanCarryBack(context.Background(), original, carried, snapshot.Mapping{}, time.Time{}, config.Planning{}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = cb.CheckDeletions(tc.green)
			switch {
			case len(tc.wantErr) == 0 && err != nil:
				t.Errorf("CheckDeletions: %v, want none", err)
			case len(tc.wantErr) > 0 && err == nil:
				t.Errorf("CheckDeletions passed, want an error naming %q", tc.wantErr)
			case err != nil:
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("CheckDeletions: %v\nwant it to name %q", err, w)
					}
				}
			}
			cb.SureDeletions(tc.green)
			if got := cb.DeletedIDs(); !slices.Equal(got, tc.wantDeleted) {
				t.Errorf("deletions left: %q, want %q", got, tc.wantDeleted)
			}
		})
	}
}
