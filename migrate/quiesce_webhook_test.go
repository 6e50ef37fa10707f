package migrate

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans/config"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
)

// TestWritersServingWebhooksStopLastAndStartFirst: Katib's controller serves the admission
// webhook that admits every change of an Experiment (failurePolicy Fail), and Kubeflow's preset
// scales it to zero before it annotates the Experiments. Stop annotates first, so the webhook
// still admits the change; Start scales the controller up first, and waits for its webhook to
// serve before it takes the annotation off.
func TestWritersServingWebhooksStopLastAndStartFirst(t *testing.T) {
	ctx := context.Background()
	experimentsGVR := schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1beta1", Resource: "experiments"}
	experiment := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment",
		"metadata": map[string]any{"name": "tune", "namespace": "shop"}}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		withWebhookLists(map[schema.GroupVersionResource]string{kube.PodsGVR: "PodList", deploymentsGVR: "DeploymentList", replicaSetsGVR: "ReplicaSetList", experimentsGVR: "ExperimentList"}),
		shopDeployment("katib-controller", 1), experiment)
	// The webhook: the controller's pods serve it once ready, the first request after it was
	// scaled up.
	var refused int
	warmingUp := false
	dyn.PrependReactor("patch", "experiments", func(clienttesting.Action) (bool, runtime.Object, error) {
		// The tracker, not the client: the fake holds its lock while a reactor runs.
		controller, err := dyn.Tracker().Get(deploymentsGVR, "shop", "katib-controller")
		if err != nil {
			return true, nil, err
		}
		replicas, _, _ := unstructured.NestedInt64(controller.(*unstructured.Unstructured).Object, "spec", "replicas")
		if replicas == 0 || warmingUp {
			warmingUp = false
			refused++
			return true, nil, apierrors.NewInternalError(errors.New(`failed calling webhook "validator.experiment.katib.kubeflow.org": no endpoints available for service "katib-controller"`))
		}
		return false, nil, nil
	})
	dyn.PrependReactor("patch", "deployments", func(clienttesting.Action) (bool, runtime.Object, error) {
		warmingUp = true // the next change of an Experiment comes before its pods are ready
		return false, nil, nil
	})
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	mapper.Add(schema.GroupVersionKind{Group: "kubeflow.org", Version: "v1beta1", Kind: "Experiment"}, meta.RESTScopeNamespace)
	// As Kubeflow's preset has them: the controller first.
	q := Quiescer{Dynamic: dyn, Mapper: mapper, Log: slog.New(slog.DiscardHandler), StopTimeout: time.Minute, AdmissionWait: 10 * time.Second, Rules: []config.QuiesceRule{
		{Resource: "deployments.apps", Namespace: "shop", Names: []string{"katib-controller"}, Action: ScaleToZero},
		{Resource: "experiments.kubeflow.org", Action: Annotate, Annotations: map[string]string{"ferry.dev/paused": "true"}},
	}}

	if _, err := q.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if refused > 0 {
		t.Errorf("Stop changed an Experiment while its webhook's server was stopped (%d refusals)", refused)
	}
	if ann := mustGet(t, dyn, experimentsGVR, "tune").GetAnnotations(); ann["ferry.dev/paused"] != "true" || ann[QuiescedAnnotation] == "" {
		t.Fatalf("the Experiment after Stop: annotations %v", ann)
	}
	if replicas, _, _ := unstructured.NestedInt64(mustGet(t, dyn, deploymentsGVR, "katib-controller").Object, "spec", "replicas"); replicas != 0 {
		t.Fatalf("katib-controller after Stop: %d replicas, want 0", replicas)
	}

	items, err := q.Start(ctx)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if len(items) != 2 || items[0].Name != "katib-controller" {
		t.Errorf("Start: %+v; want katib-controller started first, then the Experiment", items)
	}
	if refused != 1 {
		t.Errorf("Start's change of the Experiment was refused %d times, want once (before the webhook served)", refused)
	}
	if ann := mustGet(t, dyn, experimentsGVR, "tune").GetAnnotations(); len(ann) > 0 {
		t.Fatalf("the Experiment after Start: annotations %v, want none", ann)
	}
}
