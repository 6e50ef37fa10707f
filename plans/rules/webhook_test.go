package rules

import "testing"

func TestWebhook(t *testing.T) {
	runCases(t, []ruleCase{
		{"webhook service follows", "prepare", "validatingwebhookconfigurations.admissionregistration.k8s.io",
			`{"metadata":{"name":"w"},"webhooks":[{"name":"a","clientConfig":{"service":{"name":"s","namespace":"team-a"}}},{"name":"b","clientConfig":{"url":"https://x"}}]}`,
			`{"metadata":{"name":"w"},"webhooks":[{"name":"a","clientConfig":{"service":{"name":"s","namespace":"team-b"}}},{"name":"b","clientConfig":{"url":"https://x"}}]}`},
		{"webhook's namespaces by name follow", "prepare", "mutatingwebhookconfigurations.admissionregistration.k8s.io",
			`{"metadata":{"name":"w"},"webhooks":[{"name":"a","namespaceSelector":{"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"NotIn","values":["team-a","kube-system"]}]}}]}`,
			`{"metadata":{"name":"w"},"webhooks":[{"name":"a","namespaceSelector":{"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"NotIn","values":["team-b","kube-system"]}]}}]}`},
		{"mutating webhook service follows", "prepare", "mutatingwebhookconfigurations.admissionregistration.k8s.io",
			`{"webhooks":[{"name":"a","clientConfig":{"service":{"name":"s","namespace":"team-a"}}}]}`,
			`{"webhooks":[{"name":"a","clientConfig":{"service":{"name":"s","namespace":"team-b"}}}]}`},
	})
}

func TestWebhooksAreBoundToTheirServersNamespace(t *testing.T) {
	bound := For("validatingwebhookconfigurations.admissionregistration.k8s.io").BoundTo
	for _, tc := range []struct {
		name, obj, want string
	}{
		{"served by a Service", `{"webhooks":[{"clientConfig":{"url":"https://policy.example.com"}},{"clientConfig":{"service":{"namespace":"kyverno","name":"svc"}}}]}`, "kyverno"},
		{"served at a URL outside", `{"webhooks":[{"clientConfig":{"url":"https://policy.example.com"}}]}`, ""},
		{"no webhooks", `{}`, ""},
	} {
		if got := bound.Namespace(decode(t, tc.obj)); got != tc.want {
			t.Errorf("%s: bound to namespace %q, want %q", tc.name, got, tc.want)
		}
	}
	if For("mutatingwebhookconfigurations.admissionregistration.k8s.io").BoundTo == nil {
		t.Error("mutating webhooks are not bound to their servers")
	}
}
