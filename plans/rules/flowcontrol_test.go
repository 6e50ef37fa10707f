package rules

import "testing"

func TestFlowControl(t *testing.T) {
	runCases(t, []ruleCase{
		{"a default flow schema", "exclude", "flowschemas.flowcontrol.apiserver.k8s.io", `{"metadata":{"name":"global-default","annotations":{"apf.kubernetes.io/autoupdate-spec":"true"}}}`, "API priority and fairness defaults"},
		{"a user's priority level", "exclude", "prioritylevelconfigurations.flowcontrol.apiserver.k8s.io", `{"metadata":{"name":"batch"}}`, ""},
	})
}
