package rules

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// PersistentVolumes come with the storage, lose their binding, have their storage class and their
// claim's namespace mapped. One bound to a claim is never made on the target: the target
// provisions its own (reprovisioned), or, released by the source, it is skipped and listed
// (released). One bound to no claim (made by hand) is restored.
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

// reprovisioned reports whether a PersistentVolume is left for the target to provision anew: it is
// bound to a claim, and not one the source released. Its claim's contents move as files when the
// backup restores it; the target makes its own claim and volume for others (a pod's ephemeral
// volume); and the source's volume, a path or disk of the source cluster, must never be reused by
// the target.
func reprovisioned(obj map[string]any, claims map[string]bool) bool {
	name, _, _ := unstructured.NestedString(obj, "spec", "claimRef", "name")
	return name != "" && released(obj, claims) == ""
}

// released says why a PersistentVolume the source released (its claim deleted, the volume kept by
// its policy Retain) is not restored when the backup does not hold a claim of that name: made on
// the target it would be the source's storage waiting for that claim, and the first claim of
// that name made there (a chart installed again) would write into it.
func released(obj map[string]any, claims map[string]bool) string {
	ns, _, _ := unstructured.NestedString(obj, "spec", "claimRef", "namespace")
	name, _, _ := unstructured.NestedString(obj, "spec", "claimRef", "name")
	phase, _, _ := unstructured.NestedString(obj, "status", "phase")
	if name == "" || claims[ns+"/"+name] || phase != "Released" {
		return ""
	}
	return "released by the source: bound to claim " + ns + "/" + name + ", which the backup does not hold; on the target the source's storage would wait for the next claim of that name"
}
