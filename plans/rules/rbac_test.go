package rules

import "testing"

func TestRBAC(t *testing.T) {
	runCases(t, []ruleCase{
		{"bootstrap role", "exclude", "clusterroles.rbac.authorization.k8s.io", `{"metadata":{"name":"admin","annotations":{"rbac.authorization.kubernetes.io/autoupdate":"true"}}}`, "bootstrap RBAC"},
		{"bootstrap binding", "exclude", "clusterrolebindings.rbac.authorization.k8s.io", `{"metadata":{"name":"system:basic-user","annotations":{"rbac.authorization.kubernetes.io/autoupdate":"true"}}}`, "bootstrap RBAC"},
		{"user role", "exclude", "clusterroles.rbac.authorization.k8s.io", `{"metadata":{"name":"kubeflow-edit"}}`, ""},
		{"an aggregated role's rules are the target's", "normalize", "clusterroles.rbac.authorization.k8s.io",
			`{"metadata":{"name":"kubeflow-edit"},"aggregationRule":{"clusterRoleSelectors":[{"matchLabels":{"a":"true"}}]},"rules":[{"verbs":["get"]}]}`,
			`{"aggregationRule":{"clusterRoleSelectors":[{"matchLabels":{"a":"true"}}]},"metadata":{"name":"kubeflow-edit"}}`},
		{"a role's rules are its own", "normalize", "clusterroles.rbac.authorization.k8s.io",
			`{"metadata":{"name":"r"},"rules":[{"verbs":["get"]}]}`, `{"metadata":{"name":"r"},"rules":[{"verbs":["get"]}]}`},
		{"role binding subjects follow", "prepare", "rolebindings.rbac.authorization.k8s.io",
			`{"metadata":{"name":"rb","namespace":"team-b"},"subjects":[{"kind":"ServiceAccount","name":"s","namespace":"team-a"},{"kind":"User","name":"u"}]}`,
			`{"metadata":{"name":"rb","namespace":"team-b"},"subjects":[{"kind":"ServiceAccount","name":"s","namespace":"team-b"},{"kind":"User","name":"u"}]}`},
		{"cluster role binding subjects follow", "prepare", "clusterrolebindings.rbac.authorization.k8s.io",
			`{"metadata":{"name":"crb"},"subjects":[{"kind":"ServiceAccount","name":"s","namespace":"team-a"}]}`,
			`{"metadata":{"name":"crb"},"subjects":[{"kind":"ServiceAccount","name":"s","namespace":"team-b"}]}`},
		{"a namespace's accounts as a group and as users follow", "prepare", "clusterrolebindings.rbac.authorization.k8s.io",
			`{"metadata":{"name":"crb"},"subjects":[{"kind":"Group","name":"system:serviceaccounts:team-a"},{"kind":"User","name":"system:serviceaccount:team-a:ci"},{"kind":"Group","name":"system:serviceaccounts"},{"kind":"User","name":"system:serviceaccount:other:ci"},{"kind":"Group","name":"team-a"}]}`,
			`{"metadata":{"name":"crb"},"subjects":[{"kind":"Group","name":"system:serviceaccounts:team-b"},{"kind":"User","name":"system:serviceaccount:team-b:ci"},{"kind":"Group","name":"system:serviceaccounts"},{"kind":"User","name":"system:serviceaccount:other:ci"},{"kind":"Group","name":"team-a"}]}`},
	})
}
