package resources

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

var resourceQuotasGVR = schema.GroupVersionResource{Version: "v1", Resource: "resourcequotas"}

// raiseQuotas lets a restore that replaces the target's objects (a carry-back onto blue) make
// all the backup holds before the quotas are made equal to the backup's (rules.WaveQuotas): each
// quota of the backup that the target has is raised first to the larger of its own and the
// backup's limit, resource by resource. Green may have raised a quota and then made what only
// the raised one allows; blue's, still lower, would refuse that until its turn came. A restore
// broken off in between leaves the raised limits until it runs again.
func (rs *restorer) raiseQuotas(ctx context.Context) error {
	if rs.Existing != ExistingReplace {
		return nil
	}
	res := plans.Resource{Version: "v1", Resource: "resourcequotas", Kind: "ResourceQuota", Namespaced: true}
	for _, e := range rs.archive.ByResource["resourcequotas"] {
		if why, _ := rs.leftOut(res.Resource, e); why != "" || !rs.selected(res, e) || rs.clusterOwn(e) || rs.greensOwn(res.Resource, e) {
			continue // a quota the restore does not make equal to the backup's stays as it is
		}
		obj, err := rs.archive.Object(e)
		if err != nil {
			continue // the restore of the quota reports it
		}
		want := &unstructured.Unstructured{Object: rs.prepare("resourcequotas", obj)}
		client := rs.client(resourceQuotasGVR, want.GetNamespace())
		live, err := client.Get(ctx, want.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("resourcequota %s/%s on the target: %w", want.GetNamespace(), want.GetName(), err)
		}
		wantHard, _, _ := unstructured.NestedMap(want.Object, "spec", "hard")
		liveHard, _, _ := unstructured.NestedStringMap(live.Object, "spec", "hard")
		raised, ok := higherLimits(liveHard, wantHard)
		if !ok {
			continue
		}
		patch, err := json.Marshal(map[string]any{"spec": map[string]any{"hard": raised}})
		if err != nil {
			return err
		}
		if _, err := client.Patch(ctx, want.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
			return fmt.Errorf("raise resourcequota %s/%s on the target for the restore: %w", want.GetNamespace(), want.GetName(), err)
		}
		// The API server admits by the limits in the quota's status, which its controller
		// copies from the spec and counts anew: until then the old ones hold, and what is made
		// meanwhile races the controller's count.
		err = kube.PollSoon(ctx, 50*time.Millisecond, 500*time.Millisecond, quotaSyncWait, func(ctx context.Context) (bool, error) {
			live, err := client.Get(ctx, want.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, nil // read again at the next poll
			}
			counted, _, _ := unstructured.NestedStringMap(live.Object, "status", "hard")
			_, higher := higherLimits(counted, wantHard)
			return !higher, nil
		})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil { // what the old limits refuse meanwhile is a failed item of the report
			rs.Log.Warn("a quota raised for the restore was not counted by its controller in time", "quota", want.GetNamespace()+"/"+want.GetName(), "waited", quotaSyncWait)
		}
		rs.Log.Info("raised a quota until the restore's objects are made", "quota", want.GetNamespace()+"/"+want.GetName())
	}
	return nil
}

// quotaSyncWait bounds the wait for a raised quota's controller.
const quotaSyncWait = 30 * time.Second

// higherLimits are the limits of wantHard that are above liveHard's (or that it lacks), as a
// merge patch of spec.hard; ok is false when there are none. A limit that does not parse is left.
func higherLimits(liveHard map[string]string, wantHard map[string]any) (map[string]any, bool) {
	raised := map[string]any{}
	for name, v := range wantHard {
		w, err := resource.ParseQuantity(fmt.Sprint(v))
		if err != nil {
			continue
		}
		l, has := liveHard[name]
		if has {
			if lq, err := resource.ParseQuantity(l); err != nil || lq.Cmp(w) >= 0 {
				continue
			}
		}
		raised[name] = w.String()
	}
	return raised, len(raised) > 0
}

// quotaCharges says whether namespace ns on the target has a ResourceQuota (read once per
// namespace; one that cannot be read counts as one). There the API server charges the quota for
// a create before it finds the name taken, and keeps the charge until the quota's controller
// counts anew (minutes later): a restore onto existing objects would fill the quota with them and
// have what is really new refused. Objects there are looked up before they are made.
func (rs *restorer) quotaCharges(ctx context.Context, ns string) bool {
	if ns == "" {
		return false
	}
	rs.mu.Lock()
	has, known := rs.quotas[ns]
	rs.mu.Unlock()
	if known {
		return has
	}
	list, err := rs.client(resourceQuotasGVR, ns).List(ctx, metav1.ListOptions{Limit: 1})
	has = err != nil || len(list.Items) > 0
	rs.mu.Lock()
	rs.quotas[ns] = has
	rs.mu.Unlock()
	return has
}
