package rules

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// RBAC comes with identity and configuration, but for the bootstrap roles the target's API server
// keeps up to date; a binding's subjects follow the namespace mapping.
func rbacRules() map[string]Rule {
	roles := Rule{
		Wave: WaveConfig,
		Exclude: func(obj map[string]any) string {
			if (&unstructured.Unstructured{Object: obj}).GetAnnotations()["rbac.authorization.kubernetes.io/autoupdate"] == "true" {
				return "bootstrap RBAC the target's API server keeps up to date"
			}
			return ""
		},
	}
	bindings := roles
	bindings.Prepare = func(obj map[string]any, namespace func(string) string) {
		subjects, _ := obj["subjects"].([]any)
		for _, s := range subjects {
			if sm, ok := s.(map[string]any); ok {
				if ns, ok := sm["namespace"].(string); ok {
					sm["namespace"] = namespace(ns)
				}
			}
		}
	}
	out := same(roles, "clusterroles.rbac.authorization.k8s.io", "roles.rbac.authorization.k8s.io")
	for gr, r := range same(bindings, "clusterrolebindings.rbac.authorization.k8s.io", "rolebindings.rbac.authorization.k8s.io") {
		out[gr] = r
	}
	return out
}
