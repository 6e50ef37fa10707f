package integration

import (
	"context"
	"testing"

	"github.com/ferrykube/ferry/integration/testbed"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const debuggedNS = "debugged"

// TestDebuggedPodsMove: a pod someone ran by hand (a toolbox, a one-off migration) and then
// debugged with `kubectl debug` holds an ephemeral container, which the API server takes only
// through the pod's ephemeralcontainers subresource, never in a create. The pod moves without
// that debugging session, and verify passes.
func TestDebuggedPodsMove(t *testing.T) {
	testbed.Require(t, tb)
	_, blueKC := clients(t, "blue")
	_, greenKC := clients(t, "green")
	removeAfter(t, debuggedNS, blueKC, greenKC)
	kubectl(t, "blue", `apiVersion: v1
kind: Namespace
metadata: {name: `+debuggedNS+`}
---
apiVersion: v1
kind: Pod
metadata: {name: toolbox, namespace: `+debuggedNS+`}
spec:
  containers: [{name: shell, image: "registry.example/toolbox:1", command: [sleep, infinity]}]
`, "apply", "-f", "-")
	ctx := context.Background()
	// What `kubectl debug -n debugged toolbox --image=busybox --target=shell` writes.
	if err := testbed.DebugPod(ctx, blueKC, debuggedNS, "toolbox", "shell"); err != nil {
		t.Fatalf("debug blue's pod: %v", err)
	}

	store := moveNamespace(t, debuggedNS, "debugged")
	got, err := greenKC.CoreV1().Pods(debuggedNS).Get(ctx, "toolbox", metav1.GetOptions{})
	switch {
	case err != nil:
		t.Errorf("green's pod toolbox: %v", err)
	case len(got.Spec.Containers) != 1 || got.Spec.Containers[0].Name != "shell":
		t.Errorf("green's pod toolbox runs %+v, want blue's container shell", got.Spec.Containers)
	case len(got.Spec.EphemeralContainers) != 0:
		t.Errorf("green's pod toolbox holds blue's debugging session: %+v", got.Spec.EphemeralContainers)
	}
	if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "debugged"); code != 0 {
		t.Errorf("verify exited %d\n%s\n%s", code, out, lastLines(errOut, 10))
	}
}
