package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/volumes"
	"github.com/ferrykube/ferry/storage"
	"github.com/ferrykube/ferry/storage/repo"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The claim these tests interrupt: big enough that reading it takes seconds.
const (
	interruptNS    = "interrupted"
	interruptClaim = "scratch"
	interruptBytes = 400 << 20
)

// interruptConfig binds a claim holding interruptBytes of random data on blue and returns a
// ferry.yaml that backs up its namespace alone. The namespace, its volume and the data go when the
// test ends: later tests back up all of blue and need not stream them.
func interruptConfig(t *testing.T) string {
	t.Helper()
	blue, kc := clients(t, "blue")
	ctx := context.Background()
	removeAfter(t, interruptNS, kc)
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: interruptNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: interruptClaim},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if _, err := kc.CoreV1().PersistentVolumeClaims(interruptNS).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := dataDir(t, interruptClaim)
	t.Cleanup(func() { os.RemoveAll(dir) })
	// Generated, never committed; random, so that compression cannot shrink it.
	for i := range 4 {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("shard-%d.bin", i)))
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(f, io.LimitReader(rand.NewChaCha8([32]byte{byte(i), 4}), interruptBytes/4))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := blue.BindClaim(ctx, interruptNS, interruptClaim, dir); err != nil {
		t.Fatal(err)
	}
	cfg := namespacesConfig(t, interruptNS)
	return cfg
}

// ferryRun is a ferry command running in the background.
type ferryRun struct {
	cmd            *exec.Cmd
	stdout, stderr strings.Builder
	done           chan struct{}
}

func startFerry(t *testing.T, args ...string) *ferryRun {
	t.Helper()
	r := &ferryRun{cmd: exec.Command(ferryBinary(t), ferryArgs(t, args)...), done: make(chan struct{})}
	r.cmd.Env = append(os.Environ(), "KUBECONFIG="+tb.Kubeconfig)
	r.cmd.Stdout, r.cmd.Stderr = &r.stdout, &r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.cmd.Wait(); close(r.done) }()
	t.Cleanup(func() { r.cmd.Process.Kill(); <-r.done })
	return r
}

// exitCode waits for the command to end and returns its exit code (-1 when a signal ended it).
func (r *ferryRun) exitCode(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-r.done:
		return r.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		t.Fatalf("ferry %v still runs after %s\nstderr: %s", r.cmd.Args[1:], timeout, r.stderr.String())
		return 0
	}
}

func (r *ferryRun) running() bool {
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

// moverPods lists the mover pods of a backup, in every namespace.
func moverPods(t *testing.T, kc kubernetes.Interface, backup string) []corev1.Pod {
	t.Helper()
	pods, err := kc.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{LabelSelector: volumes.BackupLabel + "=" + backup})
	if err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// waitForMover waits, while ferry runs, until cond holds for the backup's running mover pod.
func waitForMover(t *testing.T, kc kubernetes.Interface, r *ferryRun, backup string, what string, cond func(ctx context.Context, pod corev1.Pod) (bool, error)) corev1.Pod {
	t.Helper()
	var mover corev1.Pod
	waitUntil(t, what, 2*time.Minute, func(ctx context.Context) (bool, error) {
		if !r.running() {
			return false, fmt.Errorf("ferry ended first with %d\nstdout: %s\nstderr: %s", r.cmd.ProcessState.ExitCode(), r.stdout.String(), r.stderr.String())
		}
		for _, p := range moverPods(t, kc, backup) {
			if p.Status.Phase != corev1.PodRunning {
				continue
			}
			ok, err := cond(ctx, p)
			if ok {
				mover = p
			}
			return ok, err
		}
		return false, nil
	})
	return mover
}

// listBackups runs ferry backups list -o json.
func listBackups(t *testing.T, url string) map[string]snapshot.Info {
	t.Helper()
	code, out, errOut := runFerry(t, "--storage", url, "backups", "list", "-o", "json")
	if code != 0 {
		t.Fatalf("ferry backups list exited %d: %s", code, errOut)
	}
	var infos []snapshot.Info
	if err := json.Unmarshal([]byte(out), &infos); err != nil {
		t.Fatalf("ferry backups list -o json: %v\n%s", err, out)
	}
	byName := map[string]snapshot.Info{}
	for _, i := range infos {
		byName[i.Name] = i
	}
	return byName
}

// streaming holds once the claim's stream has begun to reach file storage in storeDir: a tar
// stream is written into a temporary file beside its final name, chunks into packs of the chunk
// repository, which the claim's 400 MiB fill many of.
func streaming(storeDir, backup string) func(context.Context, corev1.Pod) (bool, error) {
	partial := filepath.Join(storeDir, "backups", backup, "volumes", interruptNS, ".ferry-tmp-*")
	packs := filepath.Join(storeDir, repo.DefaultPrefix, "packs", "*", "*")
	return func(context.Context, corev1.Pod) (bool, error) {
		files, _ := filepath.Glob(partial)
		for _, f := range files {
			if info, err := os.Stat(f); err == nil && info.Size() > 0 {
				return true, nil
			}
		}
		stored, _ := filepath.Glob(packs)
		return len(stored) > 0, nil
	}
}

// TestBackupKilledMidStream: a SIGKILLed ferry leaves an incomplete backup and its mover pod; the
// next backup deletes that pod once the killed run's heartbeat is stale, and completes.
func TestBackupKilledMidStream(t *testing.T) {
	cfg := interruptConfig(t)
	_, kc := clients(t, "blue")
	storeDir := t.TempDir()
	url := "file://" + storeDir
	// The tar stream, whose partial file the killed run leaves in the backup's folder (a chunked
	// volume's packs are the repository's, which prune frees).
	run := startFerry(t, "--storage", url, "backup", "--from", "blue", "-f", cfg, "--name", "killed", "--volume-format", "tar")
	waitForMover(t, kc, run, "killed", "the volume streaming", streaming(storeDir, "killed"))
	if err := run.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := run.exitCode(t, 30*time.Second); code != -1 {
		t.Fatalf("ferry ended with %d before it was killed\nstderr: %s", code, run.stderr.String())
	}
	killedAt := time.Now()

	// Running until its heartbeat goes stale, then incomplete.
	if got := listBackups(t, url)["killed"]; got.State != snapshot.Incomplete && got.State != snapshot.Running {
		t.Fatalf("the killed backup lists as %+v, want running or incomplete", got)
	}
	left := moverPods(t, kc, "killed")
	if len(left) != 1 {
		t.Fatalf("%d mover pods of the killed run, want the 1 it left behind", len(left))
	}

	// Until its heartbeat is stale the killed run cannot be told from a live one.
	store, err := storage.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the killed run's heartbeat goes stale", 2*snapshot.StaleBeats*snapshot.HeartbeatInterval, func(ctx context.Context) (bool, error) {
		st, err := snapshot.CheckRun(ctx, store, "killed", time.Now())
		return st.State == snapshot.RunDead, err
	})
	t.Logf("the killed run counts as dead %s after the kill", time.Since(killedAt).Round(100*time.Millisecond))

	code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "-f", cfg, "--name", "after-kill")
	if code != 0 || !strings.Contains(out, "Backup after-kill is complete") {
		t.Fatalf("the next backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if !strings.Contains(errOut, "deleted a mover pod left behind") || !strings.Contains(errOut, left[0].Name) {
		t.Errorf("the next backup does not log deleting %s:\n%s", left[0].Name, errOut)
	}
	if pods := moverPods(t, kc, "killed"); len(pods) != 0 {
		t.Fatalf("mover pod %s of the killed run is still there", pods[0].Name)
	}
	_, m := readManifest(t, url, "after-kill")
	if len(m.Volumes) != 1 || m.Volumes[0].Bytes != interruptBytes {
		t.Fatalf("the next backup's volumes: %+v", m.Volumes)
	}
	backups := listBackups(t, url)
	if backups["after-kill"].State != snapshot.Complete || backups["killed"].State != snapshot.Incomplete {
		t.Fatalf("backups: %+v", backups)
	}
	if _, err := store.Stat(context.Background(), snapshot.Prefix("after-kill")+snapshot.HeartbeatFile); err == nil {
		t.Error("the complete backup kept its heartbeat")
	}

	if code, out, errOut := runFerry(t, "--storage", url, "backups", "delete", "killed"); code != 0 {
		t.Fatalf("ferry backups delete killed exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if _, ok := listBackups(t, url)["killed"]; ok {
		t.Fatal("the killed backup is still listed after delete")
	}
	// Nothing of it is left, the killed stream's unlisted partial file included.
	var remains []string
	filepath.WalkDir(filepath.Join(storeDir, "backups", "killed"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			remains = append(remains, p)
		}
		return nil
	})
	if len(remains) > 0 {
		t.Errorf("files of the killed backup left after delete: %v", remains)
	}
}

// TestBackupStorageFailsMidStream: the backup MinIO stops while a volume streams into it; ferry
// exits 1 naming the backup, the claim and the file, and leaves no complete backup and no pod.
func TestBackupStorageFailsMidStream(t *testing.T) {
	cfg := interruptConfig(t)
	_, kc := clients(t, "blue")
	url := backupMinIO(t, "outage")
	minio := tb.MinIO["backup"]
	t.Cleanup(func() {
		if err := minio.Restart(context.Background()); err != nil {
			t.Errorf("restart the backup MinIO: %v", err)
		}
	})
	// The tar stream is one multipart upload to catch in flight; chunks go up as packs.
	run := startFerry(t, "--storage", url, "backup", "--from", "blue", "-f", cfg, "--name", "outage", "--volume-format", "tar")
	key := "volumes/" + interruptNS + "/" + interruptClaim + ".tar.zst"
	s3c := minio.S3Client()
	waitForMover(t, kc, run, "outage", "the volume's upload in progress", func(ctx context.Context, _ corev1.Pod) (bool, error) {
		up, err := s3c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("backups"), Prefix: aws.String("outage/" + snapshot.Prefix("outage") + key)})
		return err == nil && len(up.Uploads) > 0, nil
	})
	if err := minio.Stop(); err != nil {
		t.Fatal(err)
	}
	stoppedAt := time.Now()
	code := run.exitCode(t, 3*time.Minute)
	errOut := run.stderr.String()
	t.Logf("ferry ended %s after the outage: %s", time.Since(stoppedAt).Round(100*time.Millisecond), lastLine(errOut))
	if code != 1 {
		t.Fatalf("ferry exited %d, want 1\nstdout: %s\nstderr: %s", code, run.stdout.String(), errOut)
	}
	for _, want := range []string{"backup outage", "volume " + interruptNS + "/" + interruptClaim, key} {
		if !strings.Contains(lastLine(errOut), want) {
			t.Errorf("the error does not name %q: %s", want, lastLine(errOut))
		}
	}
	if pods := moverPods(t, kc, "outage"); len(pods) != 0 {
		t.Errorf("mover pod %s left behind", pods[0].Name)
	}
	if err := minio.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, ok := listBackups(t, url)["outage"]; ok && got.State != snapshot.Incomplete && got.State != snapshot.Running {
		t.Fatalf("after the outage the backup lists as %+v", got)
	}
}

// TestBackupMoverDeletedMidStream: the mover pod is deleted while its claim streams; ferry exits 1
// naming the claim and the pod, and leaves no backup and no pod.
func TestBackupMoverDeletedMidStream(t *testing.T) {
	cfg := interruptConfig(t)
	_, kc := clients(t, "blue")
	storeDir := t.TempDir()
	url := "file://" + storeDir
	started := time.Now()
	run := startFerry(t, "--storage", url, "backup", "--from", "blue", "-f", cfg, "--name", "api-error")
	mover := waitForMover(t, kc, run, "api-error", "the volume streaming", streaming(storeDir, "api-error"))
	t.Logf("streaming %s after ferry started", time.Since(started).Round(100*time.Millisecond))
	if err := kc.CoreV1().Pods(mover.Namespace).Delete(context.Background(), mover.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	deletedAt := time.Now()
	code := run.exitCode(t, 2*time.Minute)
	errOut := run.stderr.String()
	t.Logf("ferry ended %s after the deletion: %s", time.Since(deletedAt).Round(100*time.Millisecond), lastLine(errOut))
	if code != 1 {
		t.Fatalf("ferry exited %d, want 1\nstdout: %s\nstderr: %s", code, run.stdout.String(), errOut)
	}
	for _, want := range []string{"backup api-error", "volume " + interruptNS + "/" + interruptClaim, "mover pod " + interruptNS + "/" + mover.Name + " was deleted"} {
		if !strings.Contains(lastLine(errOut), want) {
			t.Errorf("the error does not name %q: %s", want, lastLine(errOut))
		}
	}
	if pods := moverPods(t, kc, "api-error"); len(pods) != 0 {
		t.Errorf("mover pod %s left behind", pods[0].Name)
	}
	if got, ok := listBackups(t, url)["api-error"]; ok {
		t.Fatalf("the failed backup is still in storage: %+v", got)
	}
}

// lastLine is the last non-empty line of a command's output: ferry's error.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
