package rules

import "testing"

func TestNamespace(t *testing.T) {
	runCases(t, []ruleCase{
		{"kube-system namespace", "exclude", "namespaces", `{"metadata":{"name":"kube-system"}}`, "every cluster"},
		{"user namespace", "exclude", "namespaces", `{"metadata":{"name":"kubeflow"}}`, ""},
		{"default namespace as made", "exclude", "namespaces", `{"metadata":{"name":"default","labels":{"kubernetes.io/metadata.name":"default"}}}`, "every cluster"},
		{"default namespace given a mesh's injection", "exclude", "namespaces",
			`{"metadata":{"name":"default","labels":{"kubernetes.io/metadata.name":"default","istio-injection":"enabled"}}}`, ""},
		{"default namespace given an annotation", "exclude", "namespaces", `{"metadata":{"name":"default","annotations":{"linkerd.io/inject":"enabled"}}}`, ""},
		{"default namespace as OpenShift and Rancher give every namespace", "exclude", "namespaces",
			`{"metadata":{"name":"default","annotations":{"openshift.io/sa.scc.uid-range":"1000000000/10000","openshift.io/sa.scc.mcs":"s0:c1,c0","field.cattle.io/projectId":"c-x:p-y"},"labels":{"field.cattle.io/projectId":"p-y"}}}`, "every cluster"},
		{"a namespace loses what its cluster assigned it", "prepare", "namespaces",
			`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team-a","annotations":{"openshift.io/sa.scc.uid-range":"1000000000/10000","openshift.io/display-name":"Team A","lifecycle.cattle.io/create.namespace-auth":"true"},"labels":{"field.cattle.io/projectId":"p-y"}}}`,
			`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team-b","annotations":{"openshift.io/display-name":"Team A"}}}`},
		{"kube-system given labels still stays", "exclude", "namespaces", `{"metadata":{"name":"kube-system","labels":{"team":"platform"}}}`, "every cluster"},
		{"the target's default namespace gains the backup's settings", "merge", "namespaces",
			`{"want":{"metadata":{"name":"default","labels":{"kubernetes.io/metadata.name":"default","istio-injection":"enabled","team":"a"},"annotations":{"linkerd.io/inject":"enabled"}}},
			  "live":{"metadata":{"name":"default","labels":{"kubernetes.io/metadata.name":"default","team":"a","green":"own"}}}}`,
			`{"metadata":{"labels":{"istio-injection":"enabled"},"annotations":{"linkerd.io/inject":"enabled"}}}`},
		{"the target's default namespace has them", "merge", "namespaces",
			`{"want":{"metadata":{"name":"default","labels":{"istio-injection":"enabled"}}},"live":{"metadata":{"name":"default","labels":{"istio-injection":"enabled"}}}}`, `null`},
		{"another namespace on the target is not merged", "merge", "namespaces",
			`{"want":{"metadata":{"name":"kubeflow","labels":{"x":"y"}}},"live":{"metadata":{"name":"kubeflow"}}}`, `null`},
		{"namespace renamed with its label", "prepare", "namespaces",
			`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team-a","labels":{"kubernetes.io/metadata.name":"team-a","x":"y"}}}`,
			`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team-b","labels":{"kubernetes.io/metadata.name":"team-b","x":"y"}}}`},
	})
	if !SystemNamespace("default") || SystemNamespace("team-a") {
		t.Error("SystemNamespace: default is one, team-a is not")
	}
}
