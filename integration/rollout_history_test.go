package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/snapshot"
)

// kubectl runs the testbed's kubectl (of the clusters' version) against one of its clusters, with
// stdin when given, and returns its output.
func kubectl(t *testing.T, cluster, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(tb.Bins["kubectl"], append([]string{"--kubeconfig", tb.Kubeconfig, "--context", cluster}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl --context %s %s: %v\n%s", cluster, strings.Join(args, " "), err, out)
	}
	return string(out)
}

const historyNS = "rollout-history"

// workloadRevision is a workload of kind at revision i: its image and change-cause name the
// revision, so the template a rollback goes to can be told from the others.
func workloadRevision(kind string, i int) string {
	name := strings.ToLower(kind)
	extra := ""
	switch kind {
	case "Deployment":
		extra = "  replicas: 2\n"
	case "StatefulSet":
		extra = "  replicas: 1\n  serviceName: statefulset\n"
	}
	return fmt.Sprintf(`apiVersion: apps/v1
kind: %[1]s
metadata:
  name: %[2]s
  namespace: %[3]s
  annotations:
    kubernetes.io/change-cause: "%[2]s release %[4]d"
spec:
%[5]s  selector:
    matchLabels: {app: %[2]s}
  template:
    metadata:
      labels: {app: %[2]s}
    spec:
      containers:
      - name: main
        image: registry.example/%[2]s:v%[4]d
`, kind, name, historyNS, i, extra)
}

// TestRolloutHistoryMoves gives a Deployment, a DaemonSet and a StatefulSet three revisions with
// change-causes on blue, backs them up and restores them onto green: kubectl rollout history shows
// the same revisions there, ferry verify passes, and kubectl rollout undo on green goes back to
// each one's second template.
func TestRolloutHistoryMoves(t *testing.T) {
	testbed.Require(t, tb)
	_, blueKC := clients(t, "blue")
	_, greenKC := clients(t, "green")
	removeAfter(t, historyNS, blueKC, greenKC)
	kubectl(t, "blue", "apiVersion: v1\nkind: Namespace\nmetadata: {name: "+historyNS+"}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: statefulset, namespace: "+historyNS+"}\nspec: {clusterIP: None, selector: {app: statefulset}, ports: [{port: 80}]}\n", "apply", "-f", "-")
	kinds := []string{"Deployment", "DaemonSet", "StatefulSet"}
	for i := 1; i <= 3; i++ {
		for _, kind := range kinds {
			kubectl(t, "blue", workloadRevision(kind, i), "apply", "-f", "-")
		}
		for _, kind := range kinds {
			// One revision per template: the next change waits until the controller recorded this one.
			kubectl(t, "blue", "", "rollout", "status", "-n", historyNS, strings.ToLower(kind)+"/"+strings.ToLower(kind), "--timeout", "90s")
		}
	}
	history := func(cluster, kind string) string {
		return kubectl(t, cluster, "", "rollout", "history", "-n", historyNS, strings.ToLower(kind)+"/"+strings.ToLower(kind))
	}
	for _, kind := range kinds {
		h := history("blue", kind)
		if !strings.Contains(h, "3         "+strings.ToLower(kind)+" release 3") || !strings.Contains(h, "1         "+strings.ToLower(kind)+" release 1") {
			t.Fatalf("blue's %s should have three revisions with change-causes:\n%s", kind, h)
		}
	}

	dir := t.TempDir()
	store := "file://" + filepath.Join(dir, "store")
	config, plan := filepath.Join(dir, "ferry.yaml"), filepath.Join(dir, "plan.yaml")
	if err := os.WriteFile(config, []byte("include:\n  namespaces: ["+historyNS+"]\n  resources: [namespaces, services, deployments.apps, replicasets.apps, daemonsets.apps, statefulsets.apps, controllerrevisions.apps, pods]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runFerry(t, "plan", "--from", "blue", "-f", config, "-o", plan); code != 0 {
		t.Fatalf("ferry plan exited %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "--plan", plan, "--name", "history"); code != 0 {
		t.Fatalf("ferry backup exited %d\n%s\n%s", code, out, errOut)
	}
	code, rep, errOut := runReportCommand(t, "--storage", store, "restore", "--to", "green", "--backup", "history")
	t.Logf("restore: exit %d, %v", code, rep.Counts)
	if code != 0 {
		t.Fatalf("restore exited %d: %s %+v\nstderr: %s", code, rep.Error, rep.Items, errOut)
	}
	code, rep, errOut = runReportCommand(t, "--storage", store, "verify", "--to", "green", "--backup", "history")
	t.Logf("verify: exit %d, %v", code, rep.Counts)
	if code != 0 {
		t.Fatalf("verify exited %d: %s %+v\nstderr: %s", code, rep.Error, rep.Items, errOut)
	}
	if n := rep.Counts["history"][snapshot.StatusIdentical]; n != 3 {
		t.Errorf("verify compared %d rollout histories, want 3: %v", n, rep.Counts)
	}
	for _, kind := range kinds {
		if b, g := history("blue", kind), history("green", kind); b != g {
			t.Errorf("kubectl rollout history of the %s differs:\nblue:\n%s\ngreen:\n%s", kind, b, g)
		}
	}

	// A rollback on green goes to each workload's second template.
	for _, kind := range kinds {
		name := strings.ToLower(kind)
		kubectl(t, "green", "", "rollout", "undo", "-n", historyNS, name+"/"+name)
		want := "registry.example/" + name + ":v2"
		waitUntil(t, kind+" rolled back on green", 30*time.Second, func(ctx context.Context) (bool, error) {
			image := kubectl(t, "green", "", "get", "-n", historyNS, name+"/"+name, "-o", "jsonpath={.spec.template.spec.containers[0].image}")
			return image == want, nil
		})
	}
	if image := kubectl(t, "blue", "", "get", "-n", historyNS, "deployment/deployment", "-o", "jsonpath={.spec.template.spec.containers[0].image}"); image != "registry.example/deployment:v3" {
		t.Errorf("blue's Deployment changed: %s", image)
	}
}
