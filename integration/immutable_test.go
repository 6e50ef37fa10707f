package integration

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/ferrykube/ferry/integration/testbed"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const immutableNS = "immutable"

// TestImmutableObjectsAreReplaced: a ConfigMap or Secret marked immutable, or a StatefulSet's
// claim templates, change only by being deleted and made again: how a release changes one, how
// an operator grows a StatefulSet's volumes (and so how green's may change before a carry-back).
// A restore that replaces (--existing replace, as the carry-back does) or updates existing
// objects makes the backup's copy in its place; the API server refuses the write.
func TestImmutableObjectsAreReplaced(t *testing.T) {
	testbed.Require(t, tb)
	_, blueKC := clients(t, "blue")
	_, greenKC := clients(t, "green")
	removeAfter(t, immutableNS, blueKC, greenKC)
	objects := func(version, password, size string) string {
		return `apiVersion: v1
kind: Namespace
metadata: {name: ` + immutableNS + `}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: flags, namespace: ` + immutableNS + `}
immutable: true
data: {version: "` + version + `"}
---
apiVersion: v1
kind: Secret
metadata: {name: creds, namespace: ` + immutableNS + `}
immutable: true
stringData: {password: ` + password + `}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: ` + immutableNS + `}
spec:
  replicas: 0
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: db, image: "registry.example/db:1"}]}
  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: ` + size + `}}}
`
	}
	kubectl(t, "blue", objects("1", "blue-password", "1Gi"), "apply", "-f", "-")
	kubectl(t, "green", objects("2", "green-password", "2Gi"), "apply", "-f", "-")

	store := "file://" + filepath.Join(t.TempDir(), "store")
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "-f", namespacesConfig(t, immutableNS), "--name", "immutable"); code != 0 {
		t.Fatalf("ferry backup exited %d\n%s\n%s", code, out, errOut)
	}
	ctx := context.Background()
	for _, policy := range []string{"replace", "update"} {
		kubectl(t, "green", "", "delete", "-n", immutableNS, "configmap/flags", "secret/creds", "statefulset/db")
		kubectl(t, "green", objects("2", "green-password", "2Gi"), "apply", "-f", "-")
		if code, rep, errOut := runReportCommand(t, "--storage", store, "restore", "--to", "green", "--backup", "immutable", "--existing", policy); code != 0 {
			t.Errorf("restore --existing %s exited %d, want 0: %s %+v\nstderr: %s", policy, code, rep.Error, rep.Items, lastLines(errOut, 10))
		}
		if cm, err := greenKC.CoreV1().ConfigMaps(immutableNS).Get(ctx, "flags", metav1.GetOptions{}); err != nil || cm.Data["version"] != "1" || cm.Immutable == nil || !*cm.Immutable {
			t.Errorf("--existing %s: green's ConfigMap flags: %v (immutable %v), %v; want blue's version 1, immutable", policy, cm.Data, cm.Immutable, err)
		}
		if s, err := greenKC.CoreV1().Secrets(immutableNS).Get(ctx, "creds", metav1.GetOptions{}); err != nil || string(s.Data["password"]) != "blue-password" {
			t.Errorf("--existing %s: green's Secret creds is not blue's (%v)", policy, err)
		}
		if sts, err := greenKC.AppsV1().StatefulSets(immutableNS).Get(ctx, "db", metav1.GetOptions{}); err != nil || len(sts.Spec.VolumeClaimTemplates) != 1 ||
			sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().String() != "1Gi" {
			t.Errorf("--existing %s: green's StatefulSet db is not blue's, with claims of 1Gi (%v)", policy, err)
		}
		if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "immutable"); code != 0 {
			t.Errorf("--existing %s: verify exited %d\n%s\n%s", policy, code, out, lastLines(errOut, 10))
		}
	}
}
