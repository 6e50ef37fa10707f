package resources

import (
	"strings"

	"github.com/ferrykube/ferry/snapshot"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Prepare is the form of a backed-up object that restore creates on the target and verify expects
// there: its normalized form (Normalize), with namespaces and storage classes mapped, and with what
// Velero's restore item actions drop (service-account token references). Owner references keep no
// UID; restore links them to the owners' new UIDs.
func Prepare(gr string, obj map[string]any, m snapshot.Mapping) map[string]any {
	out := Normalize(gr, obj)
	u := unstructured.Unstructured{Object: out}
	if ns := u.GetNamespace(); ns != "" {
		u.SetNamespace(m.Namespace(ns))
	}
	spec, _ := out["spec"].(map[string]any)
	switch gr {
	case "namespaces":
		to := m.Namespace(u.GetName())
		u.SetName(to)
		// The API server keeps this label equal to the name.
		if labels := u.GetLabels(); labels != nil {
			if _, ok := labels["kubernetes.io/metadata.name"]; ok {
				labels["kubernetes.io/metadata.name"] = to
				u.SetLabels(labels)
			}
		}
	case "rolebindings.rbac.authorization.k8s.io", "clusterrolebindings.rbac.authorization.k8s.io":
		if subjects, ok := out["subjects"].([]any); ok {
			for _, s := range subjects {
				if sm, ok := s.(map[string]any); ok {
					if ns, ok := sm["namespace"].(string); ok {
						sm["namespace"] = m.Namespace(ns)
					}
				}
			}
		}
	case "persistentvolumeclaims":
		mapStorageClass(spec, m)
	case "statefulsets.apps":
		// Its claims are made by the target's controller from these templates.
		for _, t := range claimTemplates(out) {
			mapStorageClass(nestedMap(t, "spec"), m)
		}
	case "persistentvolumes":
		mapStorageClass(spec, m)
		if ref, ok := spec["claimRef"].(map[string]any); ok {
			if ns, ok := ref["namespace"].(string); ok {
				ref["namespace"] = m.Namespace(ns)
			}
		}
	case "serviceaccounts":
		// Token Secrets are made by the target for its own service accounts.
		if secrets, ok := out["secrets"].([]any); ok {
			kept := secrets[:0]
			for _, s := range secrets {
				if sm, ok := s.(map[string]any); ok {
					if name, _ := sm["name"].(string); strings.HasPrefix(name, u.GetName()+"-token-") {
						continue
					}
				}
				kept = append(kept, s)
			}
			if len(kept) == 0 {
				delete(out, "secrets")
			} else {
				out["secrets"] = kept
			}
		}
	case "mutatingwebhookconfigurations.admissionregistration.k8s.io", "validatingwebhookconfigurations.admissionregistration.k8s.io":
		if hooks, ok := out["webhooks"].([]any); ok {
			for _, h := range hooks {
				if svc := nestedMap(asMap(h), "clientConfig", "service"); svc != nil {
					if ns, ok := svc["namespace"].(string); ok {
						svc["namespace"] = m.Namespace(ns)
					}
				}
			}
		}
	case "apiservices.apiregistration.k8s.io":
		if svc := nestedMap(spec, "service"); svc != nil {
			if ns, ok := svc["namespace"].(string); ok {
				svc["namespace"] = m.Namespace(ns)
			}
		}
	}
	return out
}

// claimTemplates are a StatefulSet's volumeClaimTemplates, in place (not copies).
func claimTemplates(sts map[string]any) []map[string]any {
	list, _ := nestedMap(sts, "spec")["volumeClaimTemplates"].([]any)
	var out []map[string]any
	for _, t := range list {
		if tm := asMap(t); tm != nil {
			out = append(out, tm)
		}
	}
	return out
}

func mapStorageClass(spec map[string]any, m snapshot.Mapping) {
	if class, ok := spec["storageClassName"].(string); ok {
		spec["storageClassName"] = m.StorageClass(class)
	}
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// skipReason says why a backed-up object is not created on the target, as Velero's restore
// decides it (docs/format.md, Velero compatibility), or "".
func skipReason(gr string, obj map[string]any) string {
	u := unstructured.Unstructured{Object: obj}
	switch gr {
	case "pods":
		phase, _, _ := unstructured.NestedString(obj, "status", "phase")
		if phase == "Succeeded" || phase == "Failed" {
			return "the pod has finished (" + phase + ")"
		}
		if _, ok := u.GetAnnotations()["kubernetes.io/config.mirror"]; ok {
			return "a mirror pod: the target's kubelet makes its own"
		}
	case "jobs.batch":
		if t, _, _ := unstructured.NestedString(obj, "status", "completionTime"); t != "" {
			return "the job has completed"
		}
	case "secrets":
		if t, _, _ := unstructured.NestedString(obj, "type"); t == "kubernetes.io/service-account-token" {
			return "a service account token: the target issues its own"
		}
	case "apiservices.apiregistration.k8s.io":
		if u.GetLabels()["kube-aggregator.kubernetes.io/automanaged"] != "" {
			return "managed by the target's API server"
		}
	}
	return ""
}

// reprovisioned reports whether a PersistentVolume is left for the target to provision anew: it is
// bound to a claim that the backup restores (the claim's contents move as files, and the source's
// volume, a path or disk of the source cluster, must never be reused by the target).
func reprovisioned(obj map[string]any, claims map[string]bool) bool {
	ns, _, _ := unstructured.NestedString(obj, "spec", "claimRef", "namespace")
	name, _, _ := unstructured.NestedString(obj, "spec", "claimRef", "name")
	return name != "" && claims[ns+"/"+name]
}
