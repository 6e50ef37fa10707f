package integration

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/snapshot"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestMoversStayOutOfTheMesh: Kubeflow labels its namespaces and every profile's for Istio's
// sidecar injection (istio-injection: enabled), whose webhook (failurePolicy Fail) injects a
// proxy into each pod made there but those labelled sidecar.istio.io/inject: "false". A mover
// needs no mesh: injected, it would wait on the mesh's control plane, take the proxy's share of
// the namespace's quota, and want NET_ADMIN where no CNI sets the redirect up. Here istiod is
// down, as during the mesh's own upgrade: the webhook refuses a tenant's pod, and the backup's
// mover passes it by.
func TestMoversStayOutOfTheMesh(t *testing.T) {
	_, blueKC := clients(t, "blue")
	ctx := context.Background()
	const ns, config = "mesh-tenant", "mesh-sidecar-injector"
	createNamespace(t, blueKC, ns, map[string]string{"istio-injection": "enabled"})
	removeAfter(t, ns, blueKC)
	files := map[string][]byte{"notebook.ipynb": []byte(`{"cells": []}`)}
	blueClaim(t, ns, "workspace", files, func(*corev1.PersistentVolumeClaimSpec) {})

	// Istio's namespace.sidecar-injector.istio.io, as Kubeflow installs it, its server down.
	hooks := blueKC.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if _, err := hooks.Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: config},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "namespace.sidecar-injector.istio.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/inject")},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			NamespaceSelector:       &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "istio-injection", Operator: metav1.LabelSelectorOpIn, Values: []string{"enabled"}}}},
			ObjectSelector:          &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "sidecar.istio.io/inject", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"false"}}}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
		}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hooks.Delete(context.Background(), config, metav1.DeleteOptions{}) })
	waitUntil(t, "the injector's webhook refuses a tenant's pod", 30*time.Second, func(ctx context.Context) (bool, error) {
		err := tenantPod(ctx, blueKC, ns, nil)
		return err != nil && strings.Contains(err.Error(), "failed calling webhook"), nil
	})

	store := "file://" + filepath.Join(t.TempDir(), "store")
	ferryBinary(t) // built before the clock starts
	start := time.Now()
	code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "--include-namespaces", ns, "--name", "mesh")
	if code != 0 {
		t.Fatalf("ferry backup exited %d after %s, want 0\nstdout: %s\nstderr: %s", code, time.Since(start).Round(time.Second), out, lastLines(errOut, 20))
	}
	_, m := readManifest(t, store, "mesh")
	if !slices.ContainsFunc(m.Volumes, func(v snapshot.Volume) bool { return v.Namespace == ns && v.Name == "workspace" }) {
		t.Errorf("the backup's volumes %+v lack %s/workspace", m.Volumes, ns)
	}
	t.Logf("ferry backup took %s", time.Since(start).Round(100*time.Millisecond))
}
