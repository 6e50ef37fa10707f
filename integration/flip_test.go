package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/migrate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestFlipThatFailsHalfWayRefusesAPlainRollback: a run stopped after blue's quiesce is flipped to
// green by hand through a traffic command that changes the front and then fails (as a command
// list that applied its first change and not its second). Traffic may already reach green, so
// the journal holds the note that green may take writes, and a plain ferry rollback refuses
// (exit 4) until told what to do with them; --discard-green-writes then puts blue's split back.
func TestFlipThatFailsHalfWayRefusesAPlainRollback(t *testing.T) {
	cutover(t)
	_, blueKC := clients(t, "blue")
	ctx := context.Background()
	const ns = "flip-fails"
	if _, err := blueKC.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	removeAfter(t, ns, blueKC)
	if _, err := blueKC.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app"}, Data: map[string]string{"k": "v"}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	// The front: a file holding "BLUE GREEN". The command writes the split there first, then
	// fails on any split that gives green traffic, as its second change would.
	dir := t.TempDir()
	front := filepath.Join(dir, "front")
	script := filepath.Join(dir, "set-split")
	if err := os.WriteFile(script, []byte(fmt.Sprintf(`#!/bin/sh
echo "$FERRY_BLUE_WEIGHT $FERRY_GREEN_WEIGHT" > %q
if [ "$FERRY_GREEN_WEIGHT" -gt 0 ]; then
  echo "second change: no such server" >&2
  exit 1
fi
`, front)), 0o755); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "ferry.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf("include: {namespaces: [%s]}\ntraffic:\n  type: exec\n  exec: {command: [%q]}\n", ns, script)), 0o644); err != nil {
		t.Fatal(err)
	}
	url := backupMinIO(t, "flip-fails")

	code, out, errOut := runFerry(t, "--storage", url, "migrate", "--from", "blue", "--to", "cutover", "-f", config, "--lease-ttl", testLeaseTTL.String(), "--crash-at", "quiesced:done")
	if code != -1 {
		t.Fatalf("ferry migrate should have been killed after blue's quiesce, exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	id := runID(t, errOut)
	time.Sleep(testLeaseTTL + 100*time.Millisecond) // the killed run's lease expires

	code, out, errOut = runFerry(t, "--storage", url, "flip", "--run", id, "--to", "green")
	if code == 0 {
		t.Fatalf("ferry flip through a failing command exited 0\nstdout: %s\nstderr: %s", out, errOut)
	}
	if got, _ := os.ReadFile(front); strings.TrimSpace(string(got)) != "0 100" {
		t.Fatalf("the front after the failed flip: %q, want the command's first change (0 100) in place", got)
	}
	j := journal(t, url, id)
	note, ok := lastNote(j, migrate.NoteGreenWrites)
	if !ok {
		t.Fatalf("the journal lacks %q after a flip to green that failed half way", migrate.NoteGreenWrites)
	}
	if _, ok := lastNote(j, migrate.NoteTrafficSaved); !ok {
		t.Errorf("the journal lacks blue's traffic state (%q) saved before the flip", migrate.NoteTrafficSaved)
	}
	t.Logf("the failed flip: exit %d, %s; journaled %q at %s", code, strings.TrimSpace(errOut), note.Detail, note.At.Format(time.RFC3339Nano))

	code, out, errOut = runFerry(t, "--storage", url, "rollback", "--run", id)
	if code != 4 || !strings.Contains(errOut, "--discard-green-writes") || !strings.Contains(errOut, "--carry-back") {
		t.Fatalf("a plain rollback after the failed flip exited %d, want 4 naming --carry-back and --discard-green-writes\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if got, _ := os.ReadFile(front); strings.TrimSpace(string(got)) != "0 100" {
		t.Errorf("the refused rollback changed the front: %q", got)
	}
	code, out, errOut = runFerry(t, "--storage", url, "rollback", "--run", id, "--discard-green-writes")
	if code != 0 {
		t.Fatalf("rollback --discard-green-writes exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if got, _ := os.ReadFile(front); strings.TrimSpace(string(got)) != "100 0" {
		t.Errorf("the front after the rollback: %q, want blue's saved 100 0", got)
	}
}
