package kube

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// PodsGVR is the resource of pods.
var PodsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// PodSelector is a workload's spec.selector as a label selector, unless it has none or an empty
// one (which would take every pod of the namespace for the workload's; a Job's selector, which
// the API server makes, is empty in a backed-up Job).
func PodSelector(obj *unstructured.Unstructured) (labels.Selector, bool) {
	raw, found, _ := unstructured.NestedMap(obj.Object, "spec", "selector")
	var ls metav1.LabelSelector
	if !found || runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &ls) != nil {
		return nil, false
	}
	sel, err := metav1.LabelSelectorAsSelector(&ls)
	if err != nil || sel.Empty() {
		return nil, false
	}
	return sel, true
}
