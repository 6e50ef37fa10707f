package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/migrate"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// theLease reads the one lease in storage and its key.
func theLease(t *testing.T, store storage.Backend) (string, migrate.LeaseInfo) {
	t.Helper()
	ctx := context.Background()
	var keys []string
	if err := store.List(ctx, migrate.LeasesPrefix, func(o storage.ObjectInfo) error { keys = append(keys, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 {
		t.Fatalf("leases in storage: %v, want one", keys)
	}
	rc, err := store.Get(ctx, keys[0])
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var info migrate.LeaseInfo
	if err := json.NewDecoder(rc).Decode(&info); err != nil {
		t.Fatal(err)
	}
	return keys[0], info
}

func putLease(t *testing.T, store storage.Backend, key string, info migrate.LeaseInfo) {
	t.Helper()
	data, _ := json.Marshal(info)
	if err := store.Put(context.Background(), key, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
}

// TestMigrateTwoRunsAtOnce: two ferry migrate processes started together on the same clusters and
// storage (S3 on MinIO), where a killed run left its lease, expired: exactly one proceeds and
// finishes; the other exits non-zero naming the run and the process that holds the lease, and
// leaves no journal.
func TestMigrateTwoRunsAtOnce(t *testing.T) {
	_, blueKC := clients(t, "blue")
	ctx := context.Background()
	const ns = "lease-race"
	if _, err := blueKC.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := blueKC.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := namespacesConfig(t, ns)
	url := backupMinIO(t, "lease-race")
	store, err := storage.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--storage", url, "migrate", "--from", "blue", "--to", "green", "-f", cfg, "--lease-ttl", "10s", "--allow-skipped"}

	// A run killed right after it began leaves its lease; it expired since.
	if code, _, errOut := runFerry(t, append(args, "--crash-at", "planned:begin")...); code != -1 {
		t.Fatalf("ferry should have been killed, exited %d\nstderr: %s", code, errOut)
	}
	key, dead := theLease(t, store)
	dead.Expires = time.Now().Add(-time.Second).UTC()
	putLease(t, store, key, dead)
	runsBefore, err := migrate.ListRuns(ctx, store)
	if err != nil {
		t.Fatal(err)
	}

	runs := []*ferryRun{startFerry(t, args...), startFerry(t, args...)}
	codes := []int{runs[0].exitCode(t, 3*time.Minute), runs[1].exitCode(t, 3*time.Minute)}
	winner, loser := 0, 1
	if codes[0] != 0 {
		winner, loser = 1, 0
	}
	if codes[winner] != 0 || codes[loser] == 0 {
		t.Fatalf("exit codes %v, want one 0 and one non-zero\nfirst stderr: %s\nsecond stderr: %s", codes, runs[0].stderr.String(), runs[1].stderr.String())
	}
	id := runID(t, runs[winner].stderr.String())
	holder := fmt.Sprintf("run %s (ferry pid %d on ", id, runs[winner].cmd.Process.Pid)
	if msg := runs[loser].stderr.String(); !strings.Contains(msg, holder) || !strings.Contains(msg, "holds the lease") {
		t.Errorf("the second run's message should name the holder %q...:\n%s", holder, msg)
	}
	if strings.Contains(runs[loser].stderr.String(), "Run run-") {
		t.Errorf("the second run must not start:\n%s", runs[loser].stderr.String())
	}
	runsAfter, err := migrate.ListRuns(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	if len(runsAfter) != len(runsBefore)+1 {
		t.Errorf("runs in storage: %v before, %v after; want only the winner's journal added", runsBefore, runsAfter)
	}
	if got := journal(t, url, id).Current(); got != migrate.Shifted {
		t.Errorf("the winner's run is %q, want %q", got, migrate.Shifted)
	}
	if _, info := theLease(t, store); !info.Released || info.Run != id || info.Generation != dead.Generation+1 {
		t.Errorf("the lease after the winner finished: %+v; want the winner's, generation %d, released", info, dead.Generation+1)
	}
}

// TestMigrateStopsWhenItsLeaseIsTakenOver: while a run streams blue's volume, another holder
// rewrites its lease. The run stops within one TTL: its journal gets nothing more (its next
// append is refused), the backup never completes, green is never touched, and it exits non-zero
// naming the new holder.
func TestMigrateStopsWhenItsLeaseIsTakenOver(t *testing.T) {
	cfg := interruptConfig(t)
	_, greenKC := cutover(t)             // green with a provisioner for the claim
	removeAfter(t, interruptNS, greenKC) // the run may finish before the lease is taken
	ctx := context.Background()
	if _, err := greenKC.CoreV1().Namespaces().Get(ctx, interruptNS, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("green must not hold namespace %s before the run: %v", interruptNS, err)
	}
	dir := t.TempDir()
	url := "file://" + dir
	store, err := storage.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 6 * time.Second
	r := startFerry(t, "--storage", url, "migrate", "--from", "blue", "--to", "cutover", "-f", cfg, "--lease-ttl", ttl.String(), "--allow-skipped")
	waitUntil(t, "the run streaming blue's volume", 2*time.Minute, func(context.Context) (bool, error) {
		if !r.running() {
			return false, fmt.Errorf("ferry ended first with %d\nstderr: %s", r.cmd.ProcessState.ExitCode(), r.stderr.String())
		}
		files, _ := filepath.Glob(filepath.Join(dir, "backups", "*", "volumes", interruptNS, ".ferry-tmp-*"))
		for _, f := range files {
			if info, err := os.Stat(f); err == nil && info.Size() > 0 {
				return true, nil
			}
		}
		return false, nil
	})

	key, held := theLease(t, store)
	intruder := migrate.LeaseInfo{Run: "run-intruder", Holder: "intruder", Who: "pid 1 on elsewhere", Generation: held.Generation + 1, Expires: time.Now().Add(time.Hour).UTC()}
	putLease(t, store, key, intruder)
	takenOver := time.Now()

	code := r.exitCode(t, 2*time.Minute)
	stopped := time.Since(takenOver)
	out := r.stdout.String() + r.stderr.String()
	t.Logf("the run ended %s after its lease was taken over, exit %d", stopped.Round(10*time.Millisecond), code)
	if code == 0 || !strings.Contains(out, "run run-intruder (ferry pid 1 on elsewhere) took the lease") {
		t.Fatalf("the run exited %d; want non-zero naming the new holder\n%s", code, out)
	}
	if stopped > ttl {
		t.Errorf("the run ended %s after losing its lease, more than one TTL (%s)", stopped, ttl)
	}
	id := runID(t, r.stderr.String())
	for _, e := range journal(t, url, id).Events() {
		if e.At.After(takenOver) {
			t.Errorf("event %d (%s %s) was written after the lease was taken over", e.Seq, e.State, e.Phase)
		}
	}
	if j := journal(t, url, id); j.IsDone(migrate.BackedUp, 0) {
		t.Error("the backup step finished after the lease was lost")
	}
	if _, err := snapshot.ReadManifest(ctx, store, id); err == nil {
		t.Error("the backup completed after the lease was lost")
	}
	if _, err := greenKC.CoreV1().Namespaces().Get(ctx, interruptNS, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("green was touched: namespace %s: %v", interruptNS, err)
	}
	if _, now := theLease(t, store); now.Holder != intruder.Holder || now.Generation != intruder.Generation {
		t.Errorf("the old holder wrote the lease after losing it: %+v", now)
	}
}
