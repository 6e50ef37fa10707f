package rules

import (
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Storage and snapshot classes come with the storage, before the claims that name them; ingress
// classes with everything else. Which class of each is the default, given to what names none, is
// each cluster's own choice (see DefaultMark). A class's driver and settings are fixed once made
// (a release that moves to another driver makes the class again): it is made again to change
// (Remake); what names it names it by name.
func storageClassRules() map[string]Rule {
	return map[string]Rule{
		"storageclasses.storage.k8s.io": classRule(WaveStorage, &DefaultMark{Annotations: []string{
			"storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class"}}),
		"volumesnapshotclasses.snapshot.storage.k8s.io": classRule(WaveStorage, &DefaultMark{Annotations: []string{"snapshot.storage.kubernetes.io/is-default-class"}}),
		"ingressclasses.networking.k8s.io":              classRule(WaveRest, &DefaultMark{Annotations: []string{"ingressclass.kubernetes.io/is-default-class"}}),
	}
}

// classRule is the rule of a type of class whose default is marked so.
func classRule(wave int, mark *DefaultMark) Rule {
	return Rule{Wave: wave, Default: mark, Normalize: mark.drop, Remake: remade}
}

// DefaultMark is how a type marks the object of it that a cluster gives to whatever names none: a
// storage class to claims without one, a priority class to pods. Which one that is stays each
// cluster's choice. The mark is no part of an object's content (Normalize drops it), and a
// restore marks an object as the backup did only on a target with no default of its own (with
// two, the API server gives the newest to every new claim, or refuses a second global priority).
type DefaultMark struct {
	Annotations []string // annotations set to "true"
	Field       string   // or a top-level boolean field (a PriorityClass's globalDefault)
}

// Marked says whether the object is marked as its type's default.
func (d *DefaultMark) Marked(obj map[string]any) bool {
	if d.Field != "" {
		marked, _, _ := unstructured.NestedBool(obj, d.Field)
		return marked
	}
	annotations := (&unstructured.Unstructured{Object: obj}).GetAnnotations()
	for _, a := range d.Annotations {
		if annotations[a] == "true" {
			return true
		}
	}
	return false
}

// Mark gives obj the mark that from carries.
func (d *DefaultMark) Mark(obj, from map[string]any) {
	if d.Field != "" {
		obj[d.Field] = true
		return
	}
	u := unstructured.Unstructured{Object: obj}
	annotations := u.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	for k, v := range (&unstructured.Unstructured{Object: from}).GetAnnotations() {
		if slices.Contains(d.Annotations, k) {
			annotations[k] = v
		}
	}
	u.SetAnnotations(annotations)
}

func (d *DefaultMark) drop(obj map[string]any) {
	if d.Field != "" {
		delete(obj, d.Field)
		return
	}
	if meta, ok := obj["metadata"].(map[string]any); ok {
		deleteAnnotations(meta, d.Annotations)
	}
}
