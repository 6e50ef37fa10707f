package rules

import (
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The names the API server gives a namespace's service accounts: the group of all of them, and
// each one as a user.
const (
	accountsGroup = "system:serviceaccounts:"
	accountUser   = "system:serviceaccount:"
)

// RBAC comes with identity and configuration, but for the bootstrap roles the target's API server
// keeps up to date; a binding's subjects follow the namespace mapping, and one bound to another
// role is made again: a binding's role does not change.
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
	bindings.Remake = remade
	bindings.Prepare = func(obj map[string]any, namespace func(string) string) {
		subjects, _ := obj["subjects"].([]any)
		for _, s := range subjects {
			sm, ok := s.(map[string]any)
			if !ok {
				continue
			}
			if ns, ok := sm["namespace"].(string); ok {
				sm["namespace"] = namespace(ns)
			}
			// A namespace's service accounts as the API server names them to authorizers.
			name, _ := sm["name"].(string)
			switch kind, _ := sm["kind"].(string); {
			case kind == "Group" && strings.HasPrefix(name, accountsGroup):
				sm["name"] = accountsGroup + namespace(strings.TrimPrefix(name, accountsGroup))
			case kind == "User" && strings.HasPrefix(name, accountUser):
				if ns, account, ok := strings.Cut(strings.TrimPrefix(name, accountUser), ":"); ok {
					sm["name"] = accountUser + namespace(ns) + ":" + account
				}
			}
		}
	}
	out := same(roles, "roles.rbac.authorization.k8s.io")
	clusterRoles := roles
	// An aggregated role's rules are what the target's controller makes of the roles that carry
	// its labels there, the target's to fill: not restored, not compared.
	clusterRoles.Normalize = func(obj map[string]any) {
		if _, ok := obj["aggregationRule"]; ok {
			delete(obj, "rules")
		}
	}
	out["clusterroles.rbac.authorization.k8s.io"] = clusterRoles
	for gr, r := range same(bindings, "clusterrolebindings.rbac.authorization.k8s.io", "rolebindings.rbac.authorization.k8s.io") {
		out[gr] = r
	}
	return out
}
