package migrate

import (
	"context"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans/config"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

// TestMoversPassWebhooksWhoseServerIsStopped: Kubeflow's preset stops katib-controller, which
// serves the webhook that must admit every pod of a profile namespace. Stop gives that webhook
// alone a match condition that lets ferry's mover pods pass: not its Experiment webhook, not
// webhooks whose server runs (istiod's), nor those that let pods pass when their server is down,
// nor one called at a URL. A resumed Stop puts the condition back where something took it off.
// Start puts every webhook back as it was, and so does the started form a carry-back compares with.
func TestMoversPassWebhooksWhoseServerIsStopped(t *testing.T) {
	ctx := context.Background()
	controller := shopDeployment("katib-controller", 1)
	unstructured.SetNestedStringMap(controller.Object, map[string]string{"app": "katib-controller", "tier": "control"}, "spec", "template", "metadata", "labels")
	istiod := shopDeployment("istiod", 1)
	unstructured.SetNestedStringMap(istiod.Object, map[string]string{"app": "istiod"}, "spec", "template", "metadata", "labels")
	service := func(name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Service",
			"metadata": map[string]any{"name": name, "namespace": "shop"}, "spec": map[string]any{"selector": map[string]any{"app": name}}}}
	}
	webhook := func(name, service string, resources []any, extra map[string]any) map[string]any {
		w := map[string]any{"name": name, "clientConfig": map[string]any{"service": map[string]any{"namespace": "shop", "name": service}},
			"rules": []any{map[string]any{"apiGroups": []any{"", "kubeflow.org"}, "apiVersions": []any{"*"}, "resources": resources, "operations": []any{"CREATE"}}}}
		for k, v := range extra {
			w[k] = v
		}
		return w
	}
	theirs := map[string]any{"name": "not-a-trial", "expression": `!has(object.metadata.labels) || !("katib.kubeflow.org/trial" in object.metadata.labels)`}
	mutating := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
		"metadata": map[string]any{"name": "katib.kubeflow.org", "annotations": map[string]any{"owner": "katib"}},
		"webhooks": []any{
			webhook("defaulter.experiment.katib.kubeflow.org", "katib-controller", []any{"experiments"}, nil),
			webhook("mutator.pod.katib.kubeflow.org", "katib-controller", []any{"pods"}, map[string]any{
				"namespaceSelector": map[string]any{"matchLabels": map[string]any{"katib.kubeflow.org/metrics-collector-injection": "enabled"}},
				"matchConditions":   []any{theirs}}),
			webhook("mutator.all.katib.kubeflow.org", "katib-controller", []any{"*"}, map[string]any{"failurePolicy": "Fail"}),
		}}}
	validating := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
		"metadata": map[string]any{"name": "others"},
		"webhooks": []any{
			webhook("sidecar-injector.istio.io", "istiod", []any{"pods"}, nil),
			webhook("lenient.katib.kubeflow.org", "katib-controller", []any{"pods"}, map[string]any{"failurePolicy": "Ignore"}),
			map[string]any{"name": "url.example.com", "clientConfig": map[string]any{"url": "https://example.com/validate"},
				"rules": []any{map[string]any{"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "resources": []any{"pods"}, "operations": []any{"CREATE"}}}},
		}}}
	mutatingGVR, validatingGVR := webhookConfigurations[0], webhookConfigurations[1]
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		withWebhookLists(map[schema.GroupVersionResource]string{kube.PodsGVR: "PodList", deploymentsGVR: "DeploymentList", replicaSetsGVR: "ReplicaSetList"}),
		controller, istiod, service("katib-controller"), service("istiod"), mutating.DeepCopy(), validating.DeepCopy())
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	q := Quiescer{Dynamic: dyn, Mapper: mapper, Log: slog.New(slog.DiscardHandler), StopTimeout: time.Minute, Rules: []config.QuiesceRule{
		{Resource: "deployments.apps", Namespace: "shop", Names: []string{"katib-controller"}, Action: ScaleToZero},
	}, MoverUsers: func(context.Context) []string {
		return []string{"ferry@blue", "system:serviceaccount:ops:ferry"}
	}}
	get := func(gvr schema.GroupVersionResource, name string) *unstructured.Unstructured {
		t.Helper()
		obj, err := dyn.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return obj
	}
	conditions := func(obj *unstructured.Unstructured, i int) []any {
		webhooks, _, _ := unstructured.NestedSlice(obj.Object, "webhooks")
		c, _, _ := unstructured.NestedSlice(webhooks[i].(map[string]any), "matchConditions")
		return c
	}
	ours := moverCondition([]string{"ferry@blue", "system:serviceaccount:ops:ferry"})
	if want := `!(request.userInfo.username in ["ferry@blue", "system:serviceaccount:ops:ferry"] && request.resource.group == "" && request.resource.resource == "pods" && (!has(request.subResource) || request.subResource == "") && request.operation == "CREATE" && has(object.metadata.labels) && "app.kubernetes.io/name" in object.metadata.labels && object.metadata.labels["app.kubernetes.io/name"] == "ferry-mover")`; ours["expression"] != want {
		t.Errorf("the movers' condition is\n%s\nwant\n%s", ours["expression"], want)
	}
	want := [][]any{nil, {theirs, ours}, {ours}}
	checkStopped := func(when string) {
		t.Helper()
		stopped := get(mutatingGVR, "katib.kubeflow.org")
		if stopped.GetAnnotations()[QuiescedAnnotation] == "" || stopped.GetAnnotations()["owner"] != "katib" {
			t.Fatalf("Katib's webhooks %s: annotations %v, want the quiesce record beside their own", when, stopped.GetAnnotations())
		}
		for i, w := range want {
			if got := conditions(stopped, i); !reflect.DeepEqual(got, w) {
				t.Errorf("webhook %d of Katib %s: match conditions %v, want %v", i, when, got, w)
			}
		}
		if got := get(validatingGVR, "others"); !reflect.DeepEqual(got.Object, validating.Object) {
			t.Errorf("webhooks whose server runs, that let pods pass, or called at a URL were changed %s:\n%v", when, got.Object)
		}
		if got := startedForm(stopped.Object); !reflect.DeepEqual(got, mutating.Object) {
			t.Errorf("the started form of Katib's webhooks %s is\n%v\nwant them as they were\n%v", when, got, mutating.Object)
		}
	}

	items, err := q.Stop(ctx)
	if err != nil {
		t.Fatalf("Stop: %v", err)
	}
	checkStopped("after Stop")
	if last := items[len(items)-1]; last.Action != ExemptMovers || last.Name != "katib.kubeflow.org" {
		t.Errorf("Stop's last item is %+v, want Katib's webhooks letting the movers pass", last)
	}
	if got := stoppedLine(items, "writers stopped on blue"); got != "1 writers stopped on blue; webhook configurations whose pod webhooks ferry's movers pass while their server is stopped: 1" {
		t.Errorf("Stop's line: %q", got)
	}

	// A resumed Stop changes nothing more; after a GitOps tool put the webhooks back as its
	// repository holds them (the record stays), it gives them the condition again.
	if items, err := q.Stop(ctx); err != nil || webhookCount(items) != 0 {
		t.Fatalf("Stop again: %v, %+v; want nothing more done", err, items)
	}
	healed := get(mutatingGVR, "katib.kubeflow.org")
	healed.Object["webhooks"] = mutating.DeepCopy().Object["webhooks"]
	if _, err := dyn.Resource(mutatingGVR).Update(ctx, healed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Stop(ctx); err != nil {
		t.Fatalf("Stop after the webhooks were put back: %v", err)
	}
	checkStopped("after a Stop that found the condition gone")

	items, err = q.Start(ctx)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if got := get(mutatingGVR, "katib.kubeflow.org"); !reflect.DeepEqual(got.Object, mutating.Object) {
		t.Errorf("Katib's webhooks after Start:\n%v\nwant them as they were\n%v", got.Object, mutating.Object)
	}
	if writerCount(items) != 1 || webhookCount(items) != 1 {
		t.Errorf("Start did %+v; want one writer started and one configuration put back", items)
	}
	if items, err := q.Start(ctx); err != nil || len(items) != 0 {
		t.Errorf("Start again: %v, %+v; want nothing done", err, items)
	}
}

func TestRefusesPods(t *testing.T) {
	service := map[string]any{"service": map[string]any{"namespace": "kubeflow", "name": "katib-controller"}}
	rule := func(groups, resources, operations []any) []any {
		return []any{map[string]any{"apiGroups": groups, "resources": resources, "operations": operations}}
	}
	for _, tc := range []struct {
		name    string
		webhook map[string]any
		want    string
	}{
		{"pods created", map[string]any{"clientConfig": service, "rules": rule([]any{""}, []any{"pods"}, []any{"CREATE"})}, "kubeflow/katib-controller"},
		{"everything", map[string]any{"clientConfig": service, "rules": rule([]any{"*"}, []any{"*/*"}, []any{"*"}), "failurePolicy": "Fail"}, "kubeflow/katib-controller"},
		{"pods updated", map[string]any{"clientConfig": service, "rules": rule([]any{""}, []any{"pods"}, []any{"UPDATE"})}, ""},
		{"pods' subresource", map[string]any{"clientConfig": service, "rules": rule([]any{""}, []any{"pods/ephemeralcontainers"}, []any{"CREATE"})}, ""},
		{"another group's", map[string]any{"clientConfig": service, "rules": rule([]any{"kubeflow.org"}, []any{"*"}, []any{"CREATE"})}, ""},
		{"ignored when down", map[string]any{"clientConfig": service, "rules": rule([]any{""}, []any{"pods"}, []any{"CREATE"}), "failurePolicy": "Ignore"}, ""},
		{"at a URL", map[string]any{"clientConfig": map[string]any{"url": "https://example.com"}, "rules": rule([]any{""}, []any{"pods"}, []any{"CREATE"})}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, ok := refusesPods(tc.webhook); got != tc.want || ok != (tc.want != "") {
				t.Errorf("refusesPods = %q, %v; want %q", got, ok, tc.want)
			}
		})
	}
}

// withWebhookLists adds to a fake's list kinds the webhook configurations' a Stop that scales
// workloads to zero lists.
func withWebhookLists(kinds map[schema.GroupVersionResource]string) map[schema.GroupVersionResource]string {
	kinds[webhookConfigurations[0]] = "MutatingWebhookConfigurationList"
	kinds[webhookConfigurations[1]] = "ValidatingWebhookConfigurationList"
	return kinds
}
