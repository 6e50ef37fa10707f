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
		{"policy's namespaces by name follow", "prepare", "validatingadmissionpolicies.admissionregistration.k8s.io",
			`{"spec":{"matchConstraints":{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"team-a"}}}}}`,
			`{"spec":{"matchConstraints":{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"team-b"}}}}}`},
		// Its parameters, where the binding names their namespace, are in the mapped namespace on
		// the target: left as it was, the binding finds none there and, as parameterNotFoundAction
		// Deny says, refuses whatever it matches.
		{"binding's parameters and namespaces follow", "prepare", "validatingadmissionpolicybindings.admissionregistration.k8s.io",
			`{"spec":{"policyName":"p","paramRef":{"name":"limits","namespace":"team-a","parameterNotFoundAction":"Deny"},"matchResources":{"namespaceSelector":{"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"In","values":["team-a"]}]}}}}`,
			`{"spec":{"policyName":"p","paramRef":{"name":"limits","namespace":"team-b","parameterNotFoundAction":"Deny"},"matchResources":{"namespaceSelector":{"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"In","values":["team-b"]}]}}}}`},
		{"mutating binding's parameters follow", "prepare", "mutatingadmissionpolicybindings.admissionregistration.k8s.io",
			`{"spec":{"policyName":"p","paramRef":{"name":"limits","namespace":"team-a"}}}`,
			`{"spec":{"policyName":"p","paramRef":{"name":"limits","namespace":"team-b"}}}`},
	})
}

func TestPolicyBindingsAreBoundToTheirParametersNamespace(t *testing.T) {
	for _, gr := range []string{"validatingadmissionpolicybindings.admissionregistration.k8s.io", "mutatingadmissionpolicybindings.admissionregistration.k8s.io"} {
		bound := For(gr).BoundTo
		if got := bound.Namespace(decode(t, `{"spec":{"paramRef":{"name":"limits","namespace":"team-a"}}}`)); got != "team-a" {
			t.Errorf("%s: bound to namespace %q, want its parameters' team-a", gr, got)
		}
		if got := bound.Namespace(decode(t, `{"spec":{"paramRef":{"selector":{}}}}`)); got != "" {
			t.Errorf("%s: parameters in the namespace of what is admitted: bound to namespace %q, want none", gr, got)
		}
	}
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
