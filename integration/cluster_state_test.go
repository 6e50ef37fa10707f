package integration

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// The types a network plugin (Calico, Cilium) and a node autoscaler (Karpenter) record the
// cluster in, as they install them (schemas left open).
var (
	ipamBlocks       = testCRD{group: "crd.projectcalico.org", kind: "IPAMBlock", cluster: true}
	ciliumIdentities = testCRD{group: "cilium.io", kind: "CiliumIdentity", cluster: true, version: "v2", pluralName: "ciliumidentities"}
	ciliumEndpoints  = testCRD{group: "cilium.io", kind: "CiliumEndpoint", version: "v2"}
	nodeClaims       = testCRD{group: "karpenter.sh", kind: "NodeClaim", cluster: true}
)

// TestTheClustersOwnRecordsStayOnIt: a network plugin records which addresses each node's block
// holds and which security identity each set of labels has; a node autoscaler, which machines it
// runs; device drivers, the devices of each node (ResourceSlices, owned by their node). Those are
// the source cluster's; green's plugins keep their own under the same names (address blocks are
// named by their range, identities by their number). A migration of everything made blue's
// records green's: green's block of 10.244.0.0/26 said blue's node held it and its pods' addresses
// were taken, green's identity 1000 had blue's labels, and green's Karpenter was handed blue's
// machine. They are left out (the plan says why), and the restore leaves green's as they are.
func TestTheClustersOwnRecordsStayOnIt(t *testing.T) {
	_, blueKC := clients(t, "blue")
	_, greenKC := clients(t, "green")
	ctx := context.Background()
	const ns = "cluster-records"
	removeAfter(t, ns, blueKC, greenKC)
	createNamespace(t, blueKC, ns, nil)
	installCRDs(t, ipamBlocks, ciliumIdentities, ciliumEndpoints, nodeClaims)
	_, blueDyn, _ := planClients(t, "blue")
	_, greenDyn, _ := planClients(t, "green")
	block, identity, endpoint, nodeClaim := ipamBlocks.gvr(), ciliumIdentities.gvr(), ciliumEndpoints.gvr(), nodeClaims.gvr()
	resourceSlices := schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceslices"}
	configMaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	create := func(dyn dynamic.Interface, gvr schema.GroupVersionResource, namespace string, obj map[string]any) {
		t.Helper()
		u := &unstructured.Unstructured{Object: obj}
		if _, err := dyn.Resource(gvr).Namespace(namespace).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %s: %v", gvr.Resource, u.GetName(), err)
		}
	}
	ipamBlock := func(node string, handle string) map[string]any {
		return map[string]any{"apiVersion": "crd.projectcalico.org/v1", "kind": "IPAMBlock", "metadata": map[string]any{"name": "10-244-0-0-26"},
			"spec": map[string]any{"cidr": "10.244.0.0/26", "affinity": "host:" + node, "allocations": []any{int64(0), nil}, "unallocated": []any{int64(1)},
				"attributes": []any{map[string]any{"handle_id": handle}}}}
	}
	ciliumIdentity := func(app string) map[string]any {
		return map[string]any{"apiVersion": "cilium.io/v2", "kind": "CiliumIdentity", "metadata": map[string]any{"name": "1000"},
			"security-labels": map[string]any{"k8s:app": app, "k8s:io.kubernetes.pod.namespace": ns}}
	}
	create(greenDyn, block, "", ipamBlock("green-node-0", "k8s-pod-network.green"))
	create(greenDyn, identity, "", ciliumIdentity("green-app"))
	create(blueDyn, block, "", ipamBlock("blue-node-0", "k8s-pod-network.blue"))
	create(blueDyn, identity, "", ciliumIdentity("blue-app"))
	create(blueDyn, endpoint, ns, map[string]any{"apiVersion": "cilium.io/v2", "kind": "CiliumEndpoint", "metadata": map[string]any{"name": "web-7d9f-abc12"},
		"status": map[string]any{"id": int64(321), "networking": map[string]any{"addressing": []any{map[string]any{"ipv4": "10.244.0.7"}}}}})
	create(blueDyn, nodeClaim, "", map[string]any{"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": map[string]any{"name": "default-x7k2p"},
		"spec": map[string]any{"nodeClassRef": map[string]any{"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}})
	nodes, err := blueKC.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		t.Fatalf("blue's nodes: %v", err)
	}
	node := nodes.Items[0]
	ownedByNode := []any{map[string]any{"apiVersion": "v1", "kind": "Node", "name": node.Name, "uid": string(node.UID)}}
	create(blueDyn, resourceSlices, "", map[string]any{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
		"metadata": map[string]any{"name": "cluster-records-gpus", "ownerReferences": ownedByNode},
		"spec": map[string]any{"driver": "gpu.example.com", "nodeName": node.Name, "pool": map[string]any{"name": node.Name, "generation": int64(1), "resourceSliceCount": int64(1)},
			"devices": []any{map[string]any{"name": "gpu-0"}}}})
	t.Cleanup(func() {
		blueDyn.Resource(resourceSlices).Delete(context.Background(), "cluster-records-gpus", metav1.DeleteOptions{})
		greenDyn.Resource(resourceSlices).Delete(context.Background(), "cluster-records-gpus", metav1.DeleteOptions{})
	})
	create(blueDyn, configMaps, ns, map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "node-agent-state", "ownerReferences": ownedByNode},
		"data": map[string]any{"slot": "3"}})
	create(blueDyn, configMaps, ns, map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "settings"}, "data": map[string]any{"mode": "live"}})

	config := namespacesConfig(t, ns)
	code, out, errOut := runFerry(t, "plan", "--from", "blue", "-f", config)
	if code != 0 {
		t.Fatalf("ferry plan exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	for _, said := range []string{"Calico's address allocations", "security identities", "source cluster's machines", "drivers published", "node " + node.Name} {
		if !strings.Contains(out, said) {
			t.Errorf("ferry plan does not say why the cluster's records stay (%q):\n%s", said, out)
		}
	}
	store := moveNamespace(t, ns, "cluster-records")

	read := func(gvr schema.GroupVersionResource, namespace, name string) *unstructured.Unstructured {
		t.Helper()
		obj, err := greenDyn.Resource(gvr).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("green's %s %s: %v", gvr.Resource, name, err)
		}
		return obj
	}
	if affinity, _, _ := unstructured.NestedString(read(block, "", "10-244-0-0-26").Object, "spec", "affinity"); affinity != "host:green-node-0" {
		t.Errorf("green's address block 10.244.0.0/26 is held by %q, want green's node (host:green-node-0)", affinity)
	}
	if app, _, _ := unstructured.NestedString(read(identity, "", "1000").Object, "security-labels", "k8s:app"); app != "green-app" {
		t.Errorf("green's security identity 1000 is of app %q, want green-app", app)
	}
	for _, o := range []struct {
		gvr             schema.GroupVersionResource
		namespace, name string
	}{{endpoint, ns, "web-7d9f-abc12"}, {nodeClaim, "", "default-x7k2p"}, {resourceSlices, "", "cluster-records-gpus"}, {configMaps, ns, "node-agent-state"}} {
		if _, err := greenDyn.Resource(o.gvr).Namespace(o.namespace).Get(ctx, o.name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("blue's %s %s is on green (%v)", o.gvr.Resource, o.name, err)
		}
	}
	read(configMaps, ns, "settings")
	if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "cluster-records"); code != 0 {
		t.Errorf("ferry verify exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

// TestWhatPodsMadeForThemselvesGoesWithThem: an operator built with the Operator SDK takes its
// leader-for-life lock as a ConfigMap its own pod owns; a Spark driver owns its services. The
// pod of a Deployment is made anew on green under another name, and its process makes its own
// again; blue's copy was restored without its owner (reported skipped, exit 3) and stayed for
// ever, so green's operator, finding a lock it does not hold, would wait for it. Such objects go
// with their pods; what a pod that moves itself (run by hand) owns still moves, owned by it.
func TestWhatPodsMadeForThemselvesGoesWithThem(t *testing.T) {
	_, blueKC := clients(t, "blue")
	_, greenKC := clients(t, "green")
	ctx := context.Background()
	const ns = "pods-own"
	removeAfter(t, ns, blueKC, greenKC)
	createNamespace(t, blueKC, ns, nil)
	createDeployment(t, blueKC, ns, "operator", corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: "operator"}}})
	operatorPod := runningPod(t, blueKC, ns, "app=operator")
	runPod(t, blueKC, ns, simplePod("toolbox"))
	ownedBy := func(pod string) []metav1.OwnerReference {
		p, err := blueKC.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID}}
	}
	for name, owners := range map[string][]metav1.OwnerReference{"operator-lock": ownedBy(operatorPod), "toolbox-state": ownedBy("toolbox")} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owners}, Data: map[string]string{"held": "yes"}}
		if _, err := blueKC.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	store := moveNamespace(t, ns, "pods-own")
	if _, err := greenKC.CoreV1().ConfigMaps(ns).Get(ctx, "operator-lock", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("green has blue's operator-lock, which green's operator pod makes for itself (%v)", err)
	}
	state, err := greenKC.CoreV1().ConfigMaps(ns).Get(ctx, "toolbox-state", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("green's toolbox-state: %v", err)
	}
	toolbox, err := greenKC.CoreV1().Pods(ns).Get(ctx, "toolbox", metav1.GetOptions{})
	if err != nil || len(state.OwnerReferences) != 1 || state.OwnerReferences[0].UID != toolbox.UID {
		t.Errorf("green's toolbox-state is owned by %+v, want green's toolbox pod (%v)", state.OwnerReferences, err)
	}
	if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "pods-own"); code != 0 {
		t.Errorf("ferry verify exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

// TestAggregatedRolesAreTheTargetsToFill: a ClusterRole with an aggregationRule (Kubeflow's
// kubeflow-edit, kubeflow-view, every operator's aggregate-to labels) gets its rules from the
// target's controller, as the union of the roles that carry its labels there. Green's may hold
// more than blue's (a component green runs and blue did not); blue's rules, restored, were
// replaced by green's union, and verify called that a difference (exit 3), which stops a
// migration. The rules of an aggregated role are the target's to fill: neither restored nor
// compared; the roles it aggregates move and are compared as any.
func TestAggregatedRolesAreTheTargetsToFill(t *testing.T) {
	_, blueKC := clients(t, "blue")
	_, greenKC := clients(t, "green")
	ctx := context.Background()
	const ns, label = "aggregated-roles", "agg.ferry.dev/tenant-edit"
	removeAfter(t, ns, blueKC, greenKC)
	createNamespace(t, blueKC, ns, nil)
	roles := func(kc kubernetes.Interface, rs ...*rbacv1.ClusterRole) {
		t.Helper()
		for _, r := range rs {
			if _, err := kc.RbacV1().ClusterRoles().Create(ctx, r, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { kc.RbacV1().ClusterRoles().Delete(context.Background(), r.Name, metav1.DeleteOptions{}) })
		}
	}
	part := func(name, group, resource string) *rbacv1.ClusterRole {
		return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{label: "true"}},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{group}, Resources: []string{resource}, Verbs: []string{"get", "list"}}}}
	}
	aggregated := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "agg-tenant-edit"},
		AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{label: "true"}}}}}
	roles(greenKC, part("agg-green-serving", "serving.kserve.io", "inferenceservices"))
	roles(blueKC, part("agg-notebooks", "kubeflow.org", "notebooks"), aggregated)
	t.Cleanup(func() {
		for _, name := range []string{"agg-notebooks", "agg-tenant-edit"} {
			if err := greenKC.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("clean up green's ClusterRole %s: %v", name, err)
			}
		}
	})
	resources := func(kc kubernetes.Interface) []string {
		role, err := kc.RbacV1().ClusterRoles().Get(ctx, "agg-tenant-edit", metav1.GetOptions{})
		if err != nil {
			return nil
		}
		var out []string
		for _, r := range role.Rules {
			out = append(out, r.Resources...)
		}
		slices.Sort(out)
		return out
	}
	waitUntil(t, "blue's controller aggregates agg-tenant-edit", time.Minute, func(context.Context) (bool, error) {
		return slices.Equal(resources(blueKC), []string{"notebooks"}), nil
	})

	store := moveNamespace(t, ns, "aggregated-roles")
	waitUntil(t, "green's controller aggregates agg-tenant-edit", time.Minute, func(context.Context) (bool, error) {
		return slices.Equal(resources(greenKC), []string{"inferenceservices", "notebooks"}), nil
	})
	if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "aggregated-roles"); code != 0 {
		t.Errorf("ferry verify exited %d, want 0: green's union of its roles is green's to make\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}
