package traffic

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/plans/config"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

func testRoute(rules []any, accepted string, observed int64) *unstructured.Unstructured {
	r := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
		"metadata": map[string]any{"name": "app", "namespace": "front", "generation": int64(1)},
		"spec":     map[string]any{"parentRefs": []any{map[string]any{"name": "gw"}}, "rules": rules},
	}}
	if accepted != "" {
		unstructured.SetNestedSlice(r.Object, []any{map[string]any{"parentRef": map[string]any{"name": "gw"}, "controllerName": "x/y",
			"conditions": []any{map[string]any{"type": "Accepted", "status": accepted, "reason": "NotAllowedByListeners", "message": "no listener",
				"observedGeneration": observed, "lastTransitionTime": "2026-01-01T00:00:00Z"}}}}, "status", "parents")
	}
	return r
}

func ref(name string, weight ...int64) any {
	r := map[string]any{"name": name, "port": int64(80)}
	if len(weight) > 0 {
		r["weight"] = weight[0]
	}
	return r
}

func fakeGateway(t *testing.T, route *unstructured.Unstructured) (*gateway, *dynamicfake.FakeDynamicClient) {
	t.Helper()
	dc := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{httpRoutes: "HTTPRouteList"}, route)
	g := gatewayOn(dc, config.GatewayAPITraffic{Namespace: "front", Route: "app",
		BlueBackend: config.GatewayBackend{Name: "blue"}, GreenBackend: config.GatewayBackend{Name: "green", Port: 80}},
		Options{PollInterval: 10 * time.Millisecond}.withDefaults())
	return g, dc
}

func TestGatewayWeightsAndRestore(t *testing.T) {
	// Blue's weight is left to the default (1) and must come back unset.
	g, dc := fakeGateway(t, testRoute([]any{map[string]any{"backendRefs": []any{ref("blue"), ref("green", 0)}}}, "True", 1))
	ctx := context.Background()
	if err := g.Preflight(ctx); err != nil {
		t.Fatal(err)
	}
	if s, err := g.Current(ctx); err != nil || s != Green(0) {
		t.Fatalf("Current = %v, %v", s, err)
	}
	saved, err := g.Save(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Apply(ctx, Green(30)); err != nil {
		t.Fatal(err)
	}
	if s, _ := g.Current(ctx); s != Green(30) {
		t.Fatalf("after Apply: %v", s)
	}
	// The fake API server bumps no generation: 1 stays accepted, so the change counts as settled.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := g.WaitSettled(wctx, Green(30)); err != nil {
		t.Fatal(err)
	}
	if err := g.Restore(wctx, saved); err != nil {
		t.Fatal(err)
	}
	r, _ := dc.Resource(httpRoutes).Namespace("front").Get(ctx, "app", metav1.GetOptions{})
	rules, _, _ := unstructured.NestedSlice(r.Object, "spec", "rules")
	refs := rules[0].(map[string]any)["backendRefs"].([]any)
	if _, has := refs[0].(map[string]any)["weight"]; has || refs[1].(map[string]any)["weight"] != int64(0) {
		t.Fatalf("after Restore: backendRefs %v, want blue's weight unset again and green's 0", refs)
	}
}

func TestGatewayNamesWhatIsWrong(t *testing.T) {
	ctx := context.Background()
	g, _ := fakeGateway(t, testRoute([]any{map[string]any{"backendRefs": []any{ref("blue")}}, map[string]any{"backendRefs": []any{ref("green")}}}, "", 0))
	if err := g.Preflight(ctx); err == nil || !strings.Contains(err.Error(), "no rule has both backendRefs blue and green") {
		t.Errorf("blue and green in separate rules: %v", err)
	}
	g, _ = fakeGateway(t, testRoute([]any{map[string]any{"backendRefs": []any{ref("blue", 1), ref("green", 0)}}}, "False", 1))
	if err := g.WaitSettled(ctx, Green(0)); err == nil || !strings.Contains(err.Error(), "NotAllowedByListeners") {
		t.Errorf("a parent refusing the route: %v", err)
	}
	g, _ = fakeGateway(t, testRoute([]any{map[string]any{"backendRefs": []any{ref("blue", 1), ref("green", 0)}}}, "", 0))
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := g.WaitSettled(wctx, Green(0)); err == nil || !strings.Contains(err.Error(), "no parent reports a status") {
		t.Errorf("no controller: %v", err)
	}
}
