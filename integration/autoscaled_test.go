package integration

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/snapshot"
)

const autoscaledNS = "autoscaled"

// TestAutoscaledReplicasAreTheAutoscalers: a Deployment a HorizontalPodAutoscaler scales (web)
// runs as many replicas on green as green's load asks for, not blue's: once green's autoscaler
// scaled it, verify says so in a note, of it and of its ReplicaSet, and passes; a Deployment no
// autoscaler scales (plain) scaled by hand still differs.
func TestAutoscaledReplicasAreTheAutoscalers(t *testing.T) {
	testbed.Require(t, tb)
	_, blueKC := clients(t, "blue")
	_, greenKC := clients(t, "green")
	removeAfter(t, autoscaledNS, blueKC, greenKC)
	deployment := func(name string, replicas string) string {
		return `apiVersion: apps/v1
kind: Deployment
metadata: {name: ` + name + `, namespace: ` + autoscaledNS + `}
spec:
  replicas: ` + replicas + `
  selector: {matchLabels: {app: ` + name + `}}
  template:
    metadata: {labels: {app: ` + name + `}}
    spec:
      containers:
      - name: app
        image: registry.example/` + name + `:1
        resources: {requests: {cpu: 100m}}
`
	}
	kubectl(t, "blue", `apiVersion: v1
kind: Namespace
metadata: {name: `+autoscaledNS+`}
---
`+deployment("web", "4")+`---
`+deployment("plain", "3")+`---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: web, namespace: `+autoscaledNS+`}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 1
  maxReplicas: 6
  metrics:
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 70}}
`, "apply", "-f", "-")
	store := "file://" + filepath.Join(t.TempDir(), "store")
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "-f", namespacesConfig(t, autoscaledNS), "--name", "autoscaled"); code != 0 {
		t.Fatalf("ferry backup exited %d\n%s\n%s", code, out, errOut)
	}
	if code, rep, errOut := runReportCommand(t, "--storage", store, "restore", "--to", "green", "--backup", "autoscaled"); code != 0 {
		t.Fatalf("ferry restore exited %d: %s %+v\nstderr: %s", code, rep.Error, rep.Items, lastLines(errOut, 10))
	}
	// Green's autoscaler scales web down through its scale subresource, as it does once green's
	// load is lower than blue's; someone scales plain by hand.
	kubectl(t, "green", "", "scale", "-n", autoscaledNS, "deployment/web", "--replicas=2")
	kubectl(t, "green", "", "scale", "-n", autoscaledNS, "deployment/plain", "--replicas=1")
	code, rep, errOut := runReportCommand(t, "--storage", store, "verify", "--to", "green", "--backup", "autoscaled")
	var webNotes, problems []string
	for _, it := range rep.Items {
		switch {
		case strings.Contains(it.Name, "/web"):
			if it.Status != snapshot.StatusAutoscaled {
				problems = append(problems, it.Status+" "+it.Name+": "+it.Detail)
			} else {
				webNotes = append(webNotes, it.Name)
			}
		case strings.Contains(it.Name, "Deployment "+autoscaledNS+"/plain"):
			if it.Status != snapshot.StatusDifferent || !strings.Contains(it.Detail, "spec.replicas") {
				problems = append(problems, "plain: "+it.Status+" "+it.Detail)
			}
		}
	}
	if code != 3 || len(problems) > 0 || len(webNotes) != 2 {
		t.Fatalf("ferry verify exited %d, want 3 for plain alone; web's notes %q (want its Deployment and ReplicaSet); problems %q\nitems %+v\nstderr: %s",
			code, webNotes, problems, rep.Items, lastLines(errOut, 10))
	}
	t.Logf("verify's notes of web: %q", webNotes)
}
