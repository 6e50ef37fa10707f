package rules

// LimitRanges come with identity and configuration, before the workloads whose pods they give
// defaults. ResourceQuotas come after everything a restore makes that they count (the admission
// webhooks, made last, count in no namespace): Kubernetes checks a quota only when an object is
// made, so a namespace may hold more than its quota allows (the quota was set, or lowered, after),
// and made first the quota would refuse part of it. A
// NetworkPolicy's peers that pick namespaces by name (the label the API server keeps equal to
// it) follow the namespace mapping.
func policyRules() map[string]Rule {
	out := map[string]Rule{"limitranges": {Wave: WaveConfig}, "resourcequotas": {Wave: WaveQuotas}}
	out["networkpolicies.networking.k8s.io"] = Rule{Wave: WaveRest, Prepare: mapPeerNamespaces}
	return out
}

// namespaceNameLabel is the label the API server keeps equal to a namespace's name.
const namespaceNameLabel = "kubernetes.io/metadata.name"

// mapPeerNamespaces maps the namespace names of a NetworkPolicy's peers' namespace selectors.
func mapPeerNamespaces(obj map[string]any, namespace func(string) string) {
	spec := nestedMap(obj, "spec")
	for _, rules := range [][2]string{{"ingress", "from"}, {"egress", "to"}} {
		list, _ := spec[rules[0]].([]any)
		for _, rule := range list {
			peers, _ := asMap(rule)[rules[1]].([]any)
			for _, peer := range peers {
				mapSelectedNamespaces(nestedMap(asMap(peer), "namespaceSelector"), namespace)
			}
		}
	}
}

// mapSelectedNamespaces maps the namespace names a label selector picks by namespaceNameLabel.
func mapSelectedNamespaces(selector map[string]any, namespace func(string) string) {
	if labels := nestedMap(selector, "matchLabels"); labels != nil {
		if name, ok := labels[namespaceNameLabel].(string); ok {
			labels[namespaceNameLabel] = namespace(name)
		}
	}
	exprs, _ := selector["matchExpressions"].([]any)
	for _, e := range exprs {
		em := asMap(e)
		if key, _ := em["key"].(string); key != namespaceNameLabel {
			continue
		}
		values, _ := em["values"].([]any)
		for i, v := range values {
			if name, ok := v.(string); ok {
				values[i] = namespace(name)
			}
		}
	}
}
