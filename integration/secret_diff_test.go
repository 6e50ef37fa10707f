package integration

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/snapshot"
)

const secretDiffNS = "secret-diff"

// TestSecretDifferencesHideValues: a Secret changed on green after a restore is a difference that
// verify (JSON and plain) and a second restore name by its key and lengths; neither the backup's
// canary nor green's, nor their base64 forms, appears in any output. kubectl apply keeps the
// values in the last-applied annotation too, which must not show either. The same holds for a
// ConfigMap's key that ferry.yaml marks sensitive.
func TestSecretDifferencesHideValues(t *testing.T) {
	testbed.Require(t, tb)
	_, blueKC := clients(t, "blue")
	_, greenKC := clients(t, "green")
	removeAfter(t, secretDiffNS, blueKC, greenKC)
	canary := func() string {
		b := make([]byte, 8)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		return "canary-" + hex.EncodeToString(b)
	}
	backedUp, changed := canary(), canary()
	secret := func(value string) string {
		return "apiVersion: v1\nkind: Secret\nmetadata: {name: creds, namespace: " + secretDiffNS + "}\nstringData: {password: " + value + "}\n" +
			"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: " + secretDiffNS + "}\ndata: {token: " + value + "}\n"
	}
	kubectl(t, "blue", "apiVersion: v1\nkind: Namespace\nmetadata: {name: "+secretDiffNS+"}\n---\n"+secret(backedUp), "apply", "-f", "-")

	dir := t.TempDir()
	store := "file://" + filepath.Join(dir, "store")
	config, plan := filepath.Join(dir, "ferry.yaml"), filepath.Join(dir, "plan.yaml")
	if err := os.WriteFile(config, []byte("include:\n  namespaces: ["+secretDiffNS+"]\n  resources: [namespaces, secrets, configmaps]\n"+
		"sensitive:\n- {resource: configmaps, paths: [data.token]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runFerry(t, "plan", "--from", "blue", "--to", "green", "-f", config, "-o", plan); code != 0 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "--plan", plan, "--name", "secret-diff"); code != 0 {
		t.Fatalf("ferry backup exited %d\n%s\n%s", code, out, errOut)
	}
	if code, rep, errOut := runReportCommand(t, "--storage", store, "restore", "--to", "green", "--backup", "secret-diff"); code != 0 {
		t.Fatalf("restore exited %d: %s %+v\nstderr: %s", code, rep.Error, rep.Items, errOut)
	}
	kubectl(t, "green", secret(changed), "apply", "-f", "-")

	secretID, configMapID := "v1 Secret "+secretDiffNS+"/creds", "v1 ConfigMap "+secretDiffNS+"/settings"
	hidden := func(what string, outputs ...string) {
		t.Helper()
		for _, v := range []string{backedUp, changed} {
			for _, form := range []string{v, base64.StdEncoding.EncodeToString([]byte(v)), v[:12]} {
				for _, out := range outputs {
					if strings.Contains(out, form) {
						t.Errorf("%s shows a Secret's value (%q):\n%s", what, form, out)
					}
				}
			}
		}
	}
	named := func(what string, rep restoreReport, status string) {
		t.Helper()
		for _, want := range []struct{ id, field string }{{secretID, "data.password"}, {configMapID, "data.token"}} {
			found := false
			for _, it := range rep.Items {
				if it.Name == want.id && it.Status == status && strings.Contains(it.Detail, want.field+": differs (backup 23 bytes, target 23 bytes)") {
					t.Logf("%s: %s", what, it.Detail)
					found = true
				}
			}
			if !found {
				t.Errorf("%s: no %s item for %s naming %s and its lengths: %+v", what, status, want.id, want.field, rep.Items)
			}
		}
	}

	code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "secret-diff", "-o", "json")
	if code != 3 {
		t.Errorf("verify -o json: exit %d, want 3\n%s\n%s", code, out, errOut)
	}
	hidden("verify -o json", out, errOut)
	code, rep, errOut := runReportCommand(t, "--storage", store, "verify", "--to", "green", "--backup", "secret-diff")
	if code != 3 {
		t.Errorf("verify -o json: exit %d, want 3", code)
	}
	named("verify", rep, snapshot.StatusDifferent)
	hidden("verify's report", rep.Error, errOut)

	code, out, errOut = runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "secret-diff")
	if code != 3 || !strings.Contains(out, secretID) || !strings.Contains(out, "data.password: differs") {
		t.Errorf("verify: exit %d, want 3 and %s named with data.password\n%s\n%s", code, secretID, out, errOut)
	}
	hidden("verify", out, errOut)

	// A second restore finds the Secret changed and leaves it: its skip names the key, not the values.
	code, out, errOut = runFerry(t, "--storage", store, "restore", "--to", "green", "--backup", "secret-diff", "-o", "json")
	if code != 3 {
		t.Errorf("second restore: exit %d, want 3\n%s\n%s", code, out, errOut)
	}
	hidden("the second restore", out, errOut)
	code, rep, _ = runReportCommand(t, "--storage", store, "restore", "--to", "green", "--backup", "secret-diff")
	if code != 3 {
		t.Errorf("second restore: exit %d, want 3", code)
	}
	named("the second restore", rep, snapshot.StatusSkipped)
}
