package rules

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// systemNamespaces exist on every cluster; their Namespace objects do not move (their contents do).
var systemNamespaces = map[string]bool{"default": true, "kube-system": true, "kube-public": true, "kube-node-lease": true}

// SystemNamespace says whether every cluster has the namespace.
func SystemNamespace(name string) bool { return systemNamespaces[name] }

// clusterOwnNamespaces hold what each cluster runs for itself, set up for that cluster by its
// distribution: DNS, the service proxy, the network plugin, cloud and storage controllers and
// their settings (which name the cluster, its network, its API server).
var clusterOwnNamespaces = map[string]bool{"kube-system": true, "kube-public": true, "kube-node-lease": true}

// ClusterOwnNamespace says whether what lives in the namespace is each cluster's own: it moves
// only when the user names the namespace.
func ClusterOwnNamespace(name string) bool { return clusterOwnNamespaces[name] }

// ClusterOwnReason is why the contents of a cluster's own namespace do not move.
const ClusterOwnReason = "the cluster's own namespace: what runs there (DNS, the proxy, the network, cloud controllers) is set up for each cluster; name objects in include.objects, or the namespace in include.namespaces beside \"*\", to move them"

// Namespaces come before what they hold, the system ones stay, and a mapping renames them.
func namespaceRules() map[string]Rule {
	return map[string]Rule{"namespaces": {
		Wave: WaveNamespaces,
		Exclude: func(obj map[string]any) string {
			if systemNamespaces[(&unstructured.Unstructured{Object: obj}).GetName()] {
				return "every cluster has this namespace"
			}
			return ""
		},
		Prepare: func(obj map[string]any, namespace func(string) string) {
			u := unstructured.Unstructured{Object: obj}
			to := namespace(u.GetName())
			u.SetName(to)
			// The API server keeps this label equal to the name.
			if labels := u.GetLabels(); labels != nil {
				if _, ok := labels[namespaceNameLabel]; ok {
					labels[namespaceNameLabel] = to
					u.SetLabels(labels)
				}
			}
		},
	}}
}
