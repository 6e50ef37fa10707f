package rules

import "testing"

func TestAPIService(t *testing.T) {
	runCases(t, []ruleCase{
		{"an automanaged API service in a Velero backup is skipped", "skip", "apiservices.apiregistration.k8s.io",
			`{"metadata":{"name":"v1.apps","labels":{"kube-aggregator.kubernetes.io/automanaged":"onstart"}}}`, "target's API server"},
		{"a local one stays", "exclude", "apiservices.apiregistration.k8s.io", `{"metadata":{"name":"v1.ferry.example.com"},"spec":{"group":"ferry.example.com"}}`, "target's API server"},
		{"an aggregated server's moves", "exclude", "apiservices.apiregistration.k8s.io",
			`{"metadata":{"name":"v1beta1.external.metrics.k8s.io"},"spec":{"service":{"name":"keda-operator-metrics-apiserver","namespace":"keda"}}}`, ""},
		{"an aggregated server's is made", "skip", "apiservices.apiregistration.k8s.io",
			`{"metadata":{"name":"v1beta1.metrics.k8s.io"},"spec":{"service":{"name":"metrics","namespace":"monitoring"}}}`, ""},
		{"its service follows", "prepare", "apiservices.apiregistration.k8s.io",
			`{"spec":{"service":{"name":"metrics","namespace":"team-a"}}}`, `{"spec":{"service":{"name":"metrics","namespace":"team-b"}}}`},
	})
	if got := For("apiservices.apiregistration.k8s.io").BoundTo.Namespace(decode(t, `{"spec":{"service":{"name":"m","namespace":"keda"}}}`)); got != "keda" {
		t.Errorf("an API service is bound to namespace %q, want its Service's, keda", got)
	}
}
