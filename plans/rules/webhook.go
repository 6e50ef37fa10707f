package rules

// Admission webhooks and policies go last, once what they admit is in place; a webhook's service,
// a policy binding's parameters, and the namespaces their selectors pick by name, follow the
// namespace mapping.
func webhookRules() map[string]Rule {
	policies := Rule{Wave: WaveWebhooks}
	// A webhook whose server stays behind would refuse on the target whatever it matches (a
	// policy engine's, when a few tenants' namespaces move): it goes with its server's namespace.
	server := &Binding{What: "its server's Service", Find: func(obj map[string]any) string {
		hooks, _ := obj["webhooks"].([]any)
		for _, h := range hooks {
			if ns, _ := nestedMap(asMap(h), "clientConfig", "service")["namespace"].(string); ns != "" {
				return ns
			}
		}
		return ""
	}}
	webhooks := Rule{Wave: WaveWebhooks, BoundTo: server, Prepare: func(obj map[string]any, namespace func(string) string) {
		hooks, _ := obj["webhooks"].([]any)
		for _, h := range hooks {
			if svc := nestedMap(asMap(h), "clientConfig", "service"); svc != nil {
				mapRefNamespace(svc, namespace)
			}
			mapSelectedNamespaces(nestedMap(asMap(h), "namespaceSelector"), namespace)
		}
	}}
	out := same(webhooks, "mutatingwebhookconfigurations.admissionregistration.k8s.io", "validatingwebhookconfigurations.admissionregistration.k8s.io")
	policies.Prepare = func(obj map[string]any, namespace func(string) string) {
		mapSelectedNamespaces(nestedMap(obj, "spec", "matchConstraints", "namespaceSelector"), namespace)
	}
	for gr, r := range same(policies, "validatingadmissionpolicies.admissionregistration.k8s.io", "mutatingadmissionpolicies.admissionregistration.k8s.io") {
		out[gr] = r
	}
	// A binding's parameters named with their namespace must be there on the target, or the
	// binding finds none and (parameterNotFoundAction: Deny) refuses whatever it matches: it goes
	// with their namespace, and names it as mapped.
	bindings := Rule{Wave: WaveWebhooks, BoundTo: &Binding{What: "its parameters", Field: "paramRef"},
		Prepare: func(obj map[string]any, namespace func(string) string) {
			if ref := nestedMap(obj, "spec", "paramRef"); ref != nil {
				mapRefNamespace(ref, namespace)
			}
			mapSelectedNamespaces(nestedMap(obj, "spec", "matchResources", "namespaceSelector"), namespace)
		}}
	for gr, r := range same(bindings, "validatingadmissionpolicybindings.admissionregistration.k8s.io", "mutatingadmissionpolicybindings.admissionregistration.k8s.io") {
		out[gr] = r
	}
	return out
}
