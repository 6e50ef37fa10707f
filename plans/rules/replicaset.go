package rules

import (
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// revisionKeys are a ReplicaSet's numbering: its revision, and the revision history its
// controller appends to as it renumbers.
var revisionKeys = []string{"deployment.kubernetes.io/revision", "deployment.kubernetes.io/revision-history"}

// ReplicaSets are a Deployment's rollout history: restored before it, so that its controller
// adopts them and keeps their revision numbers. The revision and change-cause annotations move;
// the replica counts are the controller's bookkeeping of the current scale. A ReplicaSet the
// controller numbered first on the target is renumbered to the backup's revision.
func replicaSetRules() map[string]Rule {
	return map[string]Rule{"replicasets.apps": {
		Wave:    WaveRest,
		History: true,
		Normalize: func(obj map[string]any) {
			if meta := nestedMap(obj, "metadata"); controlledBy(meta, "Deployment") {
				deleteAnnotations(meta, []string{"deployment.kubernetes.io/desired-replicas", "deployment.kubernetes.io/max-replicas"})
			}
		},
		Renumber: func(want, got map[string]any) (map[string]any, bool) {
			wantAnn, gotAnn := nestedMap(want, "metadata", "annotations"), nestedMap(got, "metadata", "annotations")
			if _, ok := wantAnn[revisionKeys[0]]; !ok {
				return nil, false
			}
			annotations := map[string]any{}
			for _, key := range revisionKeys {
				if wantAnn[key] != gotAnn[key] {
					annotations[key] = wantAnn[key] // nil removes it
				}
			}
			for _, m := range []map[string]any{want, got} {
				deleteAnnotations(nestedMap(m, "metadata"), revisionKeys)
			}
			patch := map[string]any{}
			if len(annotations) > 0 {
				patch["metadata"] = map[string]any{"annotations": annotations}
			}
			return patch, true
		},
		Revision: func(obj map[string]any) int64 {
			n, _ := strconv.ParseInt((&unstructured.Unstructured{Object: obj}).GetAnnotations()[revisionKeys[0]], 10, 64)
			return n
		},
	}}
}

// controlledBy reports whether the object's controlling owner is of the kind.
func controlledBy(meta map[string]any, kind string) bool {
	refs, _ := meta["ownerReferences"].([]any)
	for _, r := range refs {
		rm := asMap(r)
		if rm["controller"] == true && rm["kind"] == kind {
			return true
		}
	}
	return false
}
