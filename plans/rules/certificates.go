package rules

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// Certificate requests never move; trust bundles do, but for the API server's own.
func certificateRules() map[string]Rule {
	return map[string]Rule{
		"certificatesigningrequests.certificates.k8s.io": {Wave: WaveRest, Never: "certificate requests are bound to the source cluster's signers"},
		"clustertrustbundles.certificates.k8s.io": {Wave: WaveRest, Exclude: func(obj map[string]any) string {
			if signer, _, _ := unstructured.NestedString(obj, "spec", "signerName"); signer == "kubernetes.io/kube-apiserver-serving" {
				return "published by the source cluster's API server for its own serving certificates"
			}
			return ""
		}},
	}
}
