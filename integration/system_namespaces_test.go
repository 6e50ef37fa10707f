package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/plans"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	ownNamespacesApp   = "own-namespaces-app"
	ownNamespacesLabel = "ferry-test=own-namespaces"
)

// TestClusterOwnNamespacesStay: kube-system holds what each cluster runs for itself (DNS, the
// proxy, the network, cloud controllers, each configured for its cluster). A backup of the
// whole cluster leaves its contents behind, and the plan says so: restored onto green they
// would make green run blue's network plugin, or, existing there, stop the run (or, with
// --existing update, point green's proxy at blue). Named in include.namespaces, they move.
func TestClusterOwnNamespacesStay(t *testing.T) {
	testbed.Require(t, tb)
	_, blueKC := clients(t, "blue")
	_, greenKC := clients(t, "green")
	removeAfter(t, ownNamespacesApp, blueKC, greenKC)
	ctx := context.Background()
	t.Cleanup(func() {
		for _, side := range []string{"blue", "green"} {
			kubectl(t, side, "", "delete", "-n", "kube-system", "configmap/coredns", "daemonset/kube-proxy", "secret/sealed-secrets-key", "--ignore-not-found")
		}
	})
	kubectl(t, "blue", `apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system, labels: {ferry-test: own-namespaces}}
data: {Corefile: ".:53 { forward . 10.0.0.53 }"}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: kube-proxy, namespace: kube-system, labels: {ferry-test: own-namespaces}}
spec:
  selector: {matchLabels: {k8s-app: kube-proxy}}
  template:
    metadata: {labels: {k8s-app: kube-proxy}}
    spec:
      containers: [{name: kube-proxy, image: "registry.example/kube-proxy:v1.33.0", args: ["--kubeconfig=/var/lib/kube-proxy/blue.conf"]}]
---
apiVersion: v1
kind: Secret
metadata: {name: sealed-secrets-key, namespace: kube-system, labels: {ferry-test: own-namespaces}}
type: kubernetes.io/tls
data: {tls.crt: Y2VydA==, tls.key: a2V5}
---
apiVersion: v1
kind: Namespace
metadata: {name: `+ownNamespacesApp+`}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: `+ownNamespacesApp+`, labels: {ferry-test: own-namespaces}}
data: {mode: blue}
`, "apply", "-f", "-")
	kubectl(t, "green", `apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system, labels: {ferry-test: own-namespaces}}
data: {Corefile: ".:53 { forward . 10.1.0.53 }"}
`, "apply", "-f", "-")

	// The whole cluster, but for the test's objects only.
	dir := t.TempDir()
	config := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	everything := config("everything.yaml", "include: {resources: [configmaps, daemonsets.apps, secrets], labelSelector: "+ownNamespacesLabel+"}\n")
	planFile := filepath.Join(dir, "plan.json")
	if code, out, errOut := runFerry(t, "plan", "--from", "blue", "-f", everything, "-o", "json"); code != 0 {
		t.Fatalf("ferry plan exited %d\n%s", code, errOut)
	} else if err := os.WriteFile(planFile, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	var plan plans.Plan
	if data, err := os.ReadFile(planFile); err != nil || json.Unmarshal(data, &plan) != nil {
		t.Fatalf("read the plan: %v", err)
	}
	left := map[string]bool{}
	for _, e := range plan.Excluded {
		if e.Namespace == "kube-system" && strings.Contains(e.Reason, "the cluster's own namespace") {
			left[e.Resource] = true
		}
	}
	for _, gr := range []string{"configmaps", "daemonsets.apps", "secrets"} {
		if !left[gr] {
			t.Errorf("the plan does not say that kube-system's %s stay (the cluster's own namespace); excluded: %+v", gr, plan.Excluded)
		}
	}

	store := "file://" + filepath.Join(dir, "store")
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "-f", everything, "--name", "whole"); code != 0 {
		t.Fatalf("ferry backup exited %d\n%s\n%s", code, out, errOut)
	}
	if code, rep, errOut := runReportCommand(t, "--storage", store, "restore", "--to", "green", "--backup", "whole"); code != 0 {
		t.Errorf("restore exited %d, want 0: %s %+v\nstderr: %s", code, rep.Error, rep.Items, lastLines(errOut, 10))
	}
	if cm, err := greenKC.CoreV1().ConfigMaps(ownNamespacesApp).Get(ctx, "settings", metav1.GetOptions{}); err != nil || cm.Data["mode"] != "blue" {
		t.Errorf("green's %s/settings: %v %v, want blue's", ownNamespacesApp, cm.Data, err)
	}
	if cm, err := greenKC.CoreV1().ConfigMaps("kube-system").Get(ctx, "coredns", metav1.GetOptions{}); err != nil || !strings.Contains(cm.Data["Corefile"], "10.1.0.53") {
		t.Errorf("green's kube-system/coredns: %q %v, want green's own", cm.Data["Corefile"], err)
	}
	if _, err := greenKC.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("green runs blue's kube-system/kube-proxy DaemonSet (get: %v)", err)
	}
	if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "whole"); code != 0 {
		t.Errorf("verify exited %d\n%s\n%s", code, out, lastLines(errOut, 10))
	}

	// Named, kube-system's objects move: a key every sealed Secret of the cluster was sealed to.
	named := config("named.yaml", "include: {namespaces: [\"*\", kube-system], resources: [secrets], labelSelector: "+ownNamespacesLabel+"}\n")
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "-f", named, "--name", "named"); code != 0 {
		t.Fatalf("ferry backup (kube-system named) exited %d\n%s\n%s", code, out, errOut)
	}
	if code, rep, errOut := runReportCommand(t, "--storage", store, "restore", "--to", "green", "--backup", "named"); code != 0 {
		t.Errorf("restore (kube-system named) exited %d, want 0: %s %+v\nstderr: %s", code, rep.Error, rep.Items, lastLines(errOut, 10))
	}
	if s, err := greenKC.CoreV1().Secrets("kube-system").Get(ctx, "sealed-secrets-key", metav1.GetOptions{}); err != nil || string(s.Data["tls.key"]) != "key" {
		t.Errorf("green's kube-system/sealed-secrets-key after a backup that names kube-system: %v (the key matches: %v)", err, err == nil && string(s.Data["tls.key"]) == "key")
	}
}
