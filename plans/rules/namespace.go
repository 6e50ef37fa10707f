package rules

import (
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// systemNamespaces exist on every cluster; their Namespace objects do not move (their contents
// do), but for the settings someone gave the default namespace, which are added to the target's.
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
			u := unstructured.Unstructured{Object: obj}
			if systemNamespaces[u.GetName()] && !(u.GetName() == "default" && namespaceSettings(u)) {
				return "every cluster has this namespace"
			}
			return ""
		},
		// The target's default namespace gets the labels and annotations someone gave blue's: a
		// mesh's injection (istio-injection, linkerd.io/inject), Pod Security's levels, the labels
		// network policies select namespaces by. Without them the same workloads would run there
		// outside the mesh, or unguarded.
		Merge: func(want, live map[string]any) map[string]any {
			if (&unstructured.Unstructured{Object: want}).GetName() != "default" {
				return nil
			}
			if patch := metadataAdded(want, live); len(patch) > 0 {
				return patch
			}
			return nil
		},
		Prepare: func(obj map[string]any, namespace func(string) string) {
			u := unstructured.Unstructured{Object: obj}
			to := namespace(u.GetName())
			u.SetName(to)
			dropClusterAssigned(&u)
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

// namespaceSettings says whether someone gave the namespace labels (beyond the one the API server
// keeps equal to its name) or annotations, not counting what the cluster assigns.
func namespaceSettings(u unstructured.Unstructured) bool {
	for k := range u.GetAnnotations() {
		if !clusterAssigned(k) {
			return true
		}
	}
	for k := range u.GetLabels() {
		if k != namespaceNameLabel && !clusterAssigned(k) {
			return true
		}
	}
	return false
}

// clusterAssigned says whether a namespace's label or annotation is one its cluster gives every
// namespace for itself: OpenShift's ranges of user and group IDs and SELinux categories (the
// target allocates its own; the source's could overlap another namespace's there), Rancher's
// project and bookkeeping (the source's projects).
func clusterAssigned(key string) bool {
	return strings.HasPrefix(key, "openshift.io/sa.scc.") || strings.Contains(key, "cattle.io/")
}

// dropClusterAssigned removes what the namespace's cluster assigned it (clusterAssigned).
func dropClusterAssigned(u *unstructured.Unstructured) {
	for _, field := range []string{"labels", "annotations"} {
		m := nestedMap(u.Object, "metadata", field)
		for k := range m {
			if clusterAssigned(k) {
				delete(m, k)
			}
		}
		if m != nil && len(m) == 0 {
			delete(nestedMap(u.Object, "metadata"), field)
		}
	}
}
