package integration

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/snapshot"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const nodePortsNS = "node-ports"

// TestChosenNodePortsMove: node ports a user chose on blue (kubectl apply, server-side apply, a
// health check port) come back as they were on green, with the load balancer's addresses; an
// allocated one is allocated anew; one held on green is a blocking preflight finding; a chosen port
// changed on green is a difference verify names.
func TestChosenNodePortsMove(t *testing.T) {
	testbed.Require(t, tb)
	ctx := context.Background()
	_, blueKC := clients(t, "blue")
	_, greenKC := clients(t, "green")
	removeAfter(t, nodePortsNS, blueKC, greenKC)
	kubectl(t, "blue", `apiVersion: v1
kind: Namespace
metadata: {name: `+nodePortsNS+`}
---
apiVersion: v1
kind: Service
metadata: {name: chosen, namespace: `+nodePortsNS+`}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{name: http, port: 80, nodePort: 30080}]
---
apiVersion: v1
kind: Service
metadata: {name: allocated, namespace: `+nodePortsNS+`}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{name: http, port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: balanced, namespace: `+nodePortsNS+`}
spec:
  type: LoadBalancer
  externalTrafficPolicy: Local
  healthCheckNodePort: 30082
  loadBalancerIP: 198.51.100.10
  loadBalancerSourceRanges: [203.0.113.0/24]
  externalIPs: [198.51.100.20]
  selector: {app: web}
  ports: [{name: https, port: 443}]
`, "apply", "-f", "-")
	kubectl(t, "blue", `apiVersion: v1
kind: Service
metadata: {name: chosen-ssa, namespace: `+nodePortsNS+`}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{port: 8080, nodePort: 30081}]
`, "apply", "--server-side", "-f", "-")
	blueAllocated := kubectl(t, "blue", "", "get", "-n", nodePortsNS, "service/allocated", "-o", "jsonpath={.spec.ports[0].nodePort}")

	dir := t.TempDir()
	store := "file://" + filepath.Join(dir, "store")
	config, plan := filepath.Join(dir, "ferry.yaml"), filepath.Join(dir, "plan.yaml")
	if err := os.WriteFile(config, []byte("include:\n  namespaces: ["+nodePortsNS+"]\n  resources: [namespaces, services]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A port of blue's that a Service of green holds blocks the move, before anything is applied.
	kubectl(t, "green", "apiVersion: v1\nkind: Namespace\nmetadata: {name: squat}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: squatter, namespace: squat}\nspec: {type: NodePort, ports: [{port: 80, nodePort: 30081}]}\n", "apply", "-f", "-")
	code, out, errOut := runFerry(t, "plan", "--from", "blue", "--to", "green", "-f", config)
	if code != 3 || !strings.Contains(out, "node port 30081 (8080/TCP) was chosen on the source and is taken on the target by service squat/squatter") {
		t.Errorf("plan with a node port taken on green: exit %d, want 3 and a blocking finding\n%s\n%s", code, out, errOut)
	}
	kubectl(t, "green", "", "delete", "namespace", "squat", "--wait")
	if code, out, errOut := runFerry(t, "plan", "--from", "blue", "--to", "green", "-f", config, "-o", plan); code != 0 {
		t.Fatalf("plan once the port is free: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "--plan", plan, "--name", "node-ports"); code != 0 {
		t.Fatalf("ferry backup exited %d\n%s\n%s", code, out, errOut)
	}
	code, rep, errOut := runReportCommand(t, "--storage", store, "restore", "--to", "green", "--backup", "node-ports")
	if code != 0 {
		t.Fatalf("restore exited %d: %s %+v\nstderr: %s", code, rep.Error, rep.Items, errOut)
	}
	for _, tc := range []struct{ service, path, want string }{
		{"chosen", "{.spec.ports[0].nodePort}", "30080"},
		{"chosen-ssa", "{.spec.ports[0].nodePort}", "30081"},
		{"balanced", "{.spec.healthCheckNodePort}", "30082"},
		{"balanced", "{.spec.loadBalancerIP} {.spec.loadBalancerSourceRanges} {.spec.externalIPs}", `198.51.100.10 ["203.0.113.0/24"] ["198.51.100.20"]`},
	} {
		if got := kubectl(t, "green", "", "get", "-n", nodePortsNS, "service/"+tc.service, "-o", "jsonpath="+tc.path); got != tc.want {
			t.Errorf("green's service %s: %s = %q, want %q as on blue", tc.service, tc.path, got, tc.want)
		}
	}
	// The allocated port was not sent: green's API server allocated its own, in no manager's fields.
	allocated, err := greenKC.CoreV1().Services(nodePortsNS).Get(ctx, "allocated", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range allocated.ManagedFields {
		if m.FieldsV1 != nil && strings.Contains(string(m.FieldsV1.Raw), `"f:nodePort"`) {
			t.Errorf("restore sent blue's allocated node port %s: green's manager %s set it to %d", blueAllocated, m.Manager, allocated.Spec.Ports[0].NodePort)
		}
	}

	// A second restore finds every Service as it is: nothing is made again, no port is taken twice.
	code, rep, errOut = runReportCommand(t, "--storage", store, "restore", "--to", "green", "--backup", "node-ports")
	if code != 0 || rep.Counts["objects"][snapshot.StatusRestored] != 0 || rep.Counts["objects"][snapshot.StatusRecreated] != 0 {
		t.Errorf("a second restore exited %d with %v: %s %+v\nstderr: %s", code, rep.Counts, rep.Error, rep.Items, errOut)
	}

	verify := func() (int, restoreReport) {
		code, rep, errOut := runReportCommand(t, "--storage", store, "verify", "--to", "green", "--backup", "node-ports")
		if code == 1 || code == 2 {
			t.Fatalf("verify could not verify (exit %d): %s\nstderr: %s", code, rep.Error, errOut)
		}
		return code, rep
	}
	if code, rep := verify(); code != 0 {
		t.Fatalf("verify exited %d: %+v", code, rep.Items)
	}
	kubectl(t, "green", "", "patch", "-n", nodePortsNS, "service/chosen", "--type", "json", "-p", `[{"op":"replace","path":"/spec/ports/0/nodePort","value":30090}]`)
	code, rep = verify()
	want := snapshot.ReportItem{Kind: "objects", Status: snapshot.StatusDifferent, Name: "v1 Service " + nodePortsNS + "/chosen", Detail: "spec.ports[0].nodePort: backup 30080, target 30090"}
	if code != 3 || !slices.Contains(rep.Items, want) {
		t.Errorf("verify after green's chosen node port changed: exit %d, items %+v; want exit 3 and %+v", code, rep.Items, want)
	}
}

const clusterIPsNS = "cluster-ips"

// TestChosenClusterIPsMove: cluster IPs a user chose on blue (kubectl apply, server-side apply),
// as an in-cluster NFS server's, which volumes name by IP because nodes do not resolve cluster
// DNS, are green's Services' IPs after a restore; an allocated one is allocated anew; one held on
// green is a blocking preflight finding.
func TestChosenClusterIPsMove(t *testing.T) {
	testbed.Require(t, tb)
	_, blueKC := clients(t, "blue")
	_, greenKC := clients(t, "green")
	removeAfter(t, clusterIPsNS, blueKC, greenKC)
	kubectl(t, "blue", `apiVersion: v1
kind: Namespace
metadata: {name: `+clusterIPsNS+`}
---
apiVersion: v1
kind: Service
metadata: {name: nfs-server, namespace: `+clusterIPsNS+`}
spec:
  clusterIP: 10.0.0.11
  selector: {app: nfs}
  ports: [{name: nfs, port: 2049}]
---
apiVersion: v1
kind: Service
metadata: {name: allocated, namespace: `+clusterIPsNS+`}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80}]
`, "apply", "-f", "-")
	kubectl(t, "blue", `apiVersion: v1
kind: Service
metadata: {name: dns-forwarder, namespace: `+clusterIPsNS+`}
spec:
  clusterIP: 10.0.0.12
  selector: {app: dns}
  ports: [{name: dns, port: 53, protocol: UDP}]
`, "apply", "--server-side", "-f", "-")

	dir := t.TempDir()
	store := "file://" + filepath.Join(dir, "store")
	config, plan := filepath.Join(dir, "ferry.yaml"), filepath.Join(dir, "plan.yaml")
	if err := os.WriteFile(config, []byte("include:\n  namespaces: ["+clusterIPsNS+"]\n  resources: [namespaces, services]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// An IP of blue's that a Service of green holds blocks the move, before anything is applied.
	kubectl(t, "green", "apiVersion: v1\nkind: Namespace\nmetadata: {name: squat-ip}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: squatter, namespace: squat-ip}\nspec: {clusterIP: 10.0.0.12, ports: [{port: 80}]}\n", "apply", "-f", "-")
	code, out, errOut := runFerry(t, "plan", "--from", "blue", "--to", "green", "-f", config)
	if code != 3 || !strings.Contains(out, "cluster IP 10.0.0.12 was chosen on the source and is taken on the target by service squat-ip/squatter") {
		t.Errorf("plan with a cluster IP taken on green: exit %d, want 3 and a blocking finding\n%s\n%s", code, out, errOut)
	}
	kubectl(t, "green", "", "delete", "namespace", "squat-ip", "--wait")
	if code, out, errOut := runFerry(t, "plan", "--from", "blue", "--to", "green", "-f", config, "-o", plan); code != 0 {
		t.Fatalf("plan once the IP is free: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "--plan", plan, "--name", "cluster-ips"); code != 0 {
		t.Fatalf("ferry backup exited %d\n%s\n%s", code, out, errOut)
	}
	if code, rep, errOut := runReportCommand(t, "--storage", store, "restore", "--to", "green", "--backup", "cluster-ips"); code != 0 {
		t.Fatalf("restore exited %d: %s %+v\nstderr: %s", code, rep.Error, rep.Items, errOut)
	}
	for service, want := range map[string]string{"nfs-server": "10.0.0.11", "dns-forwarder": "10.0.0.12"} {
		if got := kubectl(t, "green", "", "get", "-n", clusterIPsNS, "service/"+service, "-o", "jsonpath={.spec.clusterIP}"); got != want {
			t.Errorf("green's Service %s has cluster IP %s, want blue's chosen %s", service, got, want)
		}
	}
	if got := kubectl(t, "green", "", "get", "-n", clusterIPsNS, "service/allocated", "-o", "jsonpath={.spec.clusterIP}"); got == "" {
		t.Errorf("green's Service allocated has no cluster IP")
	}
	if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "cluster-ips"); code != 0 {
		t.Errorf("verify exited %d\n%s\n%s", code, out, errOut)
	}
}
