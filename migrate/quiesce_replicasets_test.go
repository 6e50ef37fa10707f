package migrate

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

// TestStartForgetsTheRecordOnReplicaSets: the Deployment controller copied the quiesce record
// onto the Deployment's ReplicaSets and never removes it; Start does, on that Deployment's only.
func TestStartForgetsTheRecordOnReplicaSets(t *testing.T) {
	rs := func(name, owner string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSet",
			"metadata": map[string]any{"name": name, "namespace": "kubeflow", "annotations": map[string]any{QuiescedAnnotation: `{"action":"scale-to-zero","replicas":2}`, "keep": "me"}}}}
		ctrl := true
		u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: owner, UID: types.UID("uid-" + owner), Controller: &ctrl}})
		return u
	}
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), rs("ml-pipeline-1", "ml-pipeline"), rs("other-1", "other"))
	deployment := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "ml-pipeline", "namespace": "kubeflow", "uid": "uid-ml-pipeline"}}}
	if err := (Quiescer{Dynamic: dyn}).forgetOnReplicaSets(context.Background(), deployment); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"ml-pipeline-1": false, "other-1": true} {
		got, err := dyn.Resource(replicaSetsGVR).Namespace("kubeflow").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, marked := got.GetAnnotations()[QuiescedAnnotation]; marked != want || got.GetAnnotations()["keep"] != "me" {
			t.Errorf("replica set %s: annotations %v, want the record kept %v and the rest as it was", name, got.GetAnnotations(), want)
		}
	}
}
