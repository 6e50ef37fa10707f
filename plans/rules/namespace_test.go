package rules

import "testing"

func TestNamespace(t *testing.T) {
	runCases(t, []ruleCase{
		{"kube-system namespace", "exclude", "namespaces", `{"metadata":{"name":"kube-system"}}`, "every cluster"},
		{"user namespace", "exclude", "namespaces", `{"metadata":{"name":"kubeflow"}}`, ""},
		{"namespace renamed with its label", "prepare", "namespaces",
			`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team-a","labels":{"kubernetes.io/metadata.name":"team-a","x":"y"}}}`,
			`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team-b","labels":{"kubernetes.io/metadata.name":"team-b","x":"y"}}}`},
	})
	if !SystemNamespace("default") || SystemNamespace("team-a") {
		t.Error("SystemNamespace: default is one, team-a is not")
	}
}
