package rules

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// CRDs go first, each on its own, and are waited on until Established with their names accepted:
// their custom resources cannot be created before. A conversion webhook's service follows the
// namespace mapping: its server moves with its namespace, and every read or write of the
// resources in a version other than the stored one calls it.
func crdRules() map[string]Rule {
	return map[string]Rule{"customresourcedefinitions.apiextensions.k8s.io": {
		Wave: WaveCRDs,
		Prepare: func(obj map[string]any, namespace func(string) string) {
			if svc := nestedMap(obj, "spec", "conversion", "webhook", "clientConfig", "service"); svc != nil {
				mapRefNamespace(svc, namespace)
			}
		},
		Ready: func(obj map[string]any) bool {
			conds, _, _ := unstructured.NestedSlice(obj, "status", "conditions")
			return conditionTrue(conds, "Established") && conditionTrue(conds, "NamesAccepted")
		},
	}}
}
