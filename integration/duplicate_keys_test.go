package integration

import (
	"context"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TestObjectsWithDuplicateKeysRestore: the API server takes a pod template that names one
// environment variable twice or declares one container port twice (a warning only; Helm charts
// whose values add to a chart's defaults make them), while server-side apply refuses such lists
// ("duplicate entries for key"). A Deployment of such lists on blue, scaled otherwise on green,
// and a CronJob of such lists, with other lists on green: ferry restore --existing update and
// --existing replace make green's objects equal to the backup's, lists included, without making
// them again, and ferry verify passes.
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
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}, {Name: "metrics", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
			}}}},
		}}
	}
	// A CronJob of such lists, which green has with other lists and another schedule (a CronJob
	// keeps no rollout history that a new template would add to).
	blueContainer := deployment(0).Spec.Template.Spec.Containers[0]
	greenContainer := corev1.Container{Name: "app", Image: "registry.example/legacy:1",
		Env: []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "warn"}}, Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 9090, Protocol: corev1.ProtocolTCP}}}
	cronJob := func(schedule string, c corev1.Container) *batchv1.CronJob {
		return &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "report"}, Spec: batchv1.CronJobSpec{Schedule: schedule, Suspend: ptr.To(true),
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{c}}}}}}}
	}
	create := func(kc kubernetes.Interface, replicas int32, schedule string, c corev1.Container) {
		t.Helper()
		if _, err := kc.AppsV1().Deployments(ns).Create(ctx, deployment(replicas), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := kc.BatchV1().CronJobs(ns).Create(ctx, cronJob(schedule, c), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(blueKC, 0, "0 3 * * *", blueContainer)
	store := "file://" + t.TempDir()
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "-f", namespacesConfig(t, ns), "--name", "dup-keys"); code != 0 {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	for _, existing := range []string{"update", "replace"} {
		removeNamespace(t, ns, greenKC)
		createNamespace(t, greenKC, ns, nil)
		create(greenKC, 2, "0 4 * * *", greenContainer)
		greenJob, err := greenKC.BatchV1().CronJobs(ns).Get(ctx, "report", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if code, out, errOut := runFerry(t, "--storage", store, "restore", "--to", "green", "--backup", "dup-keys", "--existing", existing); code != 0 {
			t.Fatalf("ferry restore --existing %s exited %d\nstdout: %s\nstderr: %s", existing, code, lastLines(out, 30), lastLines(errOut, 30))
		}
		got, err := greenKC.AppsV1().Deployments(ns).Get(ctx, "legacy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if *got.Spec.Replicas != 0 {
			t.Errorf("after restore --existing %s green's Deployment has %d replicas, want blue's 0", existing, *got.Spec.Replicas)
		}
		job, err := greenKC.BatchV1().CronJobs(ns).Get(ctx, "report", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c := job.Spec.JobTemplate.Spec.Template.Spec.Containers[0]
		if job.UID != greenJob.UID || job.Spec.Schedule != "0 3 * * *" || c.Image != blueContainer.Image || !slices.Equal(c.Env, blueContainer.Env) || !slices.Equal(c.Ports, blueContainer.Ports) {
			t.Errorf("after restore --existing %s green's CronJob (UID %s, green's was %s) runs at %q %s with env %v and ports %v; want green's CronJob with blue's schedule 0 3 * * *, %s, %v, %v",
				existing, job.UID, greenJob.UID, job.Spec.Schedule, c.Image, c.Env, c.Ports, blueContainer.Image, blueContainer.Env, blueContainer.Ports)
		}
		if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "dup-keys"); code != 0 {
			t.Errorf("ferry verify after restore --existing %s exited %d\nstdout: %s\nstderr: %s", existing, code, lastLines(out, 30), lastLines(errOut, 30))
		}
	}
}
