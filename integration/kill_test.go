package integration

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrykube/ferry/snapshot"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// storedFiles lists the files file storage holds of a backup (temporary files of unfinished
// writes are not files of it).
func storedFiles(dir, backup string) map[string]bool {
	out := map[string]bool{}
	root := filepath.Join(dir, "backups", backup)
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasPrefix(d.Name(), ".ferry-tmp-") {
			rel, _ := filepath.Rel(root, p)
			out[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	return out
}

// killWhen starts ferry and SIGKILLs it as soon as cond holds of the backup's files, polled as
// fast as the machine allows. It reports whether ferry was killed (not done before).
func killWhen(t *testing.T, dir, backup string, cond func(files map[string]bool) bool, args ...string) bool {
	t.Helper()
	run := startFerry(t, args...)
	for run.running() {
		if cond(storedFiles(dir, backup)) {
			run.cmd.Process.Signal(syscall.SIGKILL)
			break
		}
	}
	code := run.exitCode(t, time.Minute)
	return code == -1
}

// checkLeft checks what a killed ferry left of a backup: listed as complete only with its
// manifest, never as Velero's, and restore refuses anything but a complete backup.
func checkLeft(t *testing.T, url, dir, backup, when string) {
	t.Helper()
	files := storedFiles(dir, backup)
	got, listed := listBackups(t, url)[backup]
	switch {
	case len(files) == 0:
		if listed {
			t.Errorf("%s: nothing stored, yet listed as %+v", when, got)
		}
		return
	case got.State == snapshot.Velero:
		t.Errorf("%s: listed as velero, files %v", when, keys(files))
	case got.State == snapshot.Complete && !files[snapshot.ManifestFile]:
		t.Errorf("%s: listed as complete without a manifest, files %v", when, keys(files))
	case got.State != snapshot.Complete && files[snapshot.ManifestFile]:
		t.Errorf("%s: listed as %s with its manifest", when, got.State)
	}
	if got.State != snapshot.Complete {
		code, _, errOut := runFerry(t, "--storage", url, "verify", "--to", "blue", "--backup", backup)
		if code != 2 || !strings.Contains(errOut, "incomplete") && !strings.Contains(errOut, "still being written") {
			t.Errorf("%s: verify of a %s backup exited %d, want 2 saying why: %s", when, got.State, code, lastLine(errOut))
		}
	}
	t.Logf("%s: %d files, listed as %s", when, len(files), got.State)
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestKilledAtEveryFileOfABackupAndItsDelete runs the real ferry with file storage and SIGKILLs
// it once each file of a backup is stored, then once each step of `ferry backups delete` is
// done: nothing it leaves lists as complete unless its manifest is there, nothing ever as
// Velero's, and verify refuses whatever is not complete.
func TestKilledAtEveryFileOfABackupAndItsDelete(t *testing.T) {
	ctx := context.Background()
	_, kc := clients(t, "blue")
	ns := "kill-each-write"
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%02d", i), Namespace: ns}, Data: map[string]string{"v": strings.Repeat("x", 1000)}}
		if _, err := kc.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := namespacesConfig(t, ns)
	dir := t.TempDir()
	url := "file://" + dir

	// The files of a whole backup, in the order they appear.
	code, _, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "-f", cfg, "--name", "whole")
	if code != 0 {
		t.Fatalf("ferry backup exited %d: %s", code, errOut)
	}
	whole := storedFiles(dir, "whole")
	if !whole[snapshot.ManifestFile] || !whole[snapshot.VeleroFile] {
		t.Fatalf("the whole backup's files: %v", keys(whole))
	}
	// The heartbeat comes and goes: at most the files of the whole backup and it.
	n := len(whole) + 1
	killed := 0
	for k := 1; k <= n; k++ {
		name := fmt.Sprintf("killed-%d", k)
		if killWhen(t, dir, name, func(files map[string]bool) bool { return len(files) >= k }, "--storage", url, "backup", "--from", "blue", "-f", cfg, "--name", name) {
			killed++
		}
		checkLeft(t, url, dir, name, fmt.Sprintf("backup killed once %d files were stored", k))
	}
	// Killed right after velero-backup.json, before the manifest: the case that listed as Velero.
	for i := range 3 {
		name := fmt.Sprintf("killed-velero-%d", i)
		killWhen(t, dir, name, func(files map[string]bool) bool { return files[snapshot.VeleroFile] }, "--storage", url, "backup", "--from", "blue", "-f", cfg, "--name", name)
		checkLeft(t, url, dir, name, "backup killed once velero-backup.json was stored")
	}
	if killed < n/2 {
		t.Errorf("only %d of %d backups were killed before they finished", killed, n)
	}

	// ferry backups delete, killed once the manifest is gone, once velero-backup.json is gone,
	// and half way through: a complete backup padded with files to take its time.
	for i, tt := range []struct {
		name string
		cond func(files map[string]bool) bool
	}{
		{"the manifest removed", func(f map[string]bool) bool { return !f[snapshot.ManifestFile] }},
		{"velero-backup.json removed", func(f map[string]bool) bool { return !f[snapshot.VeleroFile] }},
		{"half the files removed", func(f map[string]bool) bool { return len(f) < 1000 }},
	} {
		name := fmt.Sprintf("del-%d", i)
		if code, _, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "-f", cfg, "--name", name); code != 0 {
			t.Fatalf("ferry backup exited %d: %s", code, errOut)
		}
		// Files a delete removes before the claim, which it removes last.
		pad := filepath.Join(dir, "backups", name, "volumes", "pad")
		os.MkdirAll(pad, 0o755)
		for i := range 2000 {
			os.WriteFile(filepath.Join(pad, fmt.Sprintf("f%04d", i)), nil, 0o644)
		}
		wasKilled := killWhen(t, dir, name, tt.cond, "--storage", url, "backups", "delete", name)
		checkLeft(t, url, dir, name, "delete killed once "+tt.name)
		if !wasKilled {
			t.Logf("delete finished before %s could be seen", tt.name)
		}
	}
}
