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

// PersistentVolumeClaims come with the storage, lose their binding (the target binds them anew)
// and their data source, have their storage class mapped, and are healthy once Bound. A data
// source (a VolumeSnapshot, a claim cloned, a populator's object) says how the source cluster
// first filled the claim; on the target ferry fills it (its files, or its database's dump), and a
// provisioner given the source would wait for a snapshot or populator the target lacks, or clone
// files the claim has since deleted. Claims an operator's resource owns (CloudNativePG's) are
// made with the storage all the same: the volumes' restore fills them while the rest is made.
// A generic ephemeral volume's claim, which its pod owns, stays: scratch space, made and deleted
// with the pod, whose controller makes a new pod, with a claim of its own, on the target.
func claimRules() map[string]Rule {
	return map[string]Rule{"persistentvolumeclaims": {
		Wave:      WaveStorage,
		KeepsWave: true,
		Exclude:   ephemeralClaim,
		Skip:      ephemeralClaim,
		Normalize: func(obj map[string]any) {
			deleteAnnotations(nestedMap(obj, "metadata"), bindingAnnotations)
			spec := nestedMap(obj, "spec")
			delete(spec, "volumeName")
			dropDataSource(spec)
		},
		StorageClasses: func(obj map[string]any) []map[string]any { return []map[string]any{nestedMap(obj, "spec")} },
		Health: func(obj map[string]any) (bool, string) {
			phase, _, _ := unstructured.NestedString(obj, "status", "phase")
			return phase == "Bound", "the claim is " + strings.ToLower(phase)
		},
	}}
}

// ephemeralClaim says why a claim its pod controls (a generic ephemeral volume's) does not move.
func ephemeralClaim(obj map[string]any) string {
	for _, ref := range (&unstructured.Unstructured{Object: obj}).GetOwnerReferences() {
		if ref.Kind == "Pod" && ref.APIVersion == "v1" && ref.Controller != nil && *ref.Controller {
			return "a generic ephemeral volume of pod " + ref.Name + ": scratch space, made and deleted with its pod"
		}
	}
	return ""
}

// dropDataSource takes the data source out of a claim's spec (or a claim template's).
func dropDataSource(spec map[string]any) {
	delete(spec, "dataSource")
	delete(spec, "dataSourceRef")
}
