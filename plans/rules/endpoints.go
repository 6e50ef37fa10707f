package rules

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Endpoints and EndpointSlices that a cluster's controllers make from a Service's selector and its
// pods (or mirror from Endpoints) stay: the target's controllers make its own. Those someone wrote
// by hand for a Service without a selector (an external database, a host outside the cluster)
// move: no controller of the target makes them from anything else, and without them the Service
// leads nowhere. A restore of a Velero backup, which holds them all, skips the cluster's own.
func endpointsRules() map[string]Rule {
	return map[string]Rule{
		"endpoints": {Wave: WaveRest, Exclude: endpointsMadeByCluster, Skip: endpointsMadeByCluster, Counted: true,
			Unlisted: "the endpoints written by hand for Services without a selector"},
		"endpointslices.discovery.k8s.io": {Wave: WaveRest, Exclude: endpointSliceMadeByCluster, Skip: endpointSliceMadeByCluster, Counted: true,
			Unlisted: "the endpoint slices written by hand for Services without a selector"},
	}
}

const fromSelector = "made from a Service's selector and pods by the target's endpoints controller"

// endpointsMadeByCluster says why an Endpoints object is the source cluster's own, or "": the
// endpoints controller labels what it makes (Kubernetes 1.33 and later), and before that its
// addresses are of pods (targetRef) or it has none; addresses of other objects (a monitoring
// operator's of nodes), an old-style leader election lock and the API server's own are the
// source's too. Addresses written by hand name no object.
func endpointsMadeByCluster(obj map[string]any) string {
	u := unstructured.Unstructured{Object: obj}
	switch {
	case apiServersOwn(u):
		return "the target's API server publishes its own"
	case u.GetLabels()["endpoints.kubernetes.io/managed-by"] == "endpoint-controller":
		return fromSelector
	case u.GetAnnotations()["control-plane.alpha.kubernetes.io/leader"] != "":
		return "a leader election lock held by the source cluster's processes"
	case ownedByController(u):
		return "made by its owner's controller"
	}
	subsets, _ := obj["subsets"].([]any)
	addresses := 0
	for _, s := range subsets {
		for _, field := range []string{"addresses", "notReadyAddresses"} {
			list, _ := asMap(s)[field].([]any)
			for _, a := range list {
				if ref := asMap(asMap(a)["targetRef"]); ref["kind"] == "Pod" {
					return fromSelector
				} else if ref != nil {
					return "addresses of the source's " + fmt.Sprint(ref["kind"]) + " objects, kept by the controller that wrote them"
				}
				addresses++
			}
		}
	}
	if addresses == 0 {
		return "no addresses: the target's endpoints controller makes its own for a Service with a selector"
	}
	return ""
}

// endpointSliceControllers are the managed-by labels of the EndpointSlices Kubernetes makes: from
// a Service's selector and pods, and mirrored from Endpoints.
var endpointSliceControllers = map[string]bool{
	"endpointslice-controller.k8s.io":          true,
	"endpointslicemirroring-controller.k8s.io": true,
}

// endpointSliceMadeByCluster says why an EndpointSlice is the source cluster's own, or "".
func endpointSliceMadeByCluster(obj map[string]any) string {
	u := unstructured.Unstructured{Object: obj}
	switch {
	case apiServersOwn(u):
		return "the target's API server publishes its own"
	case endpointSliceControllers[u.GetLabels()["endpointslice.kubernetes.io/managed-by"]]:
		return "made from Services, pods and Endpoints by the target's EndpointSlice controllers"
	case ownedByController(u):
		return "made by its owner's controller"
	}
	return ""
}

// ownedByController says whether a controller owns the object (an owner reference with controller
// set): that controller makes it, on the target for the target's owner.
func ownedByController(u unstructured.Unstructured) bool {
	for _, ref := range u.GetOwnerReferences() {
		if ref.Controller != nil && *ref.Controller {
			return true
		}
	}
	return false
}

// apiServersOwn says whether the object is the API server's own Service "kubernetes" of the
// default namespace, or its endpoints, which it writes without a controller's label.
func apiServersOwn(u unstructured.Unstructured) bool {
	return u.GetNamespace() == "default" && u.GetName() == "kubernetes"
}
