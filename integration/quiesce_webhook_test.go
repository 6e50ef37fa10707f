package integration

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrykube/ferry/migrate"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TestWritersServingWebhooksMoveAndComeBack: Katib's controller is a writer Kubeflow's preset
// stops, and it serves the admission webhook that must admit every change of an Experiment
// (failurePolicy Fail). The preset scaled it to zero, then annotated the Experiments: on a real
// Kubeflow the webhook, its server stopped, refused the annotation, and the quiesce failed; a
// rollback took the annotation off before the controller was ready again.
//
// Here the webhook's server runs on this machine and serves while blue's controller has a ready
// pod, not being deleted, as a Service's endpoints do. ferry migrate, then rollback with
// green's writes discarded, must both finish, with blue's Experiment and controller as they were.
func TestWritersServingWebhooksMoveAndComeBack(t *testing.T) {
	g := guardedExperiments(t)
	ctx := context.Background()
	store := "file://" + filepath.Join(t.TempDir(), "store")
	code, out, errOut := runFerry(t, "--storage", store, "migrate", "--from", "blue", "--to", "cutover", "-f", g.config, "--lease-ttl", testLeaseTTL.String())
	if code != 0 || !strings.Contains(out, "shifted") {
		t.Fatalf("ferry migrate exited %d, want 0 and shifted (the webhook's server was unreachable %d times)\nstdout: %s\nstderr: %s", code, g.webhook.unreachable.Load(), out, errOut)
	}
	id := runID(t, errOut)
	blueTune, err := g.blueDyn.Resource(g.gvr).Namespace(g.ns).Get(ctx, "tune", metav1.GetOptions{})
	if err != nil || blueTune.GetAnnotations()["ferry.dev/paused"] != "true" {
		t.Fatalf("blue's experiment after the migration: %v, %v; want it annotated ferry.dev/paused", blueTune.GetAnnotations(), err)
	}

	code, out, errOut = runFerry(t, "--storage", store, "rollback", "--run", id, "--discard-green-writes", "--lease-ttl", testLeaseTTL.String())
	if code != 0 {
		t.Fatalf("ferry rollback exited %d, want 0 (the webhook's server was unreachable %d times)\nstdout: %s\nstderr: %s", code, g.webhook.unreachable.Load(), out, errOut)
	}
	blueTune, err = g.blueDyn.Resource(g.gvr).Namespace(g.ns).Get(ctx, "tune", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ann := blueTune.GetAnnotations(); ann["ferry.dev/paused"] != "" || ann[migrate.QuiescedAnnotation] != "" {
		t.Errorf("blue's experiment after the rollback carries %v; want the quiesce undone", ann)
	}
	d, err := g.blueKC.AppsV1().Deployments(g.ns).Get(ctx, "controller", metav1.GetOptions{})
	if err != nil || d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("blue's controller after the rollback: %v, %v; want 1 replica", d.Spec.Replicas, err)
	}
	t.Logf("the webhook admitted %d changes and was unreachable for %d", g.webhook.admitted.Load(), g.webhook.unreachable.Load())
}

// TestCarryBackOfWhatAStoppedWriterAdmits: after the shift, green's users start an Experiment
// and change another. rollback --carry-back brings both to blue, where the webhook that must
// admit them is served by a writer the run keeps stopped until the carry-back is done: it failed
// there ("2 items failed to carry back to blue … failed calling webhook"). They await blue's
// writers, are made once those start, and verified.
func TestCarryBackOfWhatAStoppedWriterAdmits(t *testing.T) {
	g := guardedExperiments(t)
	ctx := context.Background()
	store := "file://" + filepath.Join(t.TempDir(), "store")
	code, out, errOut := runFerry(t, "--storage", store, "migrate", "--from", "blue", "--to", "cutover", "-f", g.config, "--lease-ttl", testLeaseTTL.String())
	if code != 0 || !strings.Contains(out, "shifted") {
		t.Fatalf("ferry migrate exited %d, want 0 and shifted\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	id := runID(t, errOut)
	greenExperiments := g.greenDyn.Resource(g.gvr).Namespace(g.ns)
	if _, err := greenExperiments.Patch(ctx, "tune", "application/merge-patch+json", []byte(`{"spec":{"trials":8}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	more := &unstructured.Unstructured{Object: map[string]any{"apiVersion": g.gvr.Group + "/v1", "kind": "Experiment",
		"metadata": map[string]any{"name": "tune-more", "namespace": g.ns}, "spec": map[string]any{"trials": int64(2)}}}
	made, err := greenExperiments.Create(ctx, more, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Its controller's trial, owned by it: made with its owner on blue, as the owner awaits.
	trial := &unstructured.Unstructured{Object: map[string]any{"apiVersion": g.gvr.Group + "/v1", "kind": "Trial",
		"metadata": map[string]any{"name": "tune-more-1", "namespace": g.ns, "ownerReferences": []any{map[string]any{
			"apiVersion": g.gvr.Group + "/v1", "kind": "Experiment", "name": "tune-more", "uid": string(made.GetUID()), "controller": true}}},
		"spec": map[string]any{"learningRate": "0.01"}}}
	if _, err := g.greenDyn.Resource(g.trials).Namespace(g.ns).Create(ctx, trial, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	code, out, errOut = runFerry(t, "--storage", store, "rollback", "--run", id, "--carry-back", "--lease-ttl", testLeaseTTL.String())
	if code != 0 {
		t.Fatalf("ferry rollback --carry-back exited %d, want 0 (the webhook's server was unreachable %d times)\nstdout: %s\nstderr: %s", code, g.webhook.unreachable.Load(), out, errOut)
	}
	for _, said := range []string{"objects awaiting 3", "awaiting blue's writers, one of which may serve their admission webhook: 3",
		"made and verified once they started"} {
		if !strings.Contains(out, said) {
			t.Errorf("the carry-back's report does not say %q\nstdout: %s", said, out)
		}
	}
	for name, trials := range map[string]int64{"tune": 8, "tune-more": 2} {
		e, err := g.blueDyn.Resource(g.gvr).Namespace(g.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("blue's experiment %s after the carry-back: %v", name, err)
			continue
		}
		if got, _, _ := unstructured.NestedInt64(e.Object, "spec", "trials"); got != trials {
			t.Errorf("blue's experiment %s after the carry-back: %d trials, want green's %d", name, got, trials)
		}
		if ann := e.GetAnnotations(); ann["ferry.dev/paused"] != "" || ann[migrate.QuiescedAnnotation] != "" {
			t.Errorf("blue's experiment %s after the carry-back carries %v; want no quiesce", name, ann)
		}
	}
	if trial, err := g.blueDyn.Resource(g.trials).Namespace(g.ns).Get(ctx, "tune-more-1", metav1.GetOptions{}); err != nil {
		t.Errorf("blue's trial after the carry-back: %v", err)
	} else if refs := trial.GetOwnerReferences(); len(refs) != 1 || refs[0].Name != "tune-more" {
		t.Errorf("blue's trial after the carry-back is owned by %+v, want its experiment tune-more", refs)
	}
	d, err := g.blueKC.AppsV1().Deployments(g.ns).Get(ctx, "controller", metav1.GetOptions{})
	if err != nil || d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("blue's controller after the carry-back: %v, %v; want 1 replica", d.Spec.Replicas, err)
	}
	t.Logf("the webhook admitted %d changes and was unreachable for %d", g.webhook.admitted.Load(), g.webhook.unreachable.Load())
}

// TestRestoreOfWhatGreensStoppedWriterAdmits: green already has the webhook that admits every
// Experiment (as an upgrade's green has its release's, or a green whose admission policies are
// installed with its CRDs), and its server is the controller the restore makes stopped, from
// blue's quiesce record. The restore of the Experiment failed there ("failed calling webhook"),
// after blue was quiesced. It awaits green's writers, is made once they start, before traffic
// moves, and is verified.
func TestRestoreOfWhatGreensStoppedWriterAdmits(t *testing.T) {
	g := guardedExperiments(t)
	ctx := context.Background()
	createNamespace(t, g.greenKC, g.ns, nil) // the webhook's namespace selector reads its name
	greens := guardExperiments(t, g.greenKC, g.ns, g.crd)
	store := "file://" + filepath.Join(t.TempDir(), "store")
	code, out, errOut := runFerry(t, "--storage", store, "migrate", "--from", "blue", "--to", "cutover", "-f", g.config, "--lease-ttl", testLeaseTTL.String())
	if code != 0 || !strings.Contains(out, "shifted") {
		t.Fatalf("ferry migrate exited %d, want 0 and shifted (green's webhook server was unreachable %d times)\nstdout: %s\nstderr: %s", code, greens.unreachable.Load(), out, errOut)
	}
	id := runID(t, errOut)
	t.Cleanup(func() { runFerry(t, "--storage", store, "rollback", "--run", id, "--discard-green-writes") })
	for _, said := range []string{"await green's writers", "awaiting green's writers, one of which may serve their admission webhook: 1",
		"made and verified once they started"} {
		if !strings.Contains(out+errOut, said) {
			t.Errorf("the run does not say %q\nstdout: %s\nstderr: %s", said, out, errOut)
		}
	}
	tune, err := g.greenDyn.Resource(g.gvr).Namespace(g.ns).Get(ctx, "tune", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("green's experiment after the migration: %v", err)
	}
	if trials, _, _ := unstructured.NestedInt64(tune.Object, "spec", "trials"); trials != 4 {
		t.Errorf("green's experiment has %d trials, want blue's 4", trials)
	}
	if ann := tune.GetAnnotations(); ann["ferry.dev/paused"] != "" || ann[migrate.QuiescedAnnotation] != "" {
		t.Errorf("green's experiment carries %v; want its quiesce undone", ann)
	}
	if greens.admitted.Load() == 0 {
		t.Error("green's webhook admitted nothing")
	}
	d, err := g.greenKC.AppsV1().Deployments(g.ns).Get(ctx, "controller", metav1.GetOptions{})
	if err != nil || d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("green's controller after the migration: %v, %v; want 1 replica", d.Spec.Replicas, err)
	}
	t.Logf("green's webhook admitted %d changes and was unreachable for %d", greens.admitted.Load(), greens.unreachable.Load())
}

// guarded is a namespace of blue, quiesce-webhook, holding an Experiment "tune" (spec.trials 4)
// and the Deployment "controller" that serves the webhook admitting every create and change of
// Experiments there (Trials, which Experiments own, it does not guard); config moves it, with
// rules that stop both as Kubeflow's preset does.
type guarded struct {
	ns, config        string
	crd               testCRD
	gvr, trials       schema.GroupVersionResource
	blueKC, greenKC   kubernetes.Interface
	blueDyn, greenDyn dynamic.Interface
	*webhook          // blue's
}

func guardedExperiments(t *testing.T) guarded {
	t.Helper()
	green, greenKC := cutover(t)
	blue, blueKC := clients(t, "blue")
	_, blueDyn, err := blue.Clients()
	if err != nil {
		t.Fatal(err)
	}
	_, greenDyn, err := green.Clients()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "quiesce-webhook"
	experiments, trials := testCRD{group: "hooks.ferry.dev", kind: "Experiment"}, testCRD{group: "hooks.ferry.dev", kind: "Trial"}
	experimentsGVR := experiments.gvr()
	kubectl(t, "blue", experiments.manifest()+"---\n"+trials.manifest(), "apply", "-f", "-")
	kubectl(t, "blue", "", "wait", "--for=condition=Established", "crd/"+experiments.name(), "crd/"+trials.name(), "--timeout=60s")
	t.Cleanup(func() {
		for _, cluster := range []string{"blue", "cutover"} {
			kubectl(t, cluster, "", "delete", "crd", experiments.name(), trials.name(), "--ignore-not-found", "--wait")
		}
	})
	createNamespace(t, blueKC, ns, nil)
	removeAfter(t, ns, greenKC)
	createDeployment(t, blueKC, ns, "controller", corev1.PodSpec{Containers: []corev1.Container{{Name: "controller", Image: "controller"}}})
	experiment := &unstructured.Unstructured{Object: map[string]any{"apiVersion": experiments.group + "/v1", "kind": experiments.kind,
		"metadata": map[string]any{"name": "tune", "namespace": ns}, "spec": map[string]any{"trials": int64(4)}}}
	if _, err := blueDyn.Resource(experimentsGVR).Namespace(ns).Create(ctx, experiment, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "blue's controller ready", time.Minute, func(ctx context.Context) (bool, error) {
		return serving(ctx, blueKC, ns, "controller"), nil
	})

	hook := guardExperiments(t, blueKC, ns, experiments)
	// The API server takes a moment to call a new webhook.
	waitUntil(t, "the webhook admits changes of experiments", 30*time.Second, func(ctx context.Context) (bool, error) {
		_, err := blueDyn.Resource(experimentsGVR).Namespace(ns).Patch(ctx, "tune", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"checked":"yes"}}}`), metav1.PatchOptions{})
		return err == nil && hook.admitted.Load() > 0, nil
	})

	// As Kubeflow's preset orders them: the controller first, then its Experiments. The webhook
	// stays on blue: on green its address would be blue's server.
	config := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(config, []byte(`include: {namespaces: [`+ns+`]}
exclude: {resources: [validatingwebhookconfigurations.admissionregistration.k8s.io]}
quiesce:
- {resource: deployments.apps, namespace: `+ns+`, names: [controller], action: scale-to-zero, why: writes the experiments' results}
- {resource: `+experiments.name()+`, action: annotate, annotations: {ferry.dev/paused: "true"}, why: records which experiments ran}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	return guarded{ns: ns, config: config, crd: experiments, gvr: experimentsGVR, trials: trials.gvr(), blueKC: blueKC, greenKC: greenKC, blueDyn: blueDyn, greenDyn: greenDyn, webhook: hook}
}

// webhook is an admission webhook's server on this machine, as a cluster's controller serves it.
type webhook struct {
	admitted, unreachable atomic.Int32
}

// admitWhile admits every request while serves says the server of app serves, and answers as a
// Service of that name without endpoints otherwise.
func (hook *webhook) admitWhile(app string, serves func(*http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !serves(r) {
			hook.unreachable.Add(1)
			http.Error(w, "no endpoints available for service \""+app+"\"", http.StatusServiceUnavailable)
			return
		}
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "not an admission review", http.StatusBadRequest)
			return
		}
		hook.admitted.Add(1)
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		review.Request = nil
		_ = json.NewEncoder(w).Encode(review)
	})
}

// guardExperiments makes the cluster of kc call a webhook, served on this machine, to admit every
// create and change of the Experiments of namespace ns; it serves while the cluster's Deployment
// "controller" there has a pod that serves (serving), and refuses to be called otherwise, as a
// Service without ready endpoints does.
func guardExperiments(t *testing.T, kc kubernetes.Interface, ns string, experiments testCRD) *webhook {
	t.Helper()
	hook := &webhook{}
	srv := httptest.NewTLSServer(hook.admitWhile("controller", func(r *http.Request) bool { return serving(r.Context(), kc, ns, "controller") }))
	t.Cleanup(srv.Close)
	validateAt(t, kc, srv, "experiments."+experiments.group, "validator.experiments."+experiments.group, admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{experiments.group}, APIVersions: []string{"*"}, Resources: []string{experiments.plural()}}},
		map[string]string{corev1.LabelMetadataName: ns})
	return hook
}

// validateAt makes the cluster of kc call srv, a server on this machine, as the validating
// webhook webhook of configuration name (failurePolicy Fail) for the requests rule names in the
// namespaces labelled namespaces, until the test ends.
func validateAt(t *testing.T, kc kubernetes.Interface, srv *httptest.Server, name, webhook string, rule admissionregistrationv1.RuleWithOperations, namespaces map[string]string) {
	t.Helper()
	config := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: webhook,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(srv.URL + "/validate"),
				CABundle: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})},
			Rules:                   []admissionregistrationv1.RuleWithOperations{rule},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: namespaces},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To(int32(5)),
		}},
	}
	if _, err := kc.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(context.Background(), config, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kc.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), config.Name, metav1.DeleteOptions{})
	})
}

// serving says whether a pod of app serves, as a Service's ready endpoints say: it is ready, and
// not being deleted (a pod being deleted leaves the endpoints at once). The testbed's pods are
// ready the moment they are made; a real server takes seconds to start (an image to pull, a
// readiness probe), so a pod serves here from serverStart after it became ready.
func serving(ctx context.Context, kc kubernetes.Interface, ns, app string) bool {
	const serverStart = 2 * time.Second
	pods, err := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		return false
	}
	for _, p := range pods.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil && time.Since(c.LastTransitionTime.Time) >= serverStart {
				return true
			}
		}
	}
	return false
}
