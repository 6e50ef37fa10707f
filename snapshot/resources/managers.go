package resources

import (
	"context"
	"encoding/json"
	"reflect"

	"github.com/ferrykube/ferry/snapshot"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
)

// keepManagers gives live, which the restore just made or wrote from backed (the backup's object),
// backed's field managers when server-side apply wrote it (a GitOps tool, Helm 4, kubectl apply
// --server-side). The create or apply made every field ferry's: the tool's next apply would
// neither remove what its configuration no longer holds (ferry would still own it) nor change a
// value without a conflict with "ferry". The API server takes a write of the managed fields alone
// as they are. Only the entries of the object's own version are kept (the target may not serve
// the others, an upgrade's), and not ferry's.
func (rs *restorer) keepManagers(ctx context.Context, client dynamic.ResourceInterface, id string, live *unstructured.Unstructured, backed map[string]any) {
	want := appliedManagers(backed, live.GetAPIVersion())
	if want == nil || reflect.DeepEqual(managerSets(live.GetManagedFields()), managerSets(want)) {
		return
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"managedFields": want}})
	if err == nil {
		err = retry.OnError(retry.DefaultBackoff, transient, func() error {
			_, err := client.Patch(ctx, live.GetName(), types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		})
	}
	if err != nil {
		rs.report.Add("objects", snapshot.StatusSkipped, id+" (field managers)",
			"restored with ferry as the manager of its fields, not the backup's (server-side apply's next write may conflict or keep what it drops): "+err.Error())
	}
}

// appliedManagers are obj's managed-fields entries of apiVersion, but ferry's own (a quiesce's, a
// carry-back's: what ferry wrote on the source is not the target's), or nil unless one of them is
// server-side apply's.
func appliedManagers(obj map[string]any, apiVersion string) []metav1.ManagedFieldsEntry {
	u := unstructured.Unstructured{Object: obj}
	var kept []metav1.ManagedFieldsEntry
	applied := false
	for _, e := range u.GetManagedFields() {
		if e.APIVersion != apiVersion || e.Manager == FieldManager {
			continue
		}
		kept = append(kept, e)
		applied = applied || e.Operation == metav1.ManagedFieldsOperationApply
	}
	if !applied {
		return nil
	}
	return kept
}

// managerSets are entries without their times: who manages which fields, how.
func managerSets(entries []metav1.ManagedFieldsEntry) []metav1.ManagedFieldsEntry {
	out := make([]metav1.ManagedFieldsEntry, len(entries))
	for i, e := range entries {
		e.Time = nil
		out[i] = e
	}
	return out
}
