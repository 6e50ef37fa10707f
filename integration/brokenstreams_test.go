package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ferrykube/ferry/snapshot"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// TestBackupRestoreVerifyThroughBrokenStreams backs up the platform's MySQL, its bucket and a
// user's claim from blue (the claim in each volume format, chunks and the tar stream, and by a
// direct mover), restores them onto a fresh cluster and verifies, with both API servers
// behind proxies that reset exec and port-forward streams once they carried 256 KiB (24 KiB for
// the direct mover's), as an API server restarting, or a load balancer dropping streams, does. Each command
// completes as it would without the resets, and the data read independently is blue's.
func TestBackupRestoreVerifyThroughBrokenStreams(t *testing.T) {
	blueMySQL(t)
	objects := blueMinIO(t)
	ctx := context.Background()
	blue, blueKC := clients(t, "blue")
	const ns = "flaky-data"
	createClaim(t, blueKC, ns, "workspace", nil)
	volume := dataDir(t, ns+"-workspace")
	fillVolume(t, volume)
	if err := blue.BindClaim(ctx, ns, "workspace", volume); err != nil {
		t.Fatal(err)
	}
	target, err := tb.AddCluster(ctx, "flaky")
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.ServePlatform(ctx, target, "green"); err != nil {
		t.Fatal(err)
	}
	kc, _, err := target.Clients()
	if err != nil {
		t.Fatal(err)
	}

	// In each command, the first two streams of each cluster to carry 256 KiB are reset: one
	// stream may break twice, and its third try goes through.
	const after, every, budget = 256 << 10, 1, 2
	proxies := map[string]*resetProxy{
		"blue":  startResetProxy(t, apiServerAddr(t, "blue"), after, every, budget),
		"flaky": startResetProxy(t, apiServerAddr(t, "flaky"), after, every, budget),
	}
	kubeconfig := proxiedKubeconfig(t, proxies)
	url := backupMinIO(t, "flaky")
	warnings := 0
	// Each way of moving volumes, into the same target: the second restore finds the first one's
	// data, and still streams the volume (a tar stream in full, a chunked one with what differs).
	// A direct mover reads and writes storage itself: its exec carries only its conversation with
	// ferry and the volume's file list, some tens of KiB, so its streams are reset sooner, and
	// its backup holds the volume's namespace alone (no other stream takes the resets).
	kubeflow := []string{"--preset", "kubeflow", "--include-namespaces", "kubeflow," + ns}
	for _, variant := range []struct {
		format          string
		after           int64
		backup, restore []string
	}{
		{"chunks", after, slices.Concat(kubeflow, []string{"--volume-format", "chunks"}), nil},
		{"tar", after, slices.Concat(kubeflow, []string{"--volume-format", "tar"}), nil},
		{"direct", 24 << 10, []string{"--include-namespaces", ns, "--mover-direct"}, []string{"--mover-direct"}},
	} {
		format, backup := variant.format, "flaky-"+variant.format
		steps := []struct {
			name, cluster string
			args          []string
		}{
			{"backup", "blue", append([]string{"backup", "--from", "blue", "--name", backup}, variant.backup...)},
			{"restore", "flaky", append([]string{"restore", "--to", "flaky", "--backup", backup, "--storage-class-map", "gp3=standard,nfs-client=standard", "-o", "json"}, variant.restore...)},
			{"verify", "flaky", []string{"verify", "--to", "flaky", "--backup", backup, "--storage-class-map", "gp3=standard,nfs-client=standard", "-o", "json"}},
		}
		for _, step := range steps {
			proxies[step.cluster].armAfter(variant.after, every, budget)
			code, out, errOut := runFerry(t, append([]string{"--kubeconfig", kubeconfig, "--storage", url}, step.args...)...)
			streams, resets := proxies[step.cluster].counts()
			t.Logf("%s %s: exit %d; %s's proxy saw %d streams and reset %d", format, step.name, code, step.cluster, streams, resets)
			warned := 0
			for _, line := range strings.Split(errOut, "\n") {
				if strings.Contains(line, "level=WARN") && strings.Contains(line, "again") {
					t.Logf("  %s", line)
					warned++
				}
			}
			// A backup of blue's kubeflow namespace skips what the fixture's platform lacks: exit 3.
			if code != 0 && !(step.name == "backup" && code == 3) {
				t.Fatalf("ferry %s (%s) exited %d\nstdout: %s\nstderr: %s", step.name, format, code, out, errOut)
			}
			// An S3 client makes again itself a request that broke before its body was read (a
			// listing, a read's start), so ferry may warn of fewer runs again than there were
			// resets, even of none in a command; all the commands together warn of some.
			if resets == 0 {
				t.Errorf("ferry %s (%s): the proxy reset no stream: the test broke nothing", step.name, format)
			}
			warnings += warned
			if step.name == "backup" {
				continue
			}
			var rep restoreReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("ferry %s (%s) wrote no JSON report: %v\n%s", step.name, format, err, out)
			}
			failed := rep.Error != ""
			for _, counts := range rep.Counts {
				failed = failed || counts[snapshot.StatusFailed] > 0
			}
			if failed || step.name == "verify" && len(rep.Items) > 0 {
				t.Fatalf("ferry %s (%s): %s %v %+v", step.name, format, rep.Error, rep.Counts, rep.Items)
			}
		}
	}

	if warnings == 0 {
		t.Error("streams were reset, and ferry said it ran nothing again")
	}
	// A direct mover's upload that broke off was aborted: none is left unfinished (and billed).
	uploads, err := tb.MinIO["backup"].S3Client().ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("backups"), Prefix: aws.String("flaky/")})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range uploads.Uploads {
		t.Errorf("unfinished upload of %s left behind", aws.ToString(u.Key))
	}

	// Read back independently: the volume's tree, the table, the bucket.
	if got, want := walkTree(t, claimFolder(t, kc, ns, "workspace")), walkTree(t, volume); !slices.Equal(got, want) {
		t.Errorf("the claim on the restored cluster differs from blue's:\n%s", lineDiff(want, got))
	}
	rows, err := tb.MariaDB["green"].SQL(ctx, tb.Bins, "SELECT COUNT(*) FROM mlpipeline.run_details")
	if err != nil || strings.TrimSpace(lastLine(rows)) != "500" {
		t.Errorf("mlpipeline.run_details on the restored cluster's database: %q (%v), want 500 rows", rows, err)
	}
	for key, data := range objects {
		if got := getBucketObject(t, tb.MinIO["green"], "mlpipeline", key); !bytes.Equal(got, data) {
			t.Errorf("bucket object %q on the restored cluster's MinIO differs (%d bytes, want %d)", key, len(got), len(data))
		}
	}
}

// proxiedKubeconfig writes the testbed's kubeconfig with each named cluster's server replaced by
// its proxy's, and returns its path.
func proxiedKubeconfig(t *testing.T, proxies map[string]*resetProxy) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(tb.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range proxies {
		kctx, ok := cfg.Contexts[name]
		if !ok {
			t.Fatalf("the testbed's kubeconfig has no context %s", name)
		}
		cfg.Clusters[kctx.Cluster].Server = p.URL()
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRestoreSurvivesADroppedAPIConnection restores 300 ConfigMaps onto green while a proxy
// resets the API server's connection (HTTP/2, which every API call shares) once it has sent
// 64 KiB of writes: the creates in flight then have no answer, and may or may not have been
// made. Each is made again, or found made; the restore reports no failure and verify no
// difference.
func TestRestoreSurvivesADroppedAPIConnection(t *testing.T) {
	_, blueKC := clients(t, "blue")
	ctx := context.Background()
	const ns, objects = "api-drop", 300
	if _, err := blueKC.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range objects {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("settings-%03d", i)},
			Data: map[string]string{"value": strings.Repeat(fmt.Sprintf("%03d", i), 300)}}
		if _, err := blueKC.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	storage := "file://" + t.TempDir()
	if code, out, errOut := runFerry(t, "--storage", storage, "backup", "--from", "blue", "--include-namespaces", ns, "--name", ns); code != 0 {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	proxy := startAPIResetProxy(t, apiServerAddr(t, "green"), 64<<10, 1)
	code, rep, errOut := runReportCommand(t, "--storage", storage, "restore", "--context", "green", "--server", proxy.URL(), "--backup", ns)
	_, resets := proxy.counts()
	t.Logf("restore: exit %d, %v; the API connection was reset %d times", code, rep.Counts, resets)
	if resets != 1 {
		t.Fatalf("the proxy reset %d API connections, want 1", resets)
	}
	if code != 0 || rep.Counts["objects"][snapshot.StatusFailed] > 0 || rep.Counts["objects"][snapshot.StatusRestored]+rep.Counts["objects"][snapshot.StatusUnchanged] < objects {
		t.Fatalf("ferry restore exited %d: %v %+v\nstderr: %s", code, rep.Counts, rep.Items, errOut)
	}
	code, rep, errOut = runReportCommand(t, "--storage", storage, "verify", "--to", "green", "--backup", ns)
	if code != 0 || len(rep.Items) > 0 {
		t.Fatalf("ferry verify exited %d: %v %+v\nstderr: %s", code, rep.Counts, rep.Items, errOut)
	}
}
