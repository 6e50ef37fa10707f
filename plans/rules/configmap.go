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
			if name == "kube-root-ca.crt" {
				return "published into every namespace by the target's root-CA publisher"
			}
			if ns == "kube-system" && (name == "extension-apiserver-authentication" || strings.HasPrefix(name, "kube-apiserver-")) {
				return "published by the source cluster's API server"
			}
			return ""
		},
	}}
}
