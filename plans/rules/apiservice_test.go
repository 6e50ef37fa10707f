package rules

import "testing"

func TestAPIService(t *testing.T) {
	runCases(t, []ruleCase{
		{"an automanaged API service in a Velero backup is skipped", "skip", "apiservices.apiregistration.k8s.io",
			`{"metadata":{"name":"v1.apps","labels":{"kube-aggregator.kubernetes.io/automanaged":"onstart"}}}`, "target's API server"},
		{"an aggregated server's is made", "skip", "apiservices.apiregistration.k8s.io", `{"metadata":{"name":"v1beta1.metrics.k8s.io"}}`, ""},
		{"its service follows", "prepare", "apiservices.apiregistration.k8s.io",
			`{"spec":{"service":{"name":"metrics","namespace":"team-a"}}}`, `{"spec":{"service":{"name":"metrics","namespace":"team-b"}}}`},
	})
}
