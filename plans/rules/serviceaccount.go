package rules

import (
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ServiceAccounts come with identity and configuration; the default one stays (the target makes
// its own), and references to token Secrets go (the target makes those for its own accounts).
func serviceAccountRules() map[string]Rule {
	return map[string]Rule{"serviceaccounts": {
		Wave: WaveConfig,
		Exclude: func(obj map[string]any) string {
			if (&unstructured.Unstructured{Object: obj}).GetName() == "default" {
				return "the target's controller manager creates it in every namespace"
			}
			return ""
		},
		Prepare: func(obj map[string]any, _ func(string) string) {
			secrets, ok := obj["secrets"].([]any)
			if !ok {
				return
			}
			name := (&unstructured.Unstructured{Object: obj}).GetName()
			kept := secrets[:0]
			for _, s := range secrets {
				if sm, ok := s.(map[string]any); ok {
					if ref, _ := sm["name"].(string); strings.HasPrefix(ref, name+"-token-") {
						continue
					}
				}
				kept = append(kept, s)
			}
			if len(kept) == 0 {
				delete(obj, "secrets")
			} else {
				obj["secrets"] = kept
			}
		},
	}}
}
