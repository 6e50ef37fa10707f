package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/integration/testbed"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
)

const (
	undiscoveredNS    = "undiscovered"
	undiscoveredGroup = "undiscovered.ferry.test"
)

var (
	widgetsGVR     = schema.GroupVersionResource{Group: undiscoveredGroup, Version: "v1", Resource: "widgets"}
	apiServicesGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
)

// TestCarryBackKeepsWhatGreenDidNotList: blue's widgets (custom resources) move to green; then
// green's API group of widgets fails discovery (its APIService points at a service that does not
// exist), so green's plan lists none of them, with a warning. rollback --carry-back must not take
// them as deleted on green: it stops naming the group, and blue keeps its widgets (and the
// ConfigMap green really deleted, as nothing is applied).
func TestCarryBackKeepsWhatGreenDidNotList(t *testing.T) {
	green, _ := cutover(t)
	blue, blueKC := clients(t, "blue")
	greenKC, greenDyn, err := green.Clients()
	if err != nil {
		t.Fatal(err)
	}
	_, blueDyn, err := blue.Clients()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t.Cleanup(func() { removeUndiscovered(t, green, blue) })

	// Blue: the CRD, two widgets and a ConfigMap in a namespace of their own.
	if err := applyWidgetCRD(ctx, blue); err != nil {
		t.Fatal(err)
	}
	if _, err := blueKC.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: undiscoveredNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"w1", "w2"} {
		w := &unstructured.Unstructured{Object: map[string]any{"apiVersion": undiscoveredGroup + "/v1", "kind": "Widget",
			"metadata": map[string]any{"name": name, "namespace": undiscoveredNS}, "spec": map[string]any{"size": int64(3)}}}
		if _, err := blueDyn.Resource(widgetsGVR).Namespace(undiscoveredNS).Create(ctx, w, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := blueKC.CoreV1().ConfigMaps(undiscoveredNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	config := namespacesConfig(t, undiscoveredNS)
	url := backupMinIO(t, "carry-back-undiscovered")
	code, out, errOut := runFerry(t, "--storage", url, "migrate", "--from", "blue", "--to", "cutover", "-f", config, "--lease-ttl", testLeaseTTL.String())
	if code != 0 || !strings.Contains(out, "shifted") {
		t.Fatalf("ferry migrate exited %d, want 0 and shifted\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	id := runID(t, errOut)
	t.Cleanup(func() { runFerry(t, "--storage", url, "rollback", "--run", id, "--discard-green-writes") })
	if list, err := greenDyn.Resource(widgetsGVR).Namespace(undiscoveredNS).List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 2 {
		t.Fatalf("green's widgets after the migration: %v (%v), want w1 and w2", list, err)
	}

	// Green deletes the ConfigMap, and its widgets' group stops being discovered.
	if err := greenKC.CoreV1().ConfigMaps(undiscoveredNS).Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	breakDiscovery(t, green, greenDyn)

	code, out, errOut = runFerry(t, "--storage", url, "rollback", "--run", id, "--carry-back", "--lease-ttl", testLeaseTTL.String())
	if code != 3 || !strings.Contains(out, "API group "+undiscoveredGroup) {
		t.Errorf("the carry-back exited %d, want 3 (stopped) naming the API group %s\nstdout: %s\nstderr: %s", code, undiscoveredGroup, out, errOut)
	}
	list, err := blueDyn.Resource(widgetsGVR).Namespace(undiscoveredNS).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 2 {
		n := -1
		if list != nil {
			n = len(list.Items)
		}
		t.Errorf("blue's widgets after the carry-back: %d (%v), want both kept", n, err)
	}
	if _, err := blueKC.CoreV1().ConfigMaps(undiscoveredNS).Get(ctx, "doomed", metav1.GetOptions{}); err != nil {
		t.Errorf("blue's ConfigMap doomed: %v; the stopped carry-back should have applied nothing", err)
	}
}

func applyWidgetCRD(ctx context.Context, c *testbed.Cluster) error {
	cfg, err := c.RESTConfig()
	if err != nil {
		return err
	}
	ax, err := apiextensions.NewForConfig(cfg)
	if err != nil {
		return err
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: widgetsGVR.Resource + "." + undiscoveredGroup},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: undiscoveredGroup,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}},
			}},
		},
	}
	if _, err := ax.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return waitFor(ctx, 30*time.Second, func() (bool, error) {
		got, err := ax.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// breakDiscovery points the group's APIService at a service that does not exist, no longer
// managed by the API server (which would put it back), and waits until discovery fails for it.
func breakDiscovery(t *testing.T, c *testbed.Cluster, dyn dynamic.Interface) {
	t.Helper()
	ctx := context.Background()
	name := "v1." + undiscoveredGroup
	svc, err := dyn.Resource(apiServicesGVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("APIService %s: %v", name, err)
	}
	// Put back as it was, before anything else is cleaned up: a group that fails discovery holds
	// up the deletion of every namespace on the cluster.
	labels := svc.GetLabels()
	spec, _, _ := unstructured.NestedMap(svc.Object, "spec")
	t.Cleanup(func() {
		ctx := context.Background()
		cur, err := dyn.Resource(apiServicesGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Logf("put APIService %s back: %v", name, err)
			return
		}
		cur.SetLabels(labels)
		unstructured.SetNestedMap(cur.Object, spec, "spec")
		if _, err := dyn.Resource(apiServicesGVR).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Logf("put APIService %s back: %v", name, err)
		}
	})
	svc.SetLabels(nil)
	unstructured.SetNestedMap(svc.Object, map[string]any{"namespace": "default", "name": "ferry-no-such-service", "port": int64(443)}, "spec", "service")
	unstructured.SetNestedField(svc.Object, true, "spec", "insecureSkipTLSVerify")
	if _, err := dyn.Resource(apiServicesGVR).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("APIService %s: %v", name, err)
	}
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var last string
	waitUntil(t, "discovery of "+undiscoveredGroup+" to fail on "+c.Name, 60*time.Second, func(ctx context.Context) (bool, error) {
		lists, err := dc.ServerPreferredResources()
		last = fmt.Sprint(err)
		for _, l := range lists {
			if strings.HasPrefix(l.GroupVersion, undiscoveredGroup+"/") && len(l.APIResources) > 0 {
				return false, nil
			}
		}
		return true, nil
	})
	t.Logf("discovery on %s: %s", c.Name, last)
}

// removeUndiscovered puts green's APIService back (deleted, the API server makes it again) and
// removes the namespace and the CRD from both clusters.
func removeUndiscovered(t *testing.T, clusters ...*testbed.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, c := range clusters {
		kc, dyn, err := c.Clients()
		if err != nil {
			t.Log(err)
			continue
		}
		if svc, err := dyn.Resource(apiServicesGVR).Get(ctx, "v1."+undiscoveredGroup, metav1.GetOptions{}); err == nil {
			if _, managed := svc.GetLabels()["kube-aggregator.kubernetes.io/automanaged"]; !managed {
				dyn.Resource(apiServicesGVR).Delete(ctx, svc.GetName(), metav1.DeleteOptions{})
			}
		}
		if err := kc.CoreV1().Namespaces().Delete(ctx, undiscoveredNS, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("clean up namespace %s on %s: %v", undiscoveredNS, c.Name, err)
		}
		if cfg, err := c.RESTConfig(); err == nil {
			if ax, err := apiextensions.NewForConfig(cfg); err == nil {
				ax.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, widgetsGVR.Resource+"."+undiscoveredGroup, metav1.DeleteOptions{})
			}
		}
		// Later tests back up all of blue: wait until the namespace is gone.
		waitFor(ctx, time.Minute, func() (bool, error) {
			_, err := kc.CoreV1().Namespaces().Get(ctx, undiscoveredNS, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	}
}

// waitFor polls cond every 100 ms until it holds, fails or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		switch {
		case err != nil:
			return err
		case ok:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("not within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
