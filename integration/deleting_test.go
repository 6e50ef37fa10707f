package integration

import (
	"context"
	"testing"

	"github.com/ferrykube/ferry/integration/testbed"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const leavingNS = "leaving"

// TestObjectsBeingDeletedStay: an object being deleted on blue, held by a finalizer whose
// controller is slow or gone, is not made on green, where it would not be being deleted; the
// rest of its namespace moves, and verify passes.
func TestObjectsBeingDeletedStay(t *testing.T) {
	testbed.Require(t, tb)
	_, blueKC := clients(t, "blue")
	_, greenKC := clients(t, "green")
	removeAfter(t, leavingNS, blueKC, greenKC)
	t.Cleanup(func() { // let the namespace go
		kubectl(t, "blue", "", "patch", "-n", leavingNS, "configmap/leaving", "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
	})
	kubectl(t, "blue", `apiVersion: v1
kind: Namespace
metadata: {name: `+leavingNS+`}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: leaving, namespace: `+leavingNS+`, finalizers: [example.com/hold]}
data: {state: old}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: staying, namespace: `+leavingNS+`}
data: {state: current}
`, "apply", "-f", "-")
	kubectl(t, "blue", "", "delete", "-n", leavingNS, "configmap/leaving", "--wait=false")

	store := moveNamespace(t, leavingNS, "leaving")
	ctx := context.Background()
	if _, err := greenKC.CoreV1().ConfigMaps(leavingNS).Get(ctx, "leaving", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("green has the ConfigMap blue is deleting (get: %v)", err)
	}
	if _, err := greenKC.CoreV1().ConfigMaps(leavingNS).Get(ctx, "staying", metav1.GetOptions{}); err != nil {
		t.Errorf("green's ConfigMap staying: %v", err)
	}
	if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "leaving"); code != 0 {
		t.Errorf("verify exited %d\n%s\n%s", code, out, errOut)
	}
}
