package rules

import "testing"

func TestRBAC(t *testing.T) {
	runCases(t, []ruleCase{
		{"bootstrap role", "exclude", "clusterroles.rbac.authorization.k8s.io", `{"metadata":{"name":"admin","annotations":{"rbac.authorization.kubernetes.io/autoupdate":"true"}}}`, "bootstrap RBAC"},
		{"bootstrap binding", "exclude", "clusterrolebindings.rbac.authorization.k8s.io", `{"metadata":{"name":"system:basic-user","annotations":{"rbac.authorization.kubernetes.io/autoupdate":"true"}}}`, "bootstrap RBAC"},
		{"user role", "exclude", "clusterroles.rbac.authorization.k8s.io", `{"metadata":{"name":"kubeflow-edit"}}`, ""},
		{"role binding subjects follow", "prepare", "rolebindings.rbac.authorization.k8s.io",
			`{"metadata":{"name":"rb","namespace":"team-b"},"subjects":[{"kind":"ServiceAccount","name":"s","namespace":"team-a"},{"kind":"User","name":"u"}]}`,
			`{"metadata":{"name":"rb","namespace":"team-b"},"subjects":[{"kind":"ServiceAccount","name":"s","namespace":"team-b"},{"kind":"User","name":"u"}]}`},
		{"cluster role binding subjects follow", "prepare", "clusterrolebindings.rbac.authorization.k8s.io",
			`{"metadata":{"name":"crb"},"subjects":[{"kind":"ServiceAccount","name":"s","namespace":"team-a"}]}`,
			`{"metadata":{"name":"crb"},"subjects":[{"kind":"ServiceAccount","name":"s","namespace":"team-b"}]}`},
	})
}
