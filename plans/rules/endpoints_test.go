package rules

import "testing"

func TestEndpoints(t *testing.T) {
	runCases(t, []ruleCase{
		{"written by hand for a Service without a selector", "exclude", "endpoints",
			`{"metadata":{"namespace":"a","name":"external-db"},"subsets":[{"addresses":[{"ip":"192.0.2.10"}],"ports":[{"port":5432}]}]}`, ""},
		{"labeled by the endpoints controller", "exclude", "endpoints",
			`{"metadata":{"namespace":"a","name":"web","labels":{"endpoints.kubernetes.io/managed-by":"endpoint-controller"}},"subsets":[{"addresses":[{"ip":"10.0.0.5"}]}]}`, "endpoints controller"},
		{"of pods, from a cluster before the label", "exclude", "endpoints",
			`{"metadata":{"namespace":"a","name":"web"},"subsets":[{"notReadyAddresses":[{"ip":"10.0.0.5","targetRef":{"kind":"Pod","name":"web-1"}}]}]}`, "endpoints controller"},
		{"of nodes, by a monitoring operator", "exclude", "endpoints",
			`{"metadata":{"namespace":"kube-system","name":"kubelet"},"subsets":[{"addresses":[{"ip":"10.1.0.4","targetRef":{"kind":"Node","name":"node-a"}}]}]}`, "Node objects"},
		{"no addresses", "exclude", "endpoints", `{"metadata":{"namespace":"a","name":"idle"},"subsets":[]}`, "no addresses"},
		{"a leader election lock", "exclude", "endpoints",
			`{"metadata":{"namespace":"kube-system","name":"old-controller","annotations":{"control-plane.alpha.kubernetes.io/leader":"{}"}}}`, "leader election"},
		{"the API server's own", "exclude", "endpoints",
			`{"metadata":{"namespace":"default","name":"kubernetes"},"subsets":[{"addresses":[{"ip":"192.0.2.1"}]}]}`, "API server"},
		{"owned by a controller", "exclude", "endpoints",
			`{"metadata":{"namespace":"a","name":"x","ownerReferences":[{"apiVersion":"v1","kind":"Service","name":"x","uid":"u","controller":true}]},"subsets":[{"addresses":[{"ip":"192.0.2.3"}]}]}`, "owner's controller"},
		{"a slice written by hand", "exclude", "endpointslices.discovery.k8s.io",
			`{"metadata":{"namespace":"a","name":"legacy-1","labels":{"kubernetes.io/service-name":"legacy","endpointslice.kubernetes.io/managed-by":"staff"}},"addressType":"IPv4","endpoints":[{"addresses":["192.0.2.20"]}]}`, ""},
		{"the API server's own slice", "exclude", "endpointslices.discovery.k8s.io",
			`{"metadata":{"namespace":"default","name":"kubernetes","labels":{"kubernetes.io/service-name":"kubernetes"}},"addressType":"IPv4","endpoints":[{"addresses":["192.0.2.1"]}]}`, "API server"},
		{"a slice of the EndpointSlice controller", "exclude", "endpointslices.discovery.k8s.io",
			`{"metadata":{"namespace":"a","name":"web-abcde","labels":{"endpointslice.kubernetes.io/managed-by":"endpointslice-controller.k8s.io"}}}`, "EndpointSlice controllers"},
		{"a slice mirrored from Endpoints", "exclude", "endpointslices.discovery.k8s.io",
			`{"metadata":{"namespace":"a","name":"external-db-abcde","labels":{"endpointslice.kubernetes.io/managed-by":"endpointslicemirroring-controller.k8s.io"}}}`, "EndpointSlice controllers"},
		{"a slice another controller owns", "exclude", "endpointslices.discovery.k8s.io",
			`{"metadata":{"namespace":"a","name":"mesh-1","labels":{"endpointslice.kubernetes.io/managed-by":"mesh.example.com"},"ownerReferences":[{"apiVersion":"v1","kind":"Service","name":"mesh","uid":"u","controller":true}]}}`, "owner's controller"},
	})
}

// TestEndpointsInVeleroBackups: a Velero backup holds every Endpoints and EndpointSlice; a restore
// skips those the cluster made and makes those written by hand.
func TestEndpointsInVeleroBackups(t *testing.T) {
	runCases(t, []ruleCase{
		{"the controller's Endpoints", "skip", "endpoints",
			`{"metadata":{"namespace":"a","name":"web"},"subsets":[{"addresses":[{"ip":"10.0.0.5","targetRef":{"kind":"Pod","name":"web-1"}}]}]}`, "endpoints controller"},
		{"Endpoints written by hand", "skip", "endpoints",
			`{"metadata":{"namespace":"a","name":"external-db"},"subsets":[{"addresses":[{"ip":"192.0.2.10"}]}]}`, ""},
		{"the controller's slice", "skip", "endpointslices.discovery.k8s.io",
			`{"metadata":{"namespace":"a","name":"web-abcde","labels":{"endpointslice.kubernetes.io/managed-by":"endpointslice-controller.k8s.io"}}}`, "EndpointSlice controllers"},
		{"a slice written by hand", "skip", "endpointslices.discovery.k8s.io",
			`{"metadata":{"namespace":"a","name":"legacy-1","labels":{"endpointslice.kubernetes.io/managed-by":"staff"}}}`, ""},
	})
}
