package resources

import "github.com/ferrykube/ferry/plans"

// normalizeService drops what the source's API server allocated for a Service: its cluster IPs
// (but "None", which makes it headless), and the node ports no user chose (plans.ChosenNodePorts,
// read from the managed fields and the last-applied configuration, so it runs before those are
// dropped). Chosen node ports, loadBalancerIP, externalIPs and loadBalancerSourceRanges are the
// user's and move.
func normalizeService(obj, spec map[string]any) {
	if spec == nil {
		return
	}
	if spec["clusterIP"] != "None" {
		delete(spec, "clusterIP")
		delete(spec, "clusterIPs")
	}
	chosen, health := plans.ChosenNodePorts(obj)
	ports, _ := spec["ports"].([]any)
	for i, p := range ports {
		if pm, ok := p.(map[string]any); ok && !chosen[i] {
			delete(pm, "nodePort")
		}
	}
	if !health {
		delete(spec, "healthCheckNodePort")
	}
}

// withAllocatedPorts puts back into a live Service's normalized form the node ports the target
// allocated, so that a chosen port that changed is named with both values.
func withAllocatedPorts(norm, live map[string]any) {
	spec, liveSpec := nestedMap(norm, "spec"), nestedMap(live, "spec")
	if spec == nil || liveSpec == nil {
		return
	}
	ports, _ := spec["ports"].([]any)
	livePorts, _ := liveSpec["ports"].([]any)
	for i, p := range ports {
		if pm, ok := p.(map[string]any); ok && i < len(livePorts) {
			if n, ok := asMap(livePorts[i])["nodePort"]; ok {
				pm["nodePort"] = n
			}
		}
	}
	if n, ok := liveSpec["healthCheckNodePort"]; ok {
		spec["healthCheckNodePort"] = n
	}
}
