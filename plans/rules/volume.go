package rules

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// PersistentVolumes come with the storage, lose their binding, have their storage class and their
// claim's namespace mapped, and are left for the target to provision anew when bound to a claim
// the backup restores (reprovisioned).
func volumeRules() map[string]Rule {
	return map[string]Rule{"persistentvolumes": {
		Wave:    WaveStorage,
		BoundTo: &Binding{Field: "claimRef", What: "a claim"},
		Normalize: func(obj map[string]any) {
			deleteAnnotations(nestedMap(obj, "metadata"), bindingAnnotations)
			if ref := nestedMap(obj, "spec", "claimRef"); ref != nil {
				delete(ref, "uid")
				delete(ref, "resourceVersion")
			}
		},
		StorageClasses: func(obj map[string]any) []map[string]any {
			// A volume of no class is one made by hand: the empty class's mapping gives claims a
			// class to be provisioned in, never the source's volume to them.
			if class, _ := nestedMap(obj, "spec")["storageClassName"].(string); class == "" {
				return nil
			}
			return []map[string]any{nestedMap(obj, "spec")}
		},
		Prepare: func(obj map[string]any, namespace func(string) string) {
			if ref := nestedMap(obj, "spec", "claimRef"); ref != nil {
				if ns, ok := ref["namespace"].(string); ok {
					ref["namespace"] = namespace(ns)
				}
			}
		},
		Recreated: func(obj map[string]any, claims map[string]bool, _ func(group, kind, namespace, name string) bool) bool {
			return reprovisioned(obj, claims)
		},
		Released: released,
	}}
}

// released says why a PersistentVolume bound to a claim the backup does not hold is not
// restored: it is one the source released when its claim was deleted (or one waiting for a claim
// not made yet). Made on the target it would be the source's storage waiting for that claim, and
// the first claim of that name made there (a chart installed again) would write into it.
func released(obj map[string]any, claims map[string]bool) string {
	ns, _, _ := unstructured.NestedString(obj, "spec", "claimRef", "namespace")
	name, _, _ := unstructured.NestedString(obj, "spec", "claimRef", "name")
	if name == "" || claims[ns+"/"+name] {
		return ""
	}
	return "bound to claim " + ns + "/" + name + ", which the backup does not hold: a volume the source released, whose storage the target's next claim of that name would take"
}

// reprovisioned reports whether a PersistentVolume is left for the target to provision anew: it is
// bound to a claim that the backup restores (the claim's contents move as files, and the source's
// volume, a path or disk of the source cluster, must never be reused by the target).
func reprovisioned(obj map[string]any, claims map[string]bool) bool {
	ns, _, _ := unstructured.NestedString(obj, "spec", "claimRef", "namespace")
	name, _, _ := unstructured.NestedString(obj, "spec", "claimRef", "name")
	return name != "" && claims[ns+"/"+name]
}
