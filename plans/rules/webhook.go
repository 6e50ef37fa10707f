package rules

// Admission webhooks and policies go last, once what they admit is in place; a webhook's service,
// and the namespaces its selector picks by name, follow the namespace mapping.
func webhookRules() map[string]Rule {
	policies := Rule{Wave: WaveWebhooks}
	webhooks := Rule{Wave: WaveWebhooks, Prepare: func(obj map[string]any, namespace func(string) string) {
		hooks, _ := obj["webhooks"].([]any)
		for _, h := range hooks {
			if svc := nestedMap(asMap(h), "clientConfig", "service"); svc != nil {
				mapServiceNamespace(svc, namespace)
			}
			mapSelectedNamespaces(nestedMap(asMap(h), "namespaceSelector"), namespace)
		}
	}}
	out := same(webhooks, "mutatingwebhookconfigurations.admissionregistration.k8s.io", "validatingwebhookconfigurations.admissionregistration.k8s.io")
	for gr, r := range same(policies,
		"validatingadmissionpolicies.admissionregistration.k8s.io", "validatingadmissionpolicybindings.admissionregistration.k8s.io",
		"mutatingadmissionpolicies.admissionregistration.k8s.io", "mutatingadmissionpolicybindings.admissionregistration.k8s.io") {
		out[gr] = r
	}
	return out
}
