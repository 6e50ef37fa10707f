package integration

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/ferrykube/ferry/integration/testbed"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const defaultClassesNS = "default-classes"

// TestTargetKeepsItsDefaultClasses: which storage class, ingress class and priority class a
// cluster gives to claims, ingresses and pods that name none is that cluster's choice. Blue's
// classes move, but a target that has a default of its own keeps it: with two defaults the API
// server gives the newest (blue's, just made) to every new claim, so green's next notebook
// volume would wait for a provisioner green does not run, and it refuses a second global
// priority class. A target without a default takes blue's.
func TestTargetKeepsItsDefaultClasses(t *testing.T) {
	testbed.Require(t, tb)
	// Blue is a cluster of the test's own: a default storage class gives itself to every pending
	// claim that names none, those already made too (Kubernetes 1.28 and later), so on the
	// shared blue the platform's claims of the other tests took blue-ssd.
	const blue = "classes-blue"
	upgradeCluster(t, blue)
	removeClustersAfter(t, blue)
	_, greenKC := clients(t, "green")
	removeAfter(t, defaultClassesNS, greenKC)
	t.Cleanup(func() {
		kubectl(t, "green", "", "delete", "storageclass/blue-ssd", "ingressclass/blue-ingress", "ingressclass/green-ingress",
			"priorityclass/blue-normal", "priorityclass/green-normal", "--ignore-not-found")
	})
	kubectl(t, blue, `apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: blue-ssd
  labels: {ferry-test: default-classes}
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: ssd.example.com
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: blue-ingress
  labels: {ferry-test: default-classes}
  annotations: {ingressclass.kubernetes.io/is-default-class: "true"}
spec: {controller: example.com/blue-ingress}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: blue-normal
  labels: {ferry-test: default-classes}
globalDefault: true
value: 1000
`, "apply", "-f", "-")
	greenIngress := `apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: green-ingress
  annotations: {ingressclass.kubernetes.io/is-default-class: "true"}
spec: {controller: example.com/green-ingress}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: green-normal}
globalDefault: true
value: 500
---
apiVersion: v1
kind: Namespace
metadata: {name: ` + defaultClassesNS + `}
`
	kubectl(t, "green", greenIngress, "apply", "-f", "-")
	green := tb.Clusters["green"]
	if err := green.Apply(context.Background(), io.Discard, filepath.Join(repoDir(), "integration", "testdata", "standard-storageclass.yaml")); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	config := filepath.Join(dir, "ferry.yaml")
	if err := os.WriteFile(config, []byte("include: {resources: [storageclasses.storage.k8s.io, ingressclasses.networking.k8s.io, priorityclasses.scheduling.k8s.io], labelSelector: ferry-test=default-classes}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	store := "file://" + filepath.Join(dir, "store")
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", blue, "-f", config, "--name", "classes"); code != 0 {
		t.Fatalf("ferry backup exited %d\n%s\n%s", code, out, errOut)
	}
	restore := func(when string) {
		t.Helper()
		if code, rep, errOut := runReportCommand(t, "--storage", store, "restore", "--to", "green", "--backup", "classes"); code != 0 {
			t.Fatalf("%s: restore exited %d, want 0: %s %+v\nstderr: %s", when, code, rep.Error, rep.Items, lastLines(errOut, 10))
		}
		if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "classes"); code != 0 {
			t.Errorf("%s: verify exited %d\n%s\n%s", when, code, out, lastLines(errOut, 10))
		}
	}
	ctx := context.Background()
	// newClaimClass and newIngressClass are the classes green gives to a claim and an ingress that
	// name none.
	newClaimClass := func(name string) string {
		pvc, err := greenKC.CoreV1().PersistentVolumeClaims(defaultClassesNS).Create(ctx, &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pvc.Spec.StorageClassName == nil {
			return ""
		}
		return *pvc.Spec.StorageClassName
	}
	newIngressClass := func(name string) string {
		ing, err := greenKC.NetworkingV1().Ingresses(defaultClassesNS).Create(ctx, &networkingv1.Ingress{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       networkingv1.IngressSpec{DefaultBackend: &networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ing.Spec.IngressClassName == nil {
			return ""
		}
		return *ing.Spec.IngressClassName
	}

	newPodPriority := func(name string) int32 {
		pod, err := greenKC.CoreV1().Pods(defaultClassesNS).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pod.Spec.Priority == nil {
			return 0
		}
		return *pod.Spec.Priority
	}

	restore("green with defaults of its own")
	if _, err := greenKC.StorageV1().StorageClasses().Get(ctx, "blue-ssd", metav1.GetOptions{}); err != nil {
		t.Errorf("blue's storage class blue-ssd on green: %v", err)
	}
	if got := newClaimClass("after-restore"); got != "standard" {
		t.Errorf("a new claim on green gets storage class %q, want green's default standard", got)
	}
	if got := newIngressClass("after-restore"); got != "green-ingress" {
		t.Errorf("a new ingress on green gets class %q, want green's default green-ingress", got)
	}
	if got := newPodPriority("after-restore"); got != 500 {
		t.Errorf("a new pod on green gets priority %d, want green's global default's 500", got)
	}

	// Green without a default ingress class takes blue's.
	kubectl(t, "green", "", "delete", "ingressclass/green-ingress", "ingressclass/blue-ingress")
	restore("green without a default ingress class")
	if got := newIngressClass("no-default-before"); got != "blue-ingress" {
		t.Errorf("a new ingress on green, which had no default class, gets class %q, want blue's default blue-ingress", got)
	}
}
