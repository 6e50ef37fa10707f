package resources

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/plans"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
)

func TestHistoryOf(t *testing.T) {
	rs := func(name, rev, cause, owner string) map[string]any {
		return map[string]any{"metadata": map[string]any{"name": name,
			"annotations":     map[string]any{"deployment.kubernetes.io/revision": rev, "kubernetes.io/change-cause": cause},
			"ownerReferences": []any{map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": owner, "controller": true}}}}
	}
	cr := func(name string, rev any, owner, kind string) map[string]any {
		return map[string]any{"revision": rev, "metadata": map[string]any{"name": name,
			"ownerReferences": []any{map[string]any{"apiVersion": "apps/v1", "kind": kind, "name": owner, "controller": true}}}}
	}
	for _, tc := range []struct {
		name, gr, kind, owner string
		objs                  []map[string]any
		want                  []revision
	}{
		{"a Deployment's ReplicaSets by revision annotation", "replicasets.apps", "Deployment", "web",
			[]map[string]any{rs("web-c", "3", "v3", "web"), rs("web-a", "1", "v1", "web"), rs("other-b", "2", "", "other"), rs("web-b", "2", "v2", "web")},
			[]revision{{1, "web-a", "v1"}, {2, "web-b", "v2"}, {3, "web-c", "v3"}}},
		{"a DaemonSet's revisions, numbers as JSON or the API machinery decode them", "controllerrevisions.apps", "DaemonSet", "agent",
			[]map[string]any{cr("agent-2", float64(2), "agent", "DaemonSet"), cr("agent-1", int64(1), "agent", "DaemonSet"), cr("db-1", int64(1), "agent", "StatefulSet")},
			[]revision{{1, "agent-1", ""}, {2, "agent-2", ""}}},
		{"no history", "controllerrevisions.apps", "StatefulSet", "db", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := historyOf(tc.gr, tc.objs, tc.kind, tc.owner); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("historyOf = %v, want %v", got, tc.want)
			}
		})
	}
}

// A plan written before rollout history came first is restored in today's order.
func TestRestoreOrderOfAnOlderPlan(t *testing.T) {
	p := &plans.Plan{Resources: []plans.Resource{
		{Group: "apps", Version: "v1", Resource: "deployments", Wave: 4},
		{Group: "apps", Version: "v1", Resource: "replicasets", Wave: 4, OwnedBy: []string{"deployments.apps"}},
		{Version: "v1", Resource: "pods", Wave: 4, OwnedBy: []string{"replicasets.apps"}},
	}}
	order, err := restoreOrder(p, &Archive{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range order {
		got = append(got, r.GroupResource())
	}
	if want := []string{"replicasets.apps", "deployments.apps", "pods"}; !reflect.DeepEqual(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

func TestRenumber(t *testing.T) {
	for _, tc := range []struct {
		name, gr, expected, live, want string
	}{
		{"a revision the DaemonSet's controller numbered first", "controllerrevisions.apps",
			`{"metadata":{"name":"ds-1"},"revision":3,"data":{"x":1}}`, `{"metadata":{"name":"ds-1"},"revision":1,"data":{"x":1}}`, `{"revision":3}`},
		{"another template is not renumbered", "controllerrevisions.apps",
			`{"metadata":{"name":"ds-1"},"revision":3,"data":{"x":1}}`, `{"metadata":{"name":"ds-1"},"revision":1,"data":{"x":2}}`, ""},
		{"a ReplicaSet the Deployment's controller numbered first", "replicasets.apps",
			`{"metadata":{"name":"web-1","annotations":{"deployment.kubernetes.io/revision":"3","kubernetes.io/change-cause":"v3"}}}`,
			`{"metadata":{"name":"web-1","annotations":{"deployment.kubernetes.io/revision":"1","kubernetes.io/change-cause":"v3"}}}`,
			`{"metadata":{"annotations":{"deployment.kubernetes.io/revision":"3"}}}`},
		{"a ReplicaSet with another change-cause", "replicasets.apps",
			`{"metadata":{"name":"web-1","annotations":{"deployment.kubernetes.io/revision":"3","kubernetes.io/change-cause":"v3"}}}`,
			`{"metadata":{"name":"web-1","annotations":{"deployment.kubernetes.io/revision":"1","kubernetes.io/change-cause":"v1"}}}`, ""},
		{"numbered as in the backup: nothing to do", "controllerrevisions.apps",
			`{"metadata":{"name":"ds-1"},"revision":3,"data":{"x":1}}`, `{"metadata":{"name":"ds-1"},"revision":3,"data":{"x":1}}`, ""},
		{"other kinds", "configmaps", `{"data":{"a":"1"}}`, `{"data":{"a":"2"}}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(renumber(tc.gr, decode(t, tc.expected), decode(t, tc.live))); got != tc.want {
				t.Errorf("renumber = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestGoesOn(t *testing.T) {
	backup := []revision{{number: 1, name: "web-a"}, {number: 2, name: "web-b"}}
	next := append(slices.Clone(backup), revision{number: 3, name: "web-c"})
	for _, tc := range []struct {
		name string
		got  []revision
		last int64
		want bool
	}{
		{"the backup's, then the target's", next, 3, true},
		{"the backup's, then the target's, of a workload without a number", next, 0, true},
		{"the backup's, then one the workload is not at", next, 4, false},
		{"the backup's, then the target's, the workload read before its controller numbered it", next, 2, true},
		{"the backup's only", backup, 2, false},
		{"two more", append(slices.Clone(next), revision{number: 4, name: "web-d"}), 4, false},
		{"one of the backup's lost", []revision{{number: 2, name: "web-b"}, {number: 3, name: "web-c"}}, 3, false},
		{"renumbered", []revision{{number: 1, name: "web-a"}, {number: 3, name: "web-b"}, {number: 4, name: "web-c"}}, 4, false},
		{"the target's before the backup's", []revision{{number: 1, name: "web-a"}, {number: 2, name: "web-b"}, {number: 2, name: "web-c"}}, 2, false},
	} {
		if got := goesOn(backup, tc.got, tc.last); got != tc.want {
			t.Errorf("%s: goesOn = %v, want %v", tc.name, got, tc.want)
		}
	}
	if goesOn(nil, []revision{{number: 1, name: "web-a"}}, 1) {
		t.Error("a history the backup does not hold goes on from it")
	}
}

func TestGeneratedNamePrefix(t *testing.T) {
	for name, want := range map[string]string{
		"web": "web-", strings.Repeat("a", 49) + ".b" + strings.Repeat("c", 20): strings.Repeat("a", 49) + "-",
		"--": "ferry-", strings.Repeat("a", 49) + "é" + "x": strings.Repeat("a", 49) + "-",
	} {
		if got := generatedNamePrefix(name); got != want || len(got) > 51 {
			t.Errorf("generatedNamePrefix(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestAdmissionExplains: a difference is the target's admission's only where a dry run of the
// backup's create changed that field; a field the dry run drops (a schema that lacks it, a
// feature gate off), an owner reference, or a revision with no template changed are not.
func TestAdmissionExplains(t *testing.T) {
	deployment := func(image, revision string, extra map[string]any) map[string]any {
		obj := map[string]any{"metadata": map[string]any{"name": "web", "annotations": map[string]any{deploymentRevision: revision}},
			"spec": map[string]any{"replicas": int64(2), "template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "web", "image": image}}}}}}
		for k, v := range extra {
			obj["spec"].(map[string]any)[k] = v
		}
		return obj
	}
	backup := deployment("web:1.4", "1", map[string]any{"minReadySeconds": int64(5)})
	mirrored := deployment("mirror.example/web:1.4", "1", map[string]any{"minReadySeconds": int64(5)})
	for _, tc := range []struct {
		name                   string
		gr                     string
		made                   map[string]any
		live                   map[string]any
		explained, newRevision bool
	}{
		{"the admission's image, a new revision", "deployments.apps", mirrored, deployment("mirror.example/web:1.4", "2", map[string]any{"minReadySeconds": int64(5)}), true, true},
		{"the admission's image, another type", "replicasets.apps", mirrored, deployment("mirror.example/web:1.4", "1", map[string]any{"minReadySeconds": int64(5)}), true, false},
		{"a field the dry run drops", "deployments.apps", deployment("web:1.4", "1", nil), deployment("web:1.4", "1", nil), false, false},
		{"a change the dry run does not make", "deployments.apps", mirrored, deployment("mirror.example/web:1.4", "2", map[string]any{"minReadySeconds": int64(9)}), false, false},
		{"only a revision", "deployments.apps", backup, deployment("web:1.4", "2", map[string]any{"minReadySeconds": int64(5)}), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			explained, newRevision := admissionExplains(tc.gr, backup, tc.made, Compare(backup, tc.live))
			if explained != tc.explained || newRevision != tc.newRevision {
				t.Errorf("admissionExplains = %v, %v; want %v, %v", explained, newRevision, tc.explained, tc.newRevision)
			}
		})
	}
	owned := func(uid string) map[string]any {
		obj := deployment("mirror.example/web:1.4", "1", nil)
		obj["metadata"].(map[string]any)["ownerReferences"] = []any{map[string]any{"kind": "Platform", "name": "shop", "uid": uid}}
		return obj
	}
	if explained, _ := admissionExplains("replicasets.apps", owned("a"), owned("b"), []string{`metadata.ownerReferences[0].uid: backup "a", target "b"`}); explained {
		t.Error("an owner reference the restore could not link is taken for the admission's")
	}
}

// TestScaledByItsDeployment: a ReplicaSet that differs only in its replicas and its Deployment's
// annotations may be its Deployment's rollout's doing; any other difference, or owner, is not.
func TestScaledByItsDeployment(t *testing.T) {
	rs := func(kind string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "web-1", "namespace": "shop"}}}
		u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: "web", Controller: ptr.To(true)}})
		return u
	}
	for _, tc := range []struct {
		name  string
		gr    string
		live  *unstructured.Unstructured
		diffs []string
		want  string
	}{
		{"replicas", "replicasets.apps", rs("Deployment"), []string{"spec.replicas: backup 2, target 0", `metadata.annotations["deployment.kubernetes.io/desired-replicas"]: backup "2", target "3"`}, "apps/v1 Deployment shop/web"},
		{"its template", "replicasets.apps", rs("Deployment"), []string{"spec.replicas: backup 2, target 0", `spec.template.spec.containers[0].image: backup "a", target "b"`}, ""},
		{"another owner", "replicasets.apps", rs("StatefulSet"), []string{"spec.replicas: backup 2, target 0"}, ""},
		{"another type", "deployments.apps", rs("Deployment"), []string{"spec.replicas: backup 2, target 0"}, ""},
	} {
		if got := scaledByItsDeployment(tc.gr, tc.live, tc.diffs); got != tc.want {
			t.Errorf("%s: scaledByItsDeployment = %q, want %q", tc.name, got, tc.want)
		}
	}
}
