package integration

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

	out := migrateShapes(t, ns, "a Deployment green's policy gives a mirror's image")
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
}
