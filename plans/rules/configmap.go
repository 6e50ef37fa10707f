package rules

import (
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ConfigMaps come with identity and configuration, but for those the target's own components
// publish; one marked immutable is made again to change (Remake).
func configMapRules() map[string]Rule {
	return map[string]Rule{"configmaps": {
		Wave:   WaveConfig,
		Remake: remade,
		Exclude: func(obj map[string]any) string {
			u := unstructured.Unstructured{Object: obj}
			name, ns := u.GetName(), u.GetNamespace()
			if why := publishedEverywhere[name]; why != "" {
				return why
			}
			if ns == "kube-system" && (name == "extension-apiserver-authentication" || strings.HasPrefix(name, "kube-apiserver-")) {
				return "published by the source cluster's API server"
			}
			return ""
		},
	}}
}

// publishedEverywhere are the ConfigMaps a component of each cluster writes into every namespace,
// each holding that cluster's own certificate authority: the target's publish theirs (a copy of
// the source's would differ from it, or replace it and break the target's trust).
var publishedEverywhere = map[string]string{
	"kube-root-ca.crt":         "published into every namespace by the target's root-CA publisher",
	"istio-ca-root-cert":       "published into every namespace by the target's Istio control plane (istiod), with its mesh's root certificate",
	"openshift-service-ca.crt": "published into every namespace by the target's service CA operator",
}
