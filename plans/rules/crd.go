package rules

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// CRDs go first, each on its own, and are waited on until Established with their names accepted:
// their custom resources cannot be created before.
func crdRules() map[string]Rule {
	return map[string]Rule{"customresourcedefinitions.apiextensions.k8s.io": {
		Wave: WaveCRDs,
		Ready: func(obj map[string]any) bool {
			conds, _, _ := unstructured.NestedSlice(obj, "status", "conditions")
			return conditionTrue(conds, "Established") && conditionTrue(conds, "NamesAccepted")
		},
	}}
}
