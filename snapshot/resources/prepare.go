package resources

import (
	"github.com/ferrykube/ferry/plans/rules"
	"github.com/ferrykube/ferry/snapshot"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Prepare is the form of a backed-up object that restore creates on the target and verify expects
// there: its normalized form (Normalize), with its namespace, the storage classes it names
// (rules.Rule.StorageClasses) and what its kind's rule maps (rules.Rule.Prepare: a namespace's
// name, binding subjects, webhook services, and what Velero's restore item actions drop, such as
// service-account token references) mapped. Owner references keep no UID; restore links them to
// the owners' new UIDs.
func Prepare(gr string, obj map[string]any, m snapshot.Mapping) map[string]any {
	out := Normalize(gr, obj)
	u := unstructured.Unstructured{Object: out}
	if ns := u.GetNamespace(); ns != "" {
		u.SetNamespace(m.Namespace(ns))
	}
	rule := rules.For(gr)
	if rule.StorageClasses != nil {
		for _, spec := range rule.StorageClasses(out) {
			mapStorageClass(spec, m)
		}
	}
	if rule.Prepare != nil {
		rule.Prepare(out, m.Namespace)
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
