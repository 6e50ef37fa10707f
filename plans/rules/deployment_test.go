package rules

import "testing"

func TestDeployment(t *testing.T) {
	runCases(t, []ruleCase{
		{"with --skip-owned the revision starts anew", "skipowned", "deployments.apps",
			`{"metadata":{"name":"d","namespace":"x","annotations":{"deployment.kubernetes.io/revision":"3","team":"a"}}}`,
			`{"metadata":{"name":"d","namespace":"x","annotations":{"team":"a"}}}`},
		{"available", "health", "deployments.apps", `{"status":{"conditions":[{"type":"Available","status":"True"}]}}`, "ok"},
		{"not available", "health", "deployments.apps", `{"status":{"conditions":[{"type":"Available","status":"False"}]}}`, "not Available"},
	})
	if For("deployments.apps").Normalize != nil {
		t.Error("a Deployment keeps its revision: nothing of it is normalized")
	}
}
