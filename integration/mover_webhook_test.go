package integration

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/migrate"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// TestMoversPassAWebhookAStoppedWriterServes: Kubeflow labels every profile namespace for Katib's
// metrics collector, whose webhook (served by katib-controller, failurePolicy Fail) must admit
// every pod made there, and the preset stops katib-controller. On a real Kubeflow the backup's
// mover pods for the notebooks' claims were refused ("failed calling webhook"), after blue was
// quiesced; on green the same webhook, restored with its server stopped, refused the pods that
// restore and verify the claims.
//
// Here the webhook is served as Kubeflow serves it, through a Service selecting the controller's
// pods (an ExternalName Service, which the API server dials at the name it gives: this machine),
// by a server that tells the clusters apart by the Service's name they ask for (green's
// namespace is mapped) and admits while that cluster's controller has a pod that serves. ferry
// migrate must move the claim; while blue stays stopped, its webhook must still be called for
// every pod but ferry's movers, also for a tenant's pod labelled as a mover; once each side's
// writers start again its webhook must be as it was.
func TestMoversPassAWebhookAStoppedWriterServes(t *testing.T) {
	green, greenKC := cutover(t)
	blue, blueKC := clients(t, "blue")
	ctx := context.Background()
	if err := green.Apply(ctx, os.Stderr, filepath.Join(repoDir(), "integration", "testdata", "standard-storageclass.yaml")); err != nil {
		t.Fatal(err)
	}
	const ns, system, greenSystem, label = "mover-webhook", "mover-webhook-system", "mover-webhook-green", "hooks.ferry.dev/inject"
	createNamespace(t, blueKC, ns, map[string]string{label: "enabled"})
	createNamespace(t, blueKC, system, nil)
	removeAfter(t, ns, greenKC)
	removeAfter(t, greenSystem, greenKC)
	files := map[string][]byte{"notebook.ipynb": []byte(`{"cells": []}`), "data/train.csv": []byte("a,b\n1,2\n")}
	blueDir := blueClaim(t, ns, "workspace", files, func(*corev1.PersistentVolumeClaimSpec) {})
	createDeployment(t, blueKC, system, "controller", corev1.PodSpec{Containers: []corev1.Container{{Name: "controller", Image: "controller"}}})
	waitUntil(t, "blue's controller ready", time.Minute, func(ctx context.Context) (bool, error) {
		return serving(ctx, blueKC, system, "controller"), nil
	})
	// A tenant who may make pods in the namespace, not as ferry's user.
	if _, err := blueKC.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant-edit"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: "rbac.authorization.k8s.io", Name: "tenant@example.com"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := blue.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "tenant@example.com"}
	tenantKC, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	hook := guardPods(t, map[string]podsServer{system: {blueKC, system}, greenSystem: {greenKC, greenSystem}}, system, "controller", label)
	// The API server takes a moment to call a new webhook.
	waitUntil(t, "the webhook admits pods", 30*time.Second, func(ctx context.Context) (bool, error) {
		return tenantPod(ctx, blueKC, ns, nil) == nil && hook.admitted.Load() > 0, nil
	})
	original, err := blueKC.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, hook.config, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	config := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(config, []byte(`include: {namespaces: [`+ns+`, `+system+`]}
namespaceMap: {`+system+`: `+greenSystem+`}
quiesce:
- {resource: deployments.apps, namespace: `+system+`, names: [controller], action: scale-to-zero, why: writes the trials' results}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	store := "file://" + filepath.Join(t.TempDir(), "store")
	code, out, errOut := runFerry(t, "--storage", store, "migrate", "--from", "blue", "--to", "cutover", "-f", config, "--lease-ttl", testLeaseTTL.String())
	if code != 0 || !strings.Contains(out, "shifted") {
		t.Fatalf("ferry migrate exited %d, want 0 and shifted (the webhook's server was unreachable %d times)\nstdout: %s\nstderr: %s", code, hook.unreachable.Load(), out, lastLines(errOut, 30))
	}
	id := runID(t, errOut)
	if said := "webhook configurations whose pod webhooks ferry's movers pass while their server is stopped: 1"; !strings.Contains(out, said) {
		t.Errorf("ferry migrate's report does not say %q\nstdout: %s", said, out)
	}
	if got, want := filesNow(ctx, greenKC, ns, "workspace"), claimFiles(t, blueDir); !reflect.DeepEqual(got, want) {
		t.Errorf("green's claim holds %v, want blue's %v", got, want)
	}
	// Blue's writers stay stopped after the cutover: its webhook refuses every pod but ferry's
	// movers, a tenant's too, labelled as a mover or not, and one of ferry's user not a mover.
	for _, labels := range []map[string]string{nil, {"app.kubernetes.io/name": "ferry-mover"}} {
		if err := tenantPod(ctx, tenantKC, ns, labels); err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
			t.Errorf("a tenant's pod on blue labelled %v, whose webhook's server is stopped: %v; want it refused by the webhook", labels, err)
		}
	}
	if err := tenantPod(ctx, blueKC, ns, nil); err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Errorf("a pod on blue of ferry's user, not a mover, whose webhook's server is stopped: %v; want it refused by the webhook", err)
	}
	// Green's writers started at the shift: its webhook is blue's as it was.
	sameWebhooks(t, "green's after the shift", greenKC, original)

	code, out, errOut = runFerry(t, "--storage", store, "rollback", "--run", id, "--discard-green-writes", "--lease-ttl", testLeaseTTL.String())
	if code != 0 {
		t.Fatalf("ferry rollback exited %d, want 0\nstdout: %s\nstderr: %s", code, out, lastLines(errOut, 30))
	}
	sameWebhooks(t, "blue's after the rollback", blueKC, original)
	waitUntil(t, "blue's webhook admits a tenant's pod again", time.Minute, func(ctx context.Context) (bool, error) {
		return tenantPod(ctx, tenantKC, ns, nil) == nil, nil
	})
	t.Logf("the webhook admitted %d pods and was unreachable for %d", hook.admitted.Load(), hook.unreachable.Load())
}

// sameWebhooks fails the test unless the cluster's configuration of want's name has want's
// webhooks' selectors and match conditions, with no quiesce record.
func sameWebhooks(t *testing.T, which string, kc kubernetes.Interface, want *admissionregistrationv1.MutatingWebhookConfiguration) {
	t.Helper()
	got, err := kc.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), want.Name, metav1.GetOptions{})
	if err != nil {
		t.Errorf("%s webhook configuration: %v", which, err)
		return
	}
	if record, ok := got.Annotations[migrate.QuiescedAnnotation]; ok {
		t.Errorf("%s webhook configuration still carries the quiesce record %s", which, record)
	}
	for i := range want.Webhooks {
		if i >= len(got.Webhooks) || !reflect.DeepEqual(got.Webhooks[i].ObjectSelector, want.Webhooks[i].ObjectSelector) ||
			!reflect.DeepEqual(got.Webhooks[i].NamespaceSelector, want.Webhooks[i].NamespaceSelector) ||
			!reflect.DeepEqual(got.Webhooks[i].MatchConditions, want.Webhooks[i].MatchConditions) {
			t.Errorf("%s webhooks: %+v; want %+v", which, got.Webhooks, want.Webhooks)
			return
		}
	}
}

// tenantPod creates a pod in ns, with labels, as a tenant would, and deletes it.
func tenantPod(ctx context.Context, kc kubernetes.Interface, ns string, labels map[string]string) error {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "tenant-", Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	made, err := kc.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err == nil {
		_ = kc.CoreV1().Pods(ns).Delete(ctx, made.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}
	return err
}

// podsHook is a webhook's server for the pods of the namespaces with a label, named config.
type podsHook struct {
	*webhook
	config string
}

// podsServer is where a cluster runs a webhook's server: its namespace there.
type podsServer struct {
	kc        kubernetes.Interface
	namespace string
}

// guardPods makes blue call a mutating webhook for every pod made in a namespace labelled label,
// as Katib's metrics collector webhook is: failurePolicy Fail, through the Service app in
// namespace system, whose selector is its Deployment's pods. The API server dials an
// ExternalName Service at its name: here this machine, where the webhook's server runs, with a
// certificate for the Service's name in each namespace of servers. A request names the Service
// it is for (the TLS server name, "app.namespace.svc"), so the server knows the cluster: it
// admits while that cluster's Deployment app has a pod that serves (serving), and answers as a
// Service without endpoints otherwise.
func guardPods(t *testing.T, servers map[string]podsServer, system, app, label string) podsHook {
	t.Helper()
	ctx := context.Background()
	hook := &webhook{}
	byName := map[string]podsServer{}
	var names []string
	for ns, s := range servers {
		byName[app+"."+ns+".svc"] = s
		names = append(names, app+"."+ns+".svc")
	}
	srv := httptest.NewUnstartedServer(hook.admitWhile(app, func(r *http.Request) bool {
		s, ok := byName[r.TLS.ServerName]
		return ok && serving(r.Context(), s.kc, s.namespace, app)
	}))
	cert, ca := serviceCertificate(t, names...)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	blue := servers[system].kc
	service := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: app},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: u.Hostname(), Selector: map[string]string{"app": app},
			Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(int32(port))}}}}
	if _, err := blue.CoreV1().Services(system).Create(ctx, service, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	config := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "pods.hooks.ferry.dev"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "inject.pods.hooks.ferry.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service:  &admissionregistrationv1.ServiceReference{Namespace: system, Name: app, Path: ptr.To("/mutate"), Port: ptr.To(int32(port))},
				CABundle: ca},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{label: "enabled"}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To(int32(5)),
		}},
	}
	if _, err := blue.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, config, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, s := range servers {
			_ = s.kc.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), config.Name, metav1.DeleteOptions{})
		}
	})
	return podsHook{webhook: hook, config: config.Name}
}

// serviceCertificate is a self-signed serving certificate for names, and its PEM, which the API
// server is given as the webhook's CA bundle.
func serviceCertificate(t *testing.T, names ...string) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestMigrationStopsBeforeThePolicyRefusesItsMovers: a policy engine (Kyverno's
// require-run-as-nonroot, Gatekeeper's allowed users) refuses pods that run as root in a
// tenant's namespace, and ferry's movers read claims as root. Such a refusal came only with the
// first mover, after blue's writers were stopped: `ferry migrate … backed-up failed … create
// mover pod …: admission webhook … denied the request`. ferry plan and the migration's preflight
// try a mover in each namespace with dryRun: the plan names the namespace and the policy's words,
// and the migration stops before any writer is stopped.
func TestMigrationStopsBeforeThePolicyRefusesItsMovers(t *testing.T) {
	_, greenKC := cutover(t)
	_, blueKC := clients(t, "blue")
	ctx := context.Background()
	const ns, open = "mover-policy", "mover-policy-open"
	createNamespace(t, blueKC, ns, map[string]string{"policy.ferry.dev/run-as-nonroot": "enforce"})
	createNamespace(t, blueKC, open, nil)
	removeAfter(t, ns, greenKC)
	removeAfter(t, open, greenKC)
	blueClaim(t, ns, "workspace", map[string][]byte{"notes.txt": []byte("kept\n")}, func(*corev1.PersistentVolumeClaimSpec) {})
	blueClaim(t, open, "workspace", map[string][]byte{"notes.txt": []byte("kept\n")}, func(*corev1.PersistentVolumeClaimSpec) {})
	// The writer that mounts the claim, which the migration stops first.
	createDeployment(t, blueKC, ns, "notebook", corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000)},
		Containers: []corev1.Container{{Name: "notebook", Image: "notebook", VolumeMounts: []corev1.VolumeMount{{Name: "work", MountPath: "/home/jovyan"}}}},
		Volumes:    []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "workspace"}}}}})
	runningPod(t, blueKC, ns, "app=notebook")
	denyRoot(t, blueKC, ns, "policy.ferry.dev/run-as-nonroot")

	config := namespacesConfig(t, ns, open)
	code, out, errOut := runFerry(t, "plan", "--from", "blue", "--to", "cutover", "-f", config)
	want := `blocking\s+mover pods in namespace ` + ns + `\s+on the source, ferry's mover pods .* would be refused: admission webhook "nonroot.policy.ferry.dev" denied the request: containers must not run as root`
	if code != 3 || !regexpLine(out, want) {
		t.Errorf("ferry plan exited %d, want 3 and a line %q\nstdout: %s\nstderr: %s", code, want, out, lastLines(errOut, 10))
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "blocking") {
			t.Log(line)
		}
	}
	if strings.Contains(out, "namespace "+open) {
		t.Errorf("ferry plan names %s, whose movers are admitted\nstdout: %s", open, out)
	}

	store := "file://" + filepath.Join(t.TempDir(), "store")
	code, out, errOut = runFerry(t, "--storage", store, "migrate", "--from", "blue", "--to", "cutover", "-f", config, "--lease-ttl", testLeaseTTL.String())
	if code == 0 || !strings.Contains(out+errOut, "mover pods in namespace "+ns) {
		t.Errorf("ferry migrate exited %d, want a failure naming the mover pods of %s\nstdout: %s\nstderr: %s", code, ns, out, lastLines(errOut, 10))
	}
	d, err := blueKC.AppsV1().Deployments(ns).Get(ctx, "notebook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, quiesced := d.Annotations[migrate.QuiescedAnnotation]; quiesced || d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("blue's notebook after the migration stopped: %d replicas, annotations %v; want it running, never stopped", ptr.Deref(d.Spec.Replicas, -1), d.Annotations)
	}
}

// denyRoot makes blue call a validating webhook, served on this machine, that denies every pod
// of a namespace labelled label=enforce whose containers may run as root, as a policy engine's
// require-run-as-nonroot rule does; ns is such a namespace.
func denyRoot(t *testing.T, kc kubernetes.Interface, ns, label string) {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "not an admission review", http.StatusBadRequest)
			return
		}
		var pod corev1.Pod
		allowed := json.Unmarshal(review.Request.Object.Raw, &pod) == nil
		var podNonRoot *bool
		var podUser *int64
		if psc := pod.Spec.SecurityContext; psc != nil {
			podNonRoot, podUser = psc.RunAsNonRoot, psc.RunAsUser
		}
		for _, c := range pod.Spec.Containers {
			nonRoot, user := podNonRoot, podUser
			if sc := c.SecurityContext; sc != nil {
				nonRoot, user = cmp.Or(sc.RunAsNonRoot, nonRoot), cmp.Or(sc.RunAsUser, user)
			}
			if !ptr.Deref(nonRoot, false) || ptr.Deref(user, -1) == 0 {
				allowed = false
			}
		}
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: allowed}
		if !allowed {
			review.Response.Result = &metav1.Status{Code: http.StatusForbidden, Message: "containers must not run as root"}
		}
		review.Request = nil
		_ = json.NewEncoder(w).Encode(review)
	}))
	t.Cleanup(srv.Close)
	validateAt(t, kc, srv, "nonroot.policy.ferry.dev", "nonroot.policy.ferry.dev", admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}},
		map[string]string{label: "enforce"})
	// The API server takes a moment to call a new webhook.
	waitUntil(t, "the policy denies a root pod", 30*time.Second, func(ctx context.Context) (bool, error) {
		_, err := kc.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "root-"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "denied the request"), nil
	})
}
