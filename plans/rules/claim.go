package rules

import (
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// bindingAnnotations are written by the volume binder and provisioners of the source cluster.
var bindingAnnotations = []string{
	"pv.kubernetes.io/bind-completed", "pv.kubernetes.io/bound-by-controller",
	"volume.kubernetes.io/storage-provisioner", "volume.beta.kubernetes.io/storage-provisioner",
	"volume.kubernetes.io/selected-node",
}

// PersistentVolumeClaims come with the storage, lose their binding (the target binds them anew),
// have their storage class mapped, and are healthy once Bound.
func claimRules() map[string]Rule {
	return map[string]Rule{"persistentvolumeclaims": {
		Wave: WaveStorage,
		Normalize: func(obj map[string]any) {
			deleteAnnotations(nestedMap(obj, "metadata"), bindingAnnotations)
			delete(nestedMap(obj, "spec"), "volumeName")
		},
		StorageClasses: func(obj map[string]any) []map[string]any { return []map[string]any{nestedMap(obj, "spec")} },
		Health: func(obj map[string]any) (bool, string) {
			phase, _, _ := unstructured.NestedString(obj, "status", "phase")
			return phase == "Bound", "the claim is " + strings.ToLower(phase)
		},
	}}
}
