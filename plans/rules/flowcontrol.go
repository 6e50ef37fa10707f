package rules

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// API priority and fairness moves, but for the defaults the target's API server maintains.
func flowControlRules() map[string]Rule {
	return same(Rule{Wave: WaveRest, Exclude: func(obj map[string]any) string {
		if (&unstructured.Unstructured{Object: obj}).GetAnnotations()["apf.kubernetes.io/autoupdate-spec"] == "true" {
			return "API priority and fairness defaults the target's API server maintains"
		}
		return ""
	}}, "flowschemas.flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations.flowcontrol.apiserver.k8s.io")
}
