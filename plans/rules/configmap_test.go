package rules

import "testing"

func TestConfigMap(t *testing.T) {
	runCases(t, []ruleCase{
		{"root CA", "exclude", "configmaps", `{"metadata":{"namespace":"kubeflow","name":"kube-root-ca.crt"}}`, "root-CA publisher"},
		{"the API server's", "exclude", "configmaps", `{"metadata":{"namespace":"kube-system","name":"extension-apiserver-authentication"}}`, "source cluster's API server"},
		{"user configmap", "exclude", "configmaps", `{"metadata":{"namespace":"kubeflow","name":"pipeline-install-config"}}`, ""},
	})
}
