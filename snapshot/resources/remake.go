package resources

import (
	"context"
	"fmt"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans/rules"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// dependent is an object a workload controls, and its resource: pods, or its rollout history's.
type dependent struct {
	gvr schema.GroupVersionResource
	obj *unstructured.Unstructured
}

// dependentsOf lists what a workload made again keeps through an orphaning delete
// (rules.Rule.RemakeOrphans): the pods and rollout-history objects it controls. Those the new
// workload must not adopt are deleted before it is made (dropFormer).
func (rs *restorer) dependentsOf(ctx context.Context, gr string, live *unstructured.Unstructured) ([]dependent, error) {
	selector, ok := kube.PodSelector(live)
	if !ok {
		return nil, nil
	}
	kinds := []schema.GroupVersionResource{kube.PodsGVR}
	if h := rules.For(gr).RolloutHistory; h != nil {
		kinds = append(kinds, schema.ParseGroupResource(h.In).WithVersion("v1")) // apps/v1's ReplicaSets and ControllerRevisions
	}
	var out []dependent
	for _, gvr := range kinds {
		list, err := rs.client(gvr, live.GetNamespace()).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
		if err != nil {
			return nil, fmt.Errorf("list the %s of %s %s: %w", gvr.Resource, live.GetKind(), live.GetName(), err)
		}
		for i := range list.Items {
			if ref := metav1.GetControllerOf(&list.Items[i]); ref != nil && ref.UID == live.GetUID() {
				out = append(out, dependent{gvr: gvr, obj: &list.Items[i]})
			}
		}
	}
	return out, nil
}

// dropFormer deletes the former dependents that obj, of type gr and about to be made, must not
// adopt, each with its own dependents (a ReplicaSet's pods), and says which it could not delete:
// those it does not select (its selector changed: they would run on unowned), revisions the
// backup does not hold (the target's own history, which the backup's replaces: adopted, they
// would be numbered with it), and pods unless the type's rule keeps them
// (rules.Rule.RemakeAdoptsPods). sourceNS is obj's namespace in the backup.
func (rs *restorer) dropFormer(ctx context.Context, gr string, obj *unstructured.Unstructured, sourceNS string, former []dependent) []string {
	selector, ok := kube.PodSelector(obj)
	if !ok {
		selector = labels.Nothing()
	}
	var failed []string
	for _, dep := range former {
		d := dep.obj
		gvk := d.GroupVersionKind()
		adopted := rules.For(gr).RemakeAdoptsPods
		if dep.gvr != kube.PodsGVR { // a revision
			adopted = rs.archived[ownerKey(gvk.Group, gvk.Kind, sourceNS, d.GetName())]
		}
		if adopted && selector.Matches(labels.Set(d.GetLabels())) {
			continue // the new one adopts it
		}
		uid := d.GetUID()
		err := rs.client(dep.gvr, d.GetNamespace()).Delete(ctx, d.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		switch {
		case err == nil:
			rs.Log.Info("deleted what the object made again must not adopt", "object", d.GetKind()+" "+d.GetNamespace()+"/"+d.GetName(), "owner", obj.GetKind()+" "+obj.GetName())
		case !apierrors.IsNotFound(err) && !apierrors.IsConflict(err): // else gone already, or another object of its name
			failed = append(failed, d.GetKind()+" "+d.GetName()+": "+err.Error())
		}
	}
	return failed
}
