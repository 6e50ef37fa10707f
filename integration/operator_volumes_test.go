package integration

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferrykube/ferry/integration/testbed"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

const operatorVolumesNS = "operator-volumes"

// TestOperatorsWaitForTheirVolumes: an operator's custom resource (a CloudNativePG Cluster, a
// Prometheus, an Elasticsearch) makes the pods that run on its claims: directly, owning the claims
// (main), or through a StatefulSet it owns whose claim templates make them (metrics). Made on
// green while the claims are still being filled, its operator starts the database on an empty or
// half-filled volume (initdb on an empty one), and the restore then writes blue's files under a
// running database. Green's operator is played by the test: when it first sees each resource, the
// resource's claim must already hold all of blue's files.
func TestOperatorsWaitForTheirVolumes(t *testing.T) {
	testbed.Require(t, tb)
	ns := operatorVolumesNS
	blueKC, greenKC := restoreShapesNamespace(t, ns)
	ctx := context.Background()
	installCRDs(t, testCRD{group: "ops.ferry.dev", kind: "DBCluster"})
	blue, _ := clients(t, "blue")
	_, blueDC, err := blue.Clients()
	if err != nil {
		t.Fatal(err)
	}
	dbclusters := schema.GroupVersionResource{Group: "ops.ferry.dev", Version: "v1", Resource: "dbclusters"}
	owner := func(name string) metav1.OwnerReference {
		cr := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "ops.ferry.dev/v1", "kind": "DBCluster",
			"metadata": map[string]any{"name": name, "namespace": ns}, "spec": map[string]any{"instances": int64(1)}}}
		made, err := blueDC.Resource(dbclusters).Namespace(ns).Create(ctx, cr, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return metav1.OwnerReference{APIVersion: "ops.ferry.dev/v1", Kind: "DBCluster", Name: name, UID: made.GetUID(), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	}
	files := func(what string) map[string][]byte {
		out := map[string][]byte{}
		for i := range 8 {
			out[filepath.Join("pgdata", "base", what+string(rune('a'+i)))] = bytes.Repeat([]byte(what), 64<<10)
		}
		return out
	}
	// main owns its claim, as a CloudNativePG Cluster does.
	mainRef := owner("main")
	mainDir := blueClaim(t, ns, "main-1", files("main"), func(*corev1.PersistentVolumeClaimSpec) {})
	claim, err := blueKC.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "main-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim.OwnerReferences = []metav1.OwnerReference{mainRef}
	if _, err := blueKC.CoreV1().PersistentVolumeClaims(ns).Update(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// metrics owns a StatefulSet whose claim template makes its claim, as a Prometheus does.
	metricsRef := owner("metrics")
	metricsDir := blueClaim(t, ns, "data-metrics-0", files("metrics"), func(*corev1.PersistentVolumeClaimSpec) {})
	kubectl(t, "blue", `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: metrics
  namespace: `+ns+`
  ownerReferences: [{apiVersion: ops.ferry.dev/v1, kind: DBCluster, name: metrics, uid: `+string(metricsRef.UID)+`, controller: true, blockOwnerDeletion: true}]
spec:
  replicas: 0
  serviceName: metrics
  selector: {matchLabels: {app: metrics}}
  template:
    metadata: {labels: {app: metrics}}
    spec: {containers: [{name: tsdb, image: "registry.example/tsdb:2"}]}
  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {accessModes: [ReadWriteOnce], storageClassName: standard, resources: {requests: {storage: 1Gi}}}
`, "apply", "-f", "-")

	// Green's operator: what it would start on, the moment it first sees each resource.
	green, _ := clients(t, "green")
	_, greenDC, err := green.Clients()
	if err != nil {
		t.Fatal(err)
	}
	watchCtx, stop := context.WithTimeout(ctx, 5*time.Minute)
	defer stop()
	watcher, err := greenDC.Resource(dbclusters).Namespace(ns).Watch(watchCtx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claimOf := map[string]string{"main": "main-1", "metrics": "data-metrics-0"}
	seen := map[string]map[string]string{} // resource -> its claim's files when first seen
	both := make(chan struct{})
	go func() {
		defer close(both)
		for ev := range watcher.ResultChan() {
			cr, ok := ev.Object.(*unstructured.Unstructured)
			if !ok || ev.Type != watch.Added {
				continue
			}
			seen[cr.GetName()] = filesNow(watchCtx, greenKC, ns, claimOf[cr.GetName()])
			if len(seen) == len(claimOf) {
				return
			}
		}
	}()

	store := moveNamespace(t, ns, "operator-volumes")
	select {
	case <-both:
	case <-time.After(30 * time.Second):
		t.Fatal("green's operator did not see both DBClusters within 30s of the restore")
	}
	watcher.Stop()
	for name, dir := range map[string]string{"main": mainDir, "metrics": metricsDir} {
		got, ok := seen[name]
		switch want := claimFiles(t, dir); {
		case !ok:
			t.Errorf("green has no DBCluster %s", name)
		case !equalMaps(got, want):
			t.Errorf("green's operator first saw DBCluster %s when its claim %s held %d of blue's %d files: it would have started its database there", name, claimOf[name], len(got), len(want))
		}
	}
	if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "operator-volumes"); code != 0 {
		t.Errorf("verify exited %d\n%s\n%s", code, out, lastLines(errOut, 10))
	}
}

// filesNow are the files of claim on the cluster (name to SHA-256), none when it is not bound.
func filesNow(ctx context.Context, kc kubernetes.Interface, ns, claim string) map[string]string {
	pvc, err := kc.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil || pvc.Spec.VolumeName == "" {
		return map[string]string{}
	}
	pv, err := kc.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil || pv.Spec.HostPath == nil {
		return map[string]string{}
	}
	files, _ := claimFilesOf(pv.Spec.HostPath.Path) // being written: what is there now
	return files
}
