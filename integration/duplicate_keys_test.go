package integration

import (
	"context"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TestObjectsWithDuplicateKeysRestore: the API server takes a pod template that names one
// environment variable twice or declares one container port twice (a warning only; Helm charts
// whose values add to a chart's defaults make them), while server-side apply refuses such lists
// ("duplicate entries for key"). A Deployment of such lists on blue, scaled otherwise on green: ferry restore --existing update and --existing replace make green's equal to the
// backup's, and ferry verify passes.
func TestObjectsWithDuplicateKeysRestore(t *testing.T) {
	const ns = "dup-keys"
	blueKC, greenKC := restoreShapesNamespace(t, ns)
	createNamespace(t, greenKC, ns, nil)
	ctx := context.Background()
	deployment := func(replicas int32) *appsv1.Deployment {
		labels := map[string]string{"app": "legacy"}
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "legacy"}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "app", Image: "registry.example/legacy:2",
				Env:   []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "info"}, {Name: "REGION", Value: "eu"}, {Name: "LOG_LEVEL", Value: "debug"}},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 8080}},
			}}}},
		}}
	}
	create := func(kc kubernetes.Interface, replicas int32) {
		t.Helper()
		if _, err := kc.AppsV1().Deployments(ns).Create(ctx, deployment(replicas), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(blueKC, 0)
	store := "file://" + t.TempDir()
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "-f", namespacesConfig(t, ns), "--name", "dup-keys"); code != 0 {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	for _, existing := range []string{"update", "replace"} {
		removeNamespace(t, ns, greenKC)
		createNamespace(t, greenKC, ns, nil)
		create(greenKC, 2)
		if code, out, errOut := runFerry(t, "--storage", store, "restore", "--to", "green", "--backup", "dup-keys", "--existing", existing); code != 0 {
			t.Fatalf("ferry restore --existing %s exited %d\nstdout: %s\nstderr: %s", existing, code, lastLines(out, 30), lastLines(errOut, 30))
		}
		got, err := greenKC.AppsV1().Deployments(ns).Get(ctx, "legacy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := deployment(0).Spec.Template.Spec.Containers[0]
		if c := got.Spec.Template.Spec.Containers[0]; *got.Spec.Replicas != 0 || !slices.Equal(c.Env, want.Env) || len(c.Ports) != 2 {
			t.Errorf("after restore --existing %s green's Deployment has %d replicas, env %v and ports %v; want blue's: 0, %v, %v", existing, *got.Spec.Replicas, c.Env, c.Ports, want.Env, want.Ports)
		}
		if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "dup-keys"); code != 0 {
			t.Errorf("ferry verify after restore --existing %s exited %d\nstdout: %s\nstderr: %s", existing, code, lastLines(out, 30), lastLines(errOut, 30))
		}
	}
}
