package rules

import "testing"

func TestStatefulSet(t *testing.T) {
	runCases(t, []ruleCase{
		{"a StatefulSet's claim templates: classes mapped", "prepare", "statefulsets.apps",
			`{"metadata":{"name":"db","namespace":"team-b"},"spec":{"volumeClaimTemplates":[{"metadata":{"name":"data"},"spec":{"storageClassName":"gp3"}},{"metadata":{"name":"logs"},"spec":{}}]}}`,
			`{"metadata":{"name":"db","namespace":"team-b"},"spec":{"volumeClaimTemplates":[{"metadata":{"name":"data"},"spec":{"storageClassName":"standard"}},{"metadata":{"name":"logs"},"spec":{}}]}}`},
		{"a StatefulSet's claim templates lose their data source", "normalize", "statefulsets.apps",
			`{"spec":{"volumeClaimTemplates":[{"metadata":{"name":"data"},"spec":{"dataSource":{"apiGroup":"snapshot.storage.k8s.io","kind":"VolumeSnapshot","name":"seed"},"dataSourceRef":{"apiGroup":"snapshot.storage.k8s.io","kind":"VolumeSnapshot","name":"seed"}}}]}}`,
			`{"spec":{"volumeClaimTemplates":[{"metadata":{"name":"data"},"spec":{}}]}}`},
		{"replicas ready", "health", "statefulsets.apps", `{"spec":{"replicas":2},"status":{"readyReplicas":2}}`, "ok"},
		{"replicas not ready", "health", "statefulsets.apps", `{"spec":{"replicas":2},"status":{"readyReplicas":1}}`, "1 of 2 replicas ready"},
		{"one replica by default", "health", "statefulsets.apps", `{"spec":{},"status":{}}`, "0 of 1 replicas ready"},
	})
}
