package resources

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// TestMergedOverKeepsTheTargetsFinalizersAndOwners: the merge patch that stands in for a
// server-side apply keeps the finalizers and owner references the target's object has beside
// the backup's, as the apply would, and takes everything else from the backup's object.
func TestMergedOverKeepsTheTargetsFinalizersAndOwners(t *testing.T) {
	owner := func(uid string) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "owner-" + uid, UID: types.UID(uid)}
	}
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "batch/v1", "kind": "CronJob", "spec": map[string]any{"schedule": "0 3 * * *"}}}
	obj.SetName("report")
	obj.SetFinalizers([]string{"backup.example/keep"})
	obj.SetOwnerReferences([]metav1.OwnerReference{owner("a")})
	live := obj.DeepCopy()
	live.Object["spec"] = map[string]any{"schedule": "0 4 * * *"}
	live.SetFinalizers([]string{"target.example/guard", "backup.example/keep"})
	live.SetOwnerReferences([]metav1.OwnerReference{owner("b"), owner("a")})

	got := mergedOver(obj, live)
	if f := got.GetFinalizers(); !slices.Equal(f, []string{"backup.example/keep", "target.example/guard"}) {
		t.Errorf("finalizers %v, want the backup's and then the target's own", f)
	}
	var uids []types.UID
	for _, o := range got.GetOwnerReferences() {
		uids = append(uids, o.UID)
	}
	if !slices.Equal(uids, []types.UID{"a", "b"}) {
		t.Errorf("owners %v, want the backup's and then the target's own", uids)
	}
	if s, _, _ := unstructured.NestedString(got.Object, "spec", "schedule"); s != "0 3 * * *" {
		t.Errorf("schedule %q, want the backup's", s)
	}
	if f := obj.GetFinalizers(); len(f) != 1 {
		t.Errorf("mergedOver changed the backup's object: finalizers %v", f)
	}
}
