package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/volumes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// TestVolumeMoverImageChangedIsRefused: while a restore stages a big claim on green, someone who
// may edit pods in the namespace changes the restore mover's image (as `kubectl set image` does).
// ferry refuses to exec into the pod again: the restore exits non-zero naming the pod and both
// images, the claim's files are as they were (only the staging folder is new), and the pod is
// left for the operator to inspect.
func TestVolumeMoverImageChangedIsRefused(t *testing.T) {
	blue, bkc := clients(t, "blue")
	green, gkc := clients(t, "green")
	ctx := context.Background()
	const ns, claim, backup, evil = "mi-lab", "scratch", "mi-swapped", "evil:1"
	removeAfter(t, ns, bkc, gkc)

	// Blue: random data, big enough that staging it takes seconds.
	createClaim(t, bkc, ns, claim, nil)
	src := dataDir(t, "mi-"+claim)
	t.Cleanup(func() { os.RemoveAll(src) })
	for i := range 2 {
		f, err := os.Create(filepath.Join(src, fmt.Sprintf("shard-%d.bin", i)))
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(f, io.LimitReader(rand.NewChaCha8([32]byte{byte(i), 18}), 64<<20))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := blue.BindClaim(ctx, ns, claim, src); err != nil {
		t.Fatal(err)
	}
	storeDir := t.TempDir()
	url := "file://" + storeDir
	config := namespacesConfig(t, ns)
	ferryBinary(t) // built before the clock starts
	start := time.Now()
	if code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "-f", config, "--name", backup); code != 0 {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	t.Logf("backup took %s", time.Since(start).Round(time.Millisecond))

	// Green: the claim, bound, holding a file of its own.
	if err := green.Apply(ctx, io.Discard, filepath.Join(repoDir(), "integration", "testdata", "standard-storageclass.yaml")); err != nil {
		t.Fatal(err)
	}
	createClaim(t, gkc, ns, claim, ptr.To("standard"))
	waitUntil(t, "green's claim bound", time.Minute, func(ctx context.Context) (bool, error) {
		pvc, err := gkc.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		return err == nil && pvc.Spec.VolumeName != "" && pvc.Status.Phase == corev1.ClaimBound, nil
	})
	dst := claimFolder(t, gkc, ns, claim)
	t.Cleanup(func() { os.RemoveAll(dst) })
	if err := os.WriteFile(filepath.Join(dst, "green.txt"), []byte("green's own"), 0o644); err != nil {
		t.Fatal(err)
	}
	withoutStaging := func(lines []string) []string {
		return slices.DeleteFunc(lines, func(l string) bool { return strings.HasPrefix(l, volumes.StagingPrefix) })
	}
	before := walkTree(t, dst)

	// The restore; once the mover stages data, its image changes.
	run := startFerry(t, "--storage", url, "restore", "--to", "green", "--backup", backup, "--mover-image", "ferry:dev", "-o", "json")
	var mover corev1.Pod
	waitUntil(t, "the restore mover staging", 4*time.Minute, func(ctx context.Context) (bool, error) {
		if !run.running() {
			return false, fmt.Errorf("ferry ended first with %d\nstdout: %s\nstderr: %s", run.cmd.ProcessState.ExitCode(), run.stdout.String(), run.stderr.String())
		}
		pods, err := gkc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: volumes.RoleLabel + "=restore"})
		if err != nil || len(pods.Items) == 0 || pods.Items[0].Status.Phase != corev1.PodRunning {
			return false, nil // a slow API server is asked again
		}
		staged, _ := filepath.Glob(filepath.Join(dst, volumes.StagingPrefix+"*", "*"))
		for _, f := range staged {
			if info, err := os.Stat(f); err == nil && info.Size() > 0 {
				mover = pods.Items[0]
				return true, nil
			}
		}
		return false, nil
	})
	patch := []byte(`{"spec":{"containers":[{"name":"mover","image":"` + evil + `"}]}}`)
	if _, err := gkc.CoreV1().Pods(ns).Patch(ctx, mover.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	patchedAt := time.Now()

	code := run.exitCode(t, 2*time.Minute)
	t.Logf("ferry ended %s after the patch with %d", time.Since(patchedAt).Round(time.Millisecond), code)
	var rep restoreReport
	if err := json.Unmarshal([]byte(run.stdout.String()), &rep); err != nil {
		t.Fatalf("ferry restore exited %d without a JSON report: %v\nstdout: %s\nstderr: %s", code, err, run.stdout.String(), run.stderr.String())
	}
	var failed []snapshot.ReportItem
	for _, it := range rep.Items {
		if it.Kind == "volumes" && it.Status == snapshot.StatusFailed {
			failed = append(failed, it)
		}
	}
	t.Logf("restore: %s, error %q, volumes failed %+v", rep.Result, rep.Error, failed)
	pod := ns + "/" + mover.Name
	if code == 0 || len(failed) != 1 || failed[0].Name != ns+"/"+claim {
		t.Fatalf("the restore exited %d without failing volume %s/%s: %+v\nstderr: %s", code, ns, claim, rep, run.stderr.String())
	}
	for _, want := range []string{"mover pod " + pod, `image is now "` + evil + `"`, `ferry started it with "ferry:dev"`, "refusing to exec", "left"} {
		if !strings.Contains(failed[0].Detail, want) {
			t.Errorf("the failure does not say %q: %s", want, failed[0].Detail)
		}
	}
	if after := withoutStaging(walkTree(t, dst)); !slices.Equal(before, after) {
		t.Fatalf("the refused restore changed green's claim:\n%s", lineDiff(before, after))
	}
	// Left for the operator to inspect, as the message says.
	left, err := gkc.CoreV1().Pods(ns).Get(ctx, mover.Name, metav1.GetOptions{})
	if err != nil || left.DeletionTimestamp != nil {
		t.Fatalf("mover pod %s was not left for inspection: %v", pod, err)
	}
}
