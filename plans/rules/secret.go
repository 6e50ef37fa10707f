package rules

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// Secrets come with identity and configuration, with keyed digests; service account and bootstrap
// tokens stay with the cluster that signs them.
func secretRules() map[string]Rule {
	return map[string]Rule{"secrets": {
		Wave:   WaveConfig,
		Secret: true,
		Exclude: func(obj map[string]any) string {
			switch t, _, _ := unstructured.NestedString(obj, "type"); t {
			case "kubernetes.io/service-account-token":
				return "service account tokens are minted for the cluster that signs them"
			case "bootstrap.kubernetes.io/token":
				return "bootstrap tokens belong to the source cluster"
			}
			return ""
		},
		Skip: func(obj map[string]any) string {
			if t, _, _ := unstructured.NestedString(obj, "type"); t == "kubernetes.io/service-account-token" {
				return "a service account token: the target issues its own"
			}
			return ""
		},
	}}
}
