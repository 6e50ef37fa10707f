package rules

import "testing"

func TestDaemonSet(t *testing.T) {
	runCases(t, []ruleCase{
		{"daemon set's template generation", "normalize", "daemonsets.apps",
			`{"metadata":{"name":"d","annotations":{"deprecated.daemonset.template.generation":"3","kubernetes.io/change-cause":"v3"}}}`,
			`{"metadata":{"name":"d","annotations":{"kubernetes.io/change-cause":"v3"}}}`},
	})
}
