package rules

import "testing"

func TestPriorityClass(t *testing.T) {
	runCases(t, []ruleCase{
		{"built in", "exclude", "priorityclasses.scheduling.k8s.io", `{"metadata":{"name":"system-node-critical"}}`, "built into every cluster"},
		{"a user's", "exclude", "priorityclasses.scheduling.k8s.io", `{"metadata":{"name":"batch-low"}}`, ""},
		{"the global default is the target's", "normalize", "priorityclasses.scheduling.k8s.io",
			`{"metadata":{"name":"normal"},"globalDefault":true,"value":1000}`, `{"metadata":{"name":"normal"},"value":1000}`},
	})
}
