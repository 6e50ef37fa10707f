package integration

import (
	"testing"

	"github.com/ferrykube/ferry/integration/testbed"
)

const finishedWorkNS = "finished-work"

// finishedWorkCRDs are two kinds of work a controller runs from a custom resource: a training job
// whose status is a subresource (as Kubeflow's PyTorchJob), and a workflow whose status is part of
// the object (as Argo's Workflow).
var finishedWorkCRDs = []testCRD{{group: "work.ferry.dev", kind: "TrainJob", statusSubresource: true}, {group: "work.ferry.dev", kind: "Workflow"}}

// TestFinishedWorkStaysFinished: custom resources whose status records finished work (a training
// job, a workflow) are on green as finished as on blue, so that green's controllers do not run
// them again; a job that has not started yet has no status there either. Green has the CRDs, as
// the platform installed on it does.
func TestFinishedWorkStaysFinished(t *testing.T) {
	testbed.Require(t, tb)
	_, blueKC := clients(t, "blue")
	_, greenKC := clients(t, "green")
	removeAfter(t, finishedWorkNS, blueKC, greenKC)
	installCRDs(t, finishedWorkCRDs...)
	kubectl(t, "blue", `apiVersion: v1
kind: Namespace
metadata: {name: `+finishedWorkNS+`}
---
apiVersion: work.ferry.dev/v1
kind: TrainJob
metadata: {name: resnet, namespace: `+finishedWorkNS+`}
spec: {image: trainer:1, gpus: 8}
---
apiVersion: work.ferry.dev/v1
kind: TrainJob
metadata: {name: queued, namespace: `+finishedWorkNS+`}
spec: {image: trainer:1, gpus: 8}
---
apiVersion: work.ferry.dev/v1
kind: Workflow
metadata: {name: nightly-etl, namespace: `+finishedWorkNS+`}
spec: {entrypoint: main}
status:
  phase: Succeeded
  startedAt: "2026-11-30T02:00:00Z"
  finishedAt: "2026-11-30T02:41:07Z"
  nodes: {nightly-etl: {phase: Succeeded, type: Steps}}
`, "apply", "-f", "-")
	kubectl(t, "blue", "", "patch", "-n", finishedWorkNS, "trainjobs.work.ferry.dev/resnet", "--subresource=status", "--type=merge", "-p",
		`{"status":{"observedGeneration":1,"completionTime":"2026-11-29T23:12:00Z","conditions":[{"type":"Created","status":"True"},{"type":"Succeeded","status":"True","reason":"JobSucceeded","observedGeneration":1}]}}`)

	store := moveNamespace(t, finishedWorkNS, "finished-work")
	// What a user (and the job's controller) reads on green.
	for _, tc := range []struct{ object, path, want string }{
		{"trainjobs.work.ferry.dev/resnet", `{.status.conditions[?(@.type=="Succeeded")].status} {.status.completionTime} {.status.observedGeneration}`, "True 2026-11-29T23:12:00Z 1"},
		{"trainjobs.work.ferry.dev/queued", `{.status}`, ""},
		{"workflows.work.ferry.dev/nightly-etl", `{.status.phase} {.status.finishedAt}`, "Succeeded 2026-11-30T02:41:07Z"},
	} {
		if got := kubectl(t, "green", "", "get", "-n", finishedWorkNS, tc.object, "-o", "jsonpath="+tc.path); got != tc.want {
			t.Errorf("green's %s: %q, want blue's %q", tc.object, got, tc.want)
		}
	}
	if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "finished-work"); code != 0 {
		t.Errorf("verify exited %d\n%s\n%s", code, out, errOut)
	}
}
