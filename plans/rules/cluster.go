package rules

// clusterRules are the types that never move: they describe the cluster itself, are its running
// processes' or its past, or are made anew by it. Types that belong to one installation's own
// tooling (a simulator's, an agent's) are for its ferry.yaml to exclude.
func clusterRules() map[string]Rule {
	out := map[string]Rule{}
	for gr, why := range map[string]string{
		"nodes":                               "nodes belong to the cluster they run in",
		"events":                              "events are a record of the source cluster's past",
		"events.events.k8s.io":                "events are a record of the source cluster's past",
		"leases.coordination.k8s.io":          "leases are held by the source cluster's running processes",
		"leasecandidates.coordination.k8s.io": "lease candidates are the source cluster's running processes",
		"csinodes.storage.k8s.io":             "CSI node records belong to the source cluster's nodes",
		"csistoragecapacities.storage.k8s.io": "storage capacity is published by the target's CSI drivers",
		"volumeattachments.storage.k8s.io":    "volume attachments belong to the source cluster's nodes",
		"ipaddresses.networking.k8s.io":       "service IP allocations are made anew by the target",
		"servicecidrs.networking.k8s.io":      "service CIDRs are the target cluster's own configuration",
		"componentstatuses":                   "component statuses describe the source cluster's control plane",
		"bindings":                            "bindings are an action, not stored objects",
	} {
		out[gr] = Rule{Wave: WaveRest, Never: why}
	}
	return out
}
