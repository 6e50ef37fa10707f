package rules

import "testing"

func TestNetworkPolicy(t *testing.T) {
	runCases(t, []ruleCase{
		{"network policy peers by namespace name follow", "prepare", "networkpolicies.networking.k8s.io",
			`{"metadata":{"name":"np","namespace":"team-a"},"spec":{"ingress":[{"from":[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"team-a","tier":"x"}}},{"podSelector":{}}]}],"egress":[{"to":[{"namespaceSelector":{"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"In","values":["team-a","dns"]},{"key":"env","operator":"In","values":["team-a"]}]}}]}]}}`,
			`{"metadata":{"name":"np","namespace":"team-a"},"spec":{"ingress":[{"from":[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"team-b","tier":"x"}}},{"podSelector":{}}]}],"egress":[{"to":[{"namespaceSelector":{"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"In","values":["team-b","dns"]},{"key":"env","operator":"In","values":["team-a"]}]}}]}]}}`},
	})
}
