package rules

import "testing"

func TestConfigMap(t *testing.T) {
	runCases(t, []ruleCase{
		{"root CA", "exclude", "configmaps", `{"metadata":{"namespace":"kubeflow","name":"kube-root-ca.crt"}}`, "root-CA publisher"},
		{"the API server's", "exclude", "configmaps", `{"metadata":{"namespace":"kube-system","name":"extension-apiserver-authentication"}}`, "source cluster's API server"},
		{"user configmap", "exclude", "configmaps", `{"metadata":{"namespace":"kubeflow","name":"pipeline-install-config"}}`, ""},
	})
}

// A ConfigMap or Secret marked immutable changes only by being made again.
func TestRemadeToChange(t *testing.T) {
	for _, tc := range []struct {
		gr   string
		obj  map[string]any
		want bool
	}{
		{"configmaps", map[string]any{"immutable": true}, true},
		{"configmaps", map[string]any{"immutable": false}, false},
		{"configmaps", map[string]any{}, false},
		{"secrets", map[string]any{"immutable": true}, true},
	} {
		if got := For(tc.gr).RemadeToChange(tc.obj); got != tc.want {
			t.Errorf("%s %v: remade to change %v, want %v", tc.gr, tc.obj, got, tc.want)
		}
	}
}
