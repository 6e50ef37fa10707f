package rules

// Endpoints and EndpointSlices never move: the target's controllers rebuild them from its Services
// and Pods.
func endpointsRules() map[string]Rule {
	return map[string]Rule{
		"endpoints":                       {Wave: WaveRest, Never: "endpoints are rebuilt from Services and Pods by the target's controllers"},
		"endpointslices.discovery.k8s.io": {Wave: WaveRest, Never: "endpoint slices are rebuilt from Services and Pods by the target's controllers"},
	}
}
