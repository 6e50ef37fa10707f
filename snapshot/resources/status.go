package resources

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/ferrykube/ferry/internal/kube"
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

// statusFor is the status a backed-up object's new copy takes (restoredStatus) and where the
// target keeps it; nil when there is none.
func (rs *restorer) statusFor(ctx context.Context, gvr schema.GroupVersionResource, obj map[string]any) (map[string]any, statusPlace) {
	status := restoredStatus(obj, 1)
	if status == nil {
		return nil, statusNotKept
	}
	return status, rs.statusPlace(ctx, gvr)
}

// statusPlace says where the target keeps the status of gvr's objects, from its CRD, or the
// backup's when the target's cannot be read (looked up once per type). A type no CRD serves is
// built in (or aggregated): its status is not restored.
func (rs *restorer) statusPlace(ctx context.Context, gvr schema.GroupVersionResource) statusPlace {
	if !customGroup(gvr.Group) {
		return statusNotKept
	}
	rs.mu.Lock()
	place, ok := rs.statusPlaces[gvr]
	rs.mu.Unlock()
	if ok {
		return place
	}
	name := gvr.Resource + "." + gvr.Group
	var crd map[string]any
	if live, err := rs.Dynamic.Resource(crdsGVR).Get(ctx, name, metav1.GetOptions{}); err == nil {
		crd = live.Object
	} else {
		crd = rs.archivedCRD(name)
	}
	place = statusNotKept
	if crd != nil {
		place = statusInObject
		versions, _, _ := unstructured.NestedSlice(crd, "spec", "versions")
		for _, v := range versions {
			vm, _ := v.(map[string]any)
			if _, ok, _ := unstructured.NestedFieldNoCopy(vm, "subresources", "status"); ok && vm["name"] == gvr.Version {
				place = statusSubresource
			}
		}
	}
	rs.mu.Lock()
	rs.statusPlaces[gvr] = place
	rs.mu.Unlock()
	return place
}

// archivedCRD is the backup's CRD of that name, or nil.
func (rs *restorer) archivedCRD(name string) map[string]any {
	for _, e := range rs.archive.ByResource[crdResource] {
		if e.Name == name {
			if obj, err := rs.archive.Object(e); err == nil {
				return obj
			}
		}
	}
	return nil
}

// create makes obj on the target, with status when its type keeps it in the object. A status the
// target refuses there (a stricter schema, an admission webhook) does not keep the object from
// being made: it is made without, and the status is a skipped item.
func (rs *restorer) create(ctx context.Context, client dynamic.ResourceInterface, id string, obj *unstructured.Unstructured, status map[string]any, place statusPlace) (*unstructured.Unstructured, error) {
	if status == nil || place != statusInObject {
		return rs.createRetrying(ctx, client, obj)
	}
	withStatus := obj.DeepCopy() // obj stays as the backup's object is compared and updated
	withStatus.Object["status"] = runtime.DeepCopyJSONValue(status)
	live, err := rs.createRetrying(ctx, client, withStatus)
	// A quota's refusal is not the status's: made without it, finished work would run again.
	if (apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err)) && !kube.QuotaRefused(err) {
		if live, err2 := rs.createRetrying(ctx, client, obj); err2 == nil {
			rs.report.Add("objects", snapshot.StatusSkipped, id+" (status)", "restored without its status ("+err.Error()+"): its controller takes it for new work")
			return live, nil
		}
	}
	return live, err
}

// createRetrying makes obj on the target, trying again on a transient error, while a quota of
// its namespace is not counted yet (a Profile's controller made it a moment before), and while
// an admission webhook's server starts (admitted).
func (rs *restorer) createRetrying(ctx context.Context, client dynamic.ResourceInterface, obj *unstructured.Unstructured) (live *unstructured.Unstructured, err error) {
	err = rs.admitted(ctx, func() error {
		return kube.CreateCounted(ctx, func() error {
			return retry.OnError(retry.DefaultBackoff, transient, func() error {
				live, err = client.Create(ctx, obj, metav1.CreateOptions{FieldManager: FieldManager})
				return err
			})
		})
	})
	return live, err
}

// madeByFerry says whether a restore of ferry's made the object (its field manager created it).
func madeByFerry(live *unstructured.Unstructured) bool {
	for _, f := range live.GetManagedFields() {
		if f.Manager == FieldManager && f.Operation == metav1.ManagedFieldsOperationUpdate {
			return true
		}
	}
	return false
}

// restoredStatus is the status a backed-up object's copy on the target takes, or nil when it has
// none. The generation its controller observed (status.observedGeneration, and each condition's)
// becomes the copy's (1 for a new one) where it was the source object's latest; where it was
// older, the controller had not seen the spec yet, and it is left out.
func restoredStatus(obj map[string]any, copyGeneration int64) map[string]any {
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
			m["observedGeneration"] = copyGeneration
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

// writeStatus gives a custom resource on the target (live) the backup's status, all of it, where
// its type keeps it (through the status subresource, or in the object), again on a conflict or a
// transient failure. A conflict means its controller on the target acted first, taking it for
// new work: the backup's status is written over it all the same, so that the controller stops
// what it started.
func writeStatus(ctx context.Context, client dynamic.ResourceInterface, live *unstructured.Unstructured, status map[string]any, place statusPlace) error {
	update := client.UpdateStatus
	if place == statusInObject {
		update = func(ctx context.Context, obj *unstructured.Unstructured, opts metav1.UpdateOptions) (*unstructured.Unstructured, error) {
			return client.Update(ctx, obj, opts)
		}
	}
	return retry.OnError(retry.DefaultBackoff, transient, func() error {
		obj := live.DeepCopy()
		obj.Object["status"] = runtime.DeepCopyJSONValue(status)
		_, err := update(ctx, obj, metav1.UpdateOptions{FieldManager: FieldManager})
		if apierrors.IsConflict(err) {
			if fresh, gerr := client.Get(ctx, live.GetName(), metav1.GetOptions{}); gerr == nil {
				live = fresh
			}
		}
		return err
	})
}

// giveStatus writes the backup's status (if any) to a custom resource ferry made on the target that
// has none yet: made by this restore, or by one cut short before it wrote the status (one that
// already has a status is left alone). A refusal is a skipped item.
func (rs *restorer) giveStatus(ctx context.Context, client dynamic.ResourceInterface, id string, live *unstructured.Unstructured, status map[string]any) {
	if have, _ := live.Object["status"].(map[string]any); status == nil || len(have) > 0 {
		return
	}
	if err := writeStatus(ctx, client, live, status, statusSubresource); err != nil {
		rs.report.Add("objects", snapshot.StatusSkipped, id+" (status)",
			"restored without its status ("+err.Error()+"): its controller takes it for new work")
	}
}

// replaceStatus makes the status of a custom resource already on the target (live, named name)
// the backup's (obj's), when they differ: a replace makes the object the backup's, and for a
// carry-back, work that finished on green is finished on blue, where its controller would
// otherwise run it again after a rollback. The backup's status is left out where it has none
// (the target's controller may have written one since). A refusal is a skipped item.
func (rs *restorer) replaceStatus(ctx context.Context, client dynamic.ResourceInterface, id, name string, obj map[string]any, place statusPlace) {
	if place == statusNotKept || restoredStatus(obj, 1) == nil {
		return
	}
	live, err := client.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		rs.report.Add("objects", snapshot.StatusSkipped, id+" (status)", "its status could not be compared: "+err.Error())
		return
	}
	generation := live.GetGeneration()
	if sameJSON(live.Object["status"], restoredStatus(obj, generation)) {
		return
	}
	if place == statusInObject {
		generation++ // the update that writes it changes the object: its generation with it
	}
	if err := writeStatus(ctx, client, live, restoredStatus(obj, generation), place); err != nil {
		rs.report.Add("objects", snapshot.StatusSkipped, id+" (status)", "its status is not the backup's: writing it failed: "+err.Error())
	}
}

// sameJSON says whether two decoded JSON values are equal, whichever decoder gave their numbers.
func sameJSON(a, b any) bool {
	aj, aerr := json.Marshal(a)
	bj, berr := json.Marshal(b)
	return aerr == nil && berr == nil && string(aj) == string(bj)
}

// keepStatus puts back into a prepared object (which has neither) the status and generation of
// the object it was prepared from, for the restore that makes it (restoredStatus reads them, and
// its own preparing drops them again): a carry-back's work that finished on green stays finished.
func keepStatus(gr string, prepared, from map[string]any) {
	status, ok := from["status"]
	if !ok || !customGroup(schema.ParseGroupResource(gr).Group) {
		return
	}
	prepared["status"] = runtime.DeepCopyJSONValue(status)
	if generation, ok := nestedMap(from, "metadata")["generation"]; ok {
		if meta := nestedMap(prepared, "metadata"); meta != nil {
			meta["generation"] = generation
		}
	}
}

// customGroup says whether an API group may be a custom resource's: a CRD's group has a dot, the
// core group, apps, batch, policy and autoscaling have none.
func customGroup(group string) bool {
	return strings.Contains(group, ".")
}
