package rules

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// APIServices never move in ferry's backups: the target's API server and aggregated servers
// register their own. A Velero backup may hold them: the automanaged ones are skipped, and the
// others' service follows the namespace mapping.
func apiServiceRules() map[string]Rule {
	return map[string]Rule{"apiservices.apiregistration.k8s.io": {
		Wave:  WaveRest,
		Never: "API services are registered by the target's API server and aggregated servers",
		Prepare: func(obj map[string]any, namespace func(string) string) {
			if svc := nestedMap(obj, "spec", "service"); svc != nil {
				mapRefNamespace(svc, namespace)
			}
		},
		Skip: func(obj map[string]any) string {
			if (&unstructured.Unstructured{Object: obj}).GetLabels()["kube-aggregator.kubernetes.io/automanaged"] != "" {
				return "managed by the target's API server"
			}
			return ""
		},
	}}
}
