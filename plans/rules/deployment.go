package rules

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// Deployments move with their revision (their ReplicaSets, the history, come first); with
// --skip-owned the ReplicaSets stay behind, so the revision starts anew on the target. A restored
// Deployment is healthy once Available. One whose selector changed (a chart that renamed its
// labels) is made again; it adopts the history the restore made, and the ReplicaSets it does not
// select or the backup does not hold (the target's own revisions) go first, with their pods.
func deploymentRules() map[string]Rule {
	return map[string]Rule{"deployments.apps": {
		Wave:           WaveRest,
		Remake:         remade,
		RemakeOrphans:  true,
		RolloutHistory: &RolloutHistory{Kind: "Deployment", In: "replicasets.apps"},
		SkipOwned: func(obj map[string]any) {
			deleteAnnotations(nestedMap(obj, "metadata"), []string{"deployment.kubernetes.io/revision"})
		},
		Health: func(obj map[string]any) (bool, string) {
			conds, _, _ := unstructured.NestedSlice(obj, "status", "conditions")
			return conditionTrue(conds, "Available"), "not Available"
		},
	}}
}
