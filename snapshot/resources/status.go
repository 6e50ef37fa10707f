package resources

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ferrykube/ferry/snapshot"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
)

// A custom resource's status moves with it. For a workflow, a pipeline run, a training job or a
// tuning experiment it is the record that the work is done (or how far it got): made without it,
// the object is new work to its controller on the target, which runs it again, with all it does
// (GPU hours, writes to systems outside the cluster). Built-in types' status is the target's own.

// statusPlace is where a type keeps its status on the target.
type statusPlace int

const (
	statusNotKept     statusPlace = iota // a built-in type: the target's controllers set it
	statusInObject                       // a custom resource without a status subresource
	statusSubresource                    // a custom resource with one: written after the create
)

var crdsGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// statusPlace says where the target keeps the status of gvr's objects, from its CRD (looked up
// once per type). A type no CRD serves is built in (or aggregated): its status is not restored.
func (rs *restorer) statusPlace(ctx context.Context, gvr schema.GroupVersionResource) (statusPlace, error) {
	rs.mu.Lock()
	place, ok := rs.statusPlaces[gvr]
	rs.mu.Unlock()
	if ok {
		return place, nil
	}
	place = statusNotKept
	crd, err := rs.Dynamic.Resource(crdsGVR).Get(ctx, gvr.Resource+"."+gvr.Group, metav1.GetOptions{})
	switch {
	case err == nil:
		place = statusInObject
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		for _, v := range versions {
			vm, _ := v.(map[string]any)
			if vm["name"] != gvr.Version {
				continue
			}
			if _, ok, _ := unstructured.NestedFieldNoCopy(vm, "subresources", "status"); ok {
				place = statusSubresource
			}
		}
	case apierrors.IsNotFound(err):
	default:
		return statusNotKept, fmt.Errorf("read the definition of %s: %w", gvr.GroupResource(), err)
	}
	rs.mu.Lock()
	rs.statusPlaces[gvr] = place
	rs.mu.Unlock()
	return place, nil
}

// restoredStatus is the status a backed-up object's new copy on the target takes, or nil when it
// has none. The generation its controller observed (status.observedGeneration, and each
// condition's) becomes the new object's, 1, where it was the source object's latest; where it
// was older, the controller had not seen the spec yet, and it is left out.
func restoredStatus(obj map[string]any) map[string]any {
	status, _ := obj["status"].(map[string]any)
	if len(status) == 0 {
		return nil
	}
	out, _ := runtime.DeepCopyJSONValue(status).(map[string]any)
	generation, _ := asInt(nestedMap(obj, "metadata")["generation"])
	observed := func(m map[string]any) {
		v, ok := m["observedGeneration"]
		if !ok {
			return
		}
		if n, ok := asInt(v); ok && generation > 0 && n == generation {
			m["observedGeneration"] = int64(1)
		} else {
			delete(m, "observedGeneration")
		}
	}
	observed(out)
	conditions, _ := out["conditions"].([]any)
	for _, c := range conditions {
		if cm, ok := c.(map[string]any); ok {
			observed(cm)
		}
	}
	return out
}

// asInt reads a JSON number as the archive's decoder or the API machinery gave it.
func asInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case int:
		return int64(n), true
	case float64:
		return int64(n), n == float64(int64(n))
	case json.Number:
		i, err := n.Int64()
		return i, err == nil
	}
	return 0, false
}

// writeStatus gives a custom resource just made on the target (live) the backup's status through
// its status subresource, again on a conflict (its controller may have written it meanwhile) or
// a transient failure.
func writeStatus(ctx context.Context, client dynamic.ResourceInterface, live *unstructured.Unstructured, status map[string]any) error {
	return retry.OnError(retry.DefaultBackoff, transient, func() error {
		obj := live.DeepCopy()
		obj.Object["status"] = runtime.DeepCopyJSONValue(status)
		_, err := client.UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: FieldManager})
		if apierrors.IsConflict(err) {
			if fresh, gerr := client.Get(ctx, live.GetName(), metav1.GetOptions{}); gerr == nil {
				live = fresh
			}
		}
		return err
	})
}

// giveStatus writes the backup's status (if any) to a custom resource of the target that has none
// yet, made by this restore or by one cut short before it wrote the status; one its controller on
// the target already gave a status is left alone. A refusal is a skipped item.
func (rs *restorer) giveStatus(ctx context.Context, client dynamic.ResourceInterface, id string, live *unstructured.Unstructured, status map[string]any) {
	if have, _ := live.Object["status"].(map[string]any); status == nil || len(have) > 0 {
		return
	}
	if err := writeStatus(ctx, client, live, status); err != nil {
		rs.report.Add("objects", snapshot.StatusSkipped, id+" (status)",
			"restored without its status ("+err.Error()+"): its controller takes it for new work")
	}
}
