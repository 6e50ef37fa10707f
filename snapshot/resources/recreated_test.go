package resources

import "testing"

// TestOwnedByRecreatedPods: an object every owner of which is a pod its controller (in the
// backup) makes anew goes with that pod; one a pod run by hand owns, or owned by something else
// too, moves.
func TestOwnedByRecreatedPods(t *testing.T) {
	obj := func(apiVersion, kind, name string, owners ...map[string]any) map[string]any {
		refs := []any{}
		for _, o := range owners {
			refs = append(refs, o)
		}
		return map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": map[string]any{"namespace": "ops", "name": name, "ownerReferences": refs}}
	}
	ref := func(apiVersion, kind, name string, controller bool) map[string]any {
		return map[string]any{"apiVersion": apiVersion, "kind": kind, "name": name, "uid": "u", "controller": controller}
	}
	a := &Archive{ByResource: map[string][]Entry{
		"replicasets.apps": {{GroupResource: "replicasets.apps", Namespace: "ops", Name: "operator-1", Object: obj("apps/v1", "ReplicaSet", "operator-1")}},
		"pods": {
			{GroupResource: "pods", Namespace: "ops", Name: "operator-1-x", Object: obj("v1", "Pod", "operator-1-x", ref("apps/v1", "ReplicaSet", "operator-1", true))},
			{GroupResource: "pods", Namespace: "ops", Name: "toolbox", Object: obj("v1", "Pod", "toolbox")},
			{GroupResource: "pods", Namespace: "ops", Name: "orphan-y", Object: obj("v1", "Pod", "orphan-y", ref("apps/v1", "ReplicaSet", "gone", true))},
			{GroupResource: "pods", Namespace: "ops", Name: "orphan-z", Object: obj("v1", "Pod", "orphan-z", ref("apps/v1", "ReplicaSet", "gone", true), ref("v1", "ConfigMap", "settings", false))},
		},
		"configmaps": {{GroupResource: "configmaps", Namespace: "ops", Name: "settings", Object: obj("v1", "ConfigMap", "settings")}},
	}}
	archived := a.owners()
	for _, tc := range []struct {
		name string
		obj  map[string]any
		want bool
	}{
		{"a claim the operator's pod owns moves as claims do", obj("v1", "PersistentVolumeClaim", "data", ref("v1", "Pod", "operator-1-x", false)), false},
		{"a lock the operator's pod holds", obj("v1", "ConfigMap", "lock", ref("v1", "Pod", "operator-1-x", false)), true},
		{"what a pod run by hand owns", obj("v1", "ConfigMap", "state", ref("v1", "Pod", "toolbox", false)), false},
		{"a pod whose controller is not in the backup", obj("v1", "ConfigMap", "c", ref("v1", "Pod", "orphan-y", false)), false},
		{"a pod whose controller is not in the backup, another owner is", obj("v1", "ConfigMap", "c", ref("v1", "Pod", "orphan-z", false)), false},
		{"a pod not in the backup", obj("v1", "ConfigMap", "c", ref("v1", "Pod", "elsewhere", false)), false},
		{"owned by the pod and a ConfigMap", obj("v1", "ConfigMap", "c", ref("v1", "Pod", "operator-1-x", false), ref("v1", "ConfigMap", "settings", false)), false},
		{"no owner", obj("v1", "ConfigMap", "c"), false},
	} {
		gr := "configmaps"
		if tc.obj["kind"] == "PersistentVolumeClaim" {
			gr = "persistentvolumeclaims"
		}
		if got := recreated(gr, tc.obj, map[string]bool{}, archived, a); got != tc.want {
			t.Errorf("%s: recreated %v, want %v", tc.name, got, tc.want)
		}
	}
}
