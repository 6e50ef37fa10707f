package integration

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// TestWhatGreensPoliciesChangeIsTheirs: a target cluster's mutating admission (Kyverno's
// image-registry rewrite, a mirror for air-gapped clusters, an imagePullPolicy it enforces; here a
// MutatingAdmissionPolicy) changes what ferry restores there as it would change anything made
// there. That is the target's own rule, not a loss: verification said the objects differed and the
// run stopped before traffic moved.
func TestWhatGreensPoliciesChangeIsTheirs(t *testing.T) {
	const ns = "shapes-mirror"
	blueKC, greenKC := cutoverShapesNamespace(t, ns)
	ctx := context.Background()
	kubectl(t, "cutover", `apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: shapes-image-mirror}
spec:
  failurePolicy: Fail
  reinvocationPolicy: Never
  matchConstraints:
    resourceRules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [deployments]}]
  matchConditions:
  - name: not-mirrored
    expression: "!object.spec.template.spec.containers[0].image.startsWith('mirror.example/')"
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        [JSONPatch{op: "replace", path: "/spec/template/spec/containers/0/image",
          value: "mirror.example/" + object.spec.template.spec.containers[0].image}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: shapes-image-mirror}
spec:
  policyName: shapes-image-mirror
  matchResources: {namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: `+ns+`}}}
`, "apply", "-f", "-")
	t.Cleanup(func() {
		kubectl(t, "cutover", "", "delete", "mutatingadmissionpolicybinding,mutatingadmissionpolicy", "shapes-image-mirror", "--ignore-not-found")
	})
	labels := map[string]string{"app": "web"}
	web := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2),
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "web", Image: "web:1.4", Env: []corev1.EnvVar{{Name: "MODE", Value: "shop"}}}}}}}}
	if _, err := blueKC.AppsV1().Deployments(ns).Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	store, id, out := migrateShapesRun(t, ns, "a Deployment green's policy gives a mirror's image")
	d, err := greenKC.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if c.Image != "mirror.example/web:1.4" || len(c.Env) != 1 || c.Env[0].Value != "shop" || *d.Spec.Replicas != 2 {
		t.Errorf("green's web: image %s, env %v, %d replicas; want green's policy's image, the rest as blue's", c.Image, c.Env, *d.Spec.Replicas)
	}
	if !strings.Contains(out, "admission makes") {
		t.Errorf("the report does not say green's admission changed the Deployment:\n%s", out)
	}

	// Rolling back, what green's admission made is not a write of green's: blue keeps its image
	// (blue may have no such mirror) and gets only what green's users changed.
	if _, err := greenKC.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runFerry(t, "--storage", store, "rollback", "--run", id)
	if code != 4 || !strings.Contains(errOut, "Deployment "+ns+"/web (spec.replicas") || strings.Contains(errOut, "mirror.example") {
		t.Errorf("a plain rollback after green scaled web exited %d, want 4 naming web's replicas as green's only write\nstderr: %s", code, lastLines(errOut, 8))
	}
	code, rollOut, errOut := runFerry(t, "--storage", store, "rollback", "--run", id, "--carry-back", "--lease-ttl", testLeaseTTL.String())
	if code != 0 {
		t.Fatalf("ferry rollback --carry-back exited %d, want 0\nstdout: %s\nstderr: %s", code, rollOut, lastLines(errOut, 30))
	}
	if !strings.Contains(rollOut+errOut, "1 kept blue's fields where green's admission changed them") {
		t.Errorf("the carry-back does not say it kept blue's fields green's admission changed\nstdout: %s\nstderr: %s", rollOut, lastLines(errOut, 30))
	}
	d, err = blueKC.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := d.Spec.Template.Spec.Containers[0]; c.Image != "web:1.4" || *d.Spec.Replicas != 3 {
		t.Errorf("blue's web after the carry-back: image %s, %d replicas; want blue's image and green's 3 replicas", c.Image, *d.Spec.Replicas)
	}
	sets, err := blueKC.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, rs := range sets.Items {
		if image := rs.Spec.Template.Spec.Containers[0].Image; image != "web:1.4" {
			t.Errorf("blue's ReplicaSet %s after the carry-back runs %s; green's rollout to its admission's image is not blue's", rs.Name, image)
		}
	}
}
