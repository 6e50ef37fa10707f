package rules

import "testing"

func TestConfigMap(t *testing.T) {
	runCases(t, []ruleCase{
		{"root CA", "exclude", "configmaps", `{"metadata":{"namespace":"kubeflow","name":"kube-root-ca.crt"}}`, "root-CA publisher"},
		{"Istio's mesh root", "exclude", "configmaps", `{"metadata":{"namespace":"kubeflow-user","name":"istio-ca-root-cert","labels":{"istio.io/config":"true"}}}`, "istiod"},
		{"OpenShift's service CA", "exclude", "configmaps", `{"metadata":{"namespace":"team-a","name":"openshift-service-ca.crt"}}`, "service CA operator"},
		{"the API server's", "exclude", "configmaps", `{"metadata":{"namespace":"kube-system","name":"extension-apiserver-authentication"}}`, "source cluster's API server"},
		{"user configmap", "exclude", "configmaps", `{"metadata":{"namespace":"kubeflow","name":"pipeline-install-config"}}`, ""},
	})
}
