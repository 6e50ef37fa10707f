package resources

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestAppliedManagers(t *testing.T) {
	entry := func(manager, operation, apiVersion string) any {
		return map[string]any{"manager": manager, "operation": operation, "apiVersion": apiVersion, "fieldsType": "FieldsV1",
			"fieldsV1": map[string]any{"f:data": map[string]any{"f:mode": map[string]any{}}}, "time": "2026-12-06T10:00:00Z"}
	}
	object := func(entries ...any) map[string]any {
		return map[string]any{"apiVersion": "kubeflow.org/v1", "metadata": map[string]any{"name": "x", "managedFields": entries}}
	}
	for _, tc := range []struct {
		name string
		obj  map[string]any
		want []string // managers kept
	}{
		{"applied by a GitOps tool, updated by a controller", object(entry("gitops", "Apply", "kubeflow.org/v1"), entry("operator", "Update", "kubeflow.org/v1")), []string{"gitops", "operator"}},
		{"ferry's own quiesce and carry-back are not the target's", object(entry("gitops", "Apply", "kubeflow.org/v1"), entry("ferry", "Update", "kubeflow.org/v1"), entry("ferry", "Apply", "kubeflow.org/v1")), []string{"gitops"}},
		{"applied only by ferry", object(entry("ferry", "Apply", "kubeflow.org/v1")), nil},
		{"only updates: ownership does not decide an apply", object(entry("kubectl-create", "Update", "kubeflow.org/v1")), nil},
		{"an entry of a version the target may not serve goes", object(entry("gitops", "Apply", "kubeflow.org/v1"), entry("old", "Update", "kubeflow.org/v1beta1")), []string{"gitops"}},
		{"applied only in another version", object(entry("gitops", "Apply", "kubeflow.org/v1beta1")), nil},
		{"none", map[string]any{"metadata": map[string]any{"name": "x"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := appliedManagers(tc.obj, "kubeflow.org/v1")
			var managers []string
			for _, e := range got {
				managers = append(managers, e.Manager)
			}
			if len(managers) != len(tc.want) {
				t.Fatalf("kept %v, want %v", managers, tc.want)
			}
			for i := range managers {
				if managers[i] != tc.want[i] {
					t.Errorf("kept %v, want %v", managers, tc.want)
				}
			}
		})
	}
	now, later := metav1.Now(), metav1.Now()
	a := []metav1.ManagedFieldsEntry{{Manager: "gitops", Operation: metav1.ManagedFieldsOperationApply, Time: &now}}
	b := []metav1.ManagedFieldsEntry{{Manager: "gitops", Operation: metav1.ManagedFieldsOperationApply, Time: &later}}
	if managerSets(a)[0].Time != nil || a[0].Time == nil || len(managerSets(b)) != 1 {
		t.Error("managerSets drops the times of a copy, not of the entries")
	}
}
