package rules

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// APIServices register aggregated API servers. Those a chart installs beside its server (KEDA's
// external metrics, prometheus-adapter's custom metrics, a catalog's API) move with the namespace
// their Service is in, after it (autoscalers on the target would find no metrics without them);
// the API server's own (local, automanaged) never do, nor one whose server runs in the cluster's
// own namespace (metrics-server in kube-system: the target's own registers there).
func apiServiceRules() map[string]Rule {
	return map[string]Rule{"apiservices.apiregistration.k8s.io": {
		Wave:    WaveWebhooks,
		BoundTo: &Binding{Field: "service", What: "its server's Service"},
		Exclude: apiServerOwn,
		Prepare: func(obj map[string]any, namespace func(string) string) {
			if svc := nestedMap(obj, "spec", "service"); svc != nil {
				mapServiceNamespace(svc, namespace)
			}
		},
		// A Velero backup may hold the API server's own.
		Skip: apiServerOwn,
	}}
}

// apiServerOwn says why the API server registers an API service itself, or "": one it serves
// locally (no Service), or keeps (automanaged).
func apiServerOwn(obj map[string]any) string {
	if (&unstructured.Unstructured{Object: obj}).GetLabels()["kube-aggregator.kubernetes.io/automanaged"] != "" || nestedMap(obj, "spec", "service") == nil {
		return "registered by the target's API server itself"
	}
	return ""
}
