package rules

import "testing"

func TestCertificates(t *testing.T) {
	runCases(t, []ruleCase{
		{"the API server's serving bundle", "exclude", "clustertrustbundles.certificates.k8s.io", `{"spec":{"signerName":"kubernetes.io/kube-apiserver-serving"}}`, "its own serving certificates"},
		{"a user's bundle", "exclude", "clustertrustbundles.certificates.k8s.io", `{"spec":{"signerName":"example.com/signer"}}`, ""},
	})
}
