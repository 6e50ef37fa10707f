package integration

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"github.com/ferrykube/ferry/storage/storagetest"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkBackupVolume backs up a claim holding a 1 GiB file and 10,000 small files from blue into
// the backup MinIO and reports volume MB/s and the ferry process's peak RSS, beside the raw
// reference of the same run:
//   - raw-multipart: the claim's files read from disk and uploaded as one object by a plain
//     multipart upload (storagetest.RawUpload) to the same MinIO;
//   - raw-exec: the claim's files as one tar (`tar cf - .`) through exec into nothing: what the
//     exec path itself carries here, the ceiling of every exec mode;
//   - raw-exec-upload: the same tar through exec, uploaded by the plain multipart upload;
//   - exec-tar: through the API server (exec), one compressed tar stream (--volume-format tar);
//   - exec-chunks: through exec into an empty chunk repository (--volume-format chunks): a first backup;
//   - exec-chunks-second: after 1 % of the small files changed since the previous backup into the
//     same repository, which reports the bytes it stored as a share of the first backup's and how
//     many times faster than it it was;
//   - direct: with --mover-direct (tar, uploaded by the mover pod itself).
//
// FERRY_BENCH_LOG=1 prints each ferry command's output (with -v), whose log times each step.
// Run: make bench.
func BenchmarkBackupVolume(b *testing.B) {
	_, kc := clients(b, "blue")
	blue := tb.Clusters["blue"]
	ctx := context.Background()
	const ns, claim = "bench-volume", "data"
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}}}}
	if _, err := kc.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	dir, err := tb.DataDir(claim)
	if err != nil {
		b.Fatal(err)
	}
	const small = 10000
	size := fillBenchVolume(b, dir, 4, 1<<30, small, 100)
	if err := blue.BindClaim(ctx, ns, claim, dir); err != nil {
		b.Fatal(err)
	}
	minio := tb.MinIO["backup"]
	if err := minio.CreateBucket(ctx, "backups"); err != nil {
		b.Fatal(err)
	}
	for _, kv := range minio.Env() {
		k, v, _ := strings.Cut(kv, "=")
		b.Setenv(k, v) // for storage.Open here, as for the ferry command
	}
	config := namespacesConfig(b, ns)
	storedBytes := func(prefix string) int64 {
		store, err := storage.Open(ctx, "s3://backups/"+prefix+"?endpoint="+minio.Endpoint+"&path-style=true")
		if err != nil {
			b.Fatal(err)
		}
		var n int64
		if err := store.List(ctx, "", func(o storage.ObjectInfo) error {
			n += o.Size
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		return n
	}
	var peakRSS int64
	backup := func(prefix string, flags ...string) time.Duration {
		b.Helper()
		args := append([]string{"--storage", "s3://backups/" + prefix + "?endpoint=" + minio.Endpoint + "&path-style=true",
			"backup", "--from", "blue", "-f", config, "--name", fmt.Sprintf("bench-%d", time.Now().UnixNano())}, flags...)
		if dir := os.Getenv("FERRY_BENCH_PROFILE"); dir != "" {
			args = append(args, "--profile", "cpu", "--profile-output", filepath.Join(dir, fmt.Sprintf("volume-%s.cpu.pprof", strings.Join(append([]string{prefix[:min(len(prefix), 12)]}, flags...), "-"))))
		}
		cmd := exec.Command(ferryBinary(b), ferryArgs(b, args)...)
		cmd.Env = append(append(os.Environ(), "KUBECONFIG="+tb.Kubeconfig), minio.Env()...)
		start := time.Now()
		out, peak, err := runPeakRSS(cmd, true)
		if err != nil {
			b.Fatalf("ferry backup: %v\n%s", err, out)
		}
		if os.Getenv("FERRY_BENCH_LOG") != "" {
			b.Logf("%s", out)
		}
		peakRSS = max(peakRSS, peak)
		return time.Since(start)
	}
	// rawReader is a pod whose exec runs in the claim's folder, for the raw exec references.
	const rawReader = "raw-reader"
	startRawReader := func() {
		b.Helper()
		if _, err := kc.CoreV1().Pods(ns).Get(ctx, rawReader, metav1.GetOptions{}); err == nil {
			return
		}
		runPod(b, kc, ns, simplePod(rawReader))
		if err := blue.MapExec(ctx, ns, rawReader, dir, nil); err != nil {
			b.Fatal(err)
		}
	}
	cfg, err := blue.RESTConfig()
	if err != nil {
		b.Fatal(err)
	}
	rawExec := func(w io.Writer) error {
		var stderr strings.Builder
		if err := kube.Exec(ctx, cfg, kc, kube.ExecRequest{Namespace: ns, Pod: rawReader, Command: []string{"tar", "cf", "-", "."}, Stdout: w, Stderr: &stderr}); err != nil {
			return fmt.Errorf("exec tar: %w: %s", err, stderr.String())
		}
		return nil
	}
	for _, mode := range []string{"raw-multipart", "raw-exec", "raw-exec-upload", "exec-tar", "exec-chunks", "exec-chunks-second", "direct"} {
		b.Run(mode, func(b *testing.B) {
			b.SetBytes(size)
			peakRSS = 0
			switch mode {
			case "raw-multipart":
				for i := range b.N {
					if err := storagetest.RawUpload(ctx, minio.S3Client(), "backups", fmt.Sprintf("bench-raw/%d", i), treeReader(b, dir)); err != nil {
						b.Fatal(err)
					}
				}
				return
			case "raw-exec":
				startRawReader()
				for range b.N {
					if err := rawExec(io.Discard); err != nil {
						b.Fatal(err)
					}
				}
				return
			case "raw-exec-upload":
				startRawReader()
				for i := range b.N {
					pr, pw := io.Pipe()
					go func() { pw.CloseWithError(rawExec(pw)) }()
					if err := storagetest.RawUpload(ctx, minio.S3Client(), "backups", fmt.Sprintf("bench-raw-exec/%d", i), pr); err != nil {
						b.Fatal(err)
					}
				}
				return
			case "exec-tar":
				for range b.N {
					backup("bench-tar", "--volume-format", "tar")
				}
			case "exec-chunks":
				for i := range b.N {
					backup(fmt.Sprintf("bench-chunks-%d-%d", i, time.Now().UnixNano()), "--volume-format", "chunks")
				}
			case "exec-chunks-second":
				b.StopTimer()
				prefix := fmt.Sprintf("bench-second-%d", time.Now().UnixNano())
				first := backup(prefix, "--volume-format", "chunks")
				firstBytes := storedBytes(prefix)
				var took time.Duration
				var added int64
				for i := range b.N {
					for j := range small / 100 { // 1 % of the small files
						n := (i*small/100 + j) * 97 % small
						p := filepath.Join(dir, "small", fmt.Sprintf("%02d", n%100), fmt.Sprintf("f%05d", n))
						if err := os.WriteFile(p, []byte(fmt.Sprintf("changed %d in round %d;", n, i)), 0o644); err != nil {
							b.Fatal(err)
						}
					}
					before := storedBytes(prefix)
					b.StartTimer()
					took += backup(prefix, "--volume-format", "chunks")
					b.StopTimer()
					added += storedBytes(prefix) - before
				}
				b.ReportMetric(100*float64(added)/float64(b.N)/float64(firstBytes), "%-of-first-stored")
				b.ReportMetric(first.Seconds()/(took.Seconds()/float64(b.N)), "x-faster-than-first")
			case "direct":
				for range b.N {
					backup("bench-direct", "--mover-direct")
				}
			}
			b.ReportMetric(float64(peakRSS)/1024, "peak-RSS-MiB")
		})
	}
}

// treeReader reads the regular files under dir one after another, as one stream.
func treeReader(b *testing.B, dir string) io.Reader {
	var readers []io.Reader
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		readers = append(readers, &lazyFile{path: p})
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return io.MultiReader(readers...)
}

// lazyFile opens its file at the first read and closes it at its end, so that a stream of
// thousands of files holds one open at a time.
type lazyFile struct {
	path string
	f    *os.File
}

func (l *lazyFile) Read(p []byte) (int, error) {
	if l.f == nil {
		f, err := os.Open(l.path)
		if err != nil {
			return 0, err
		}
		l.f = f
	}
	n, err := l.f.Read(p)
	if err == io.EOF {
		l.f.Close()
	}
	return n, err
}

// BenchmarkBackupObjects20k backs up blue's 20,000 ConfigMaps (those of BenchmarkPlan20k; no
// volumes) into the backup MinIO with ferry backup, from a plan made beforehand, and reports
// objects backed up per second of the whole command and the ferry process's peak RSS. Run: make bench.
func BenchmarkBackupObjects20k(b *testing.B) {
	namespaces := fillBlue20k(b)
	ctx := context.Background()
	minio := tb.MinIO["backup"]
	if err := minio.CreateBucket(ctx, "backups"); err != nil {
		b.Fatal(err)
	}
	for _, kv := range minio.Env() { // for reading the manifests here
		k, v, _ := strings.Cut(kv, "=")
		b.Setenv(k, v)
	}
	url := "s3://backups/bench-objects?endpoint=" + minio.Endpoint + "&path-style=true"
	store, err := storage.Open(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	config, planFile := filepath.Join(dir, "ferry.yaml"), filepath.Join(dir, "plan.yaml")
	if err := os.WriteFile(config, []byte("include: {namespaces: ["+strings.Join(namespaces, ", ")+"]}\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	ferry := func(args ...string) *exec.Cmd {
		cmd := exec.Command(ferryBinary(b), ferryArgs(b, args)...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+tb.Kubeconfig)
		return cmd
	}
	if out, err := ferry("plan", "--from", "blue", "-f", config, "-o", planFile).CombinedOutput(); err != nil {
		b.Fatalf("ferry plan: %v\n%s", err, out)
	}

	var objects int
	var peakRSS int64
	b.ResetTimer()
	for i := range b.N {
		name := fmt.Sprintf("objects20k-%d-%d", i, time.Now().UnixNano())
		cmd := ferry("--storage", url, "backup", "--from", "blue", "--plan", planFile, "--name", name)
		out, peak, err := runPeakRSS(cmd, true)
		if err != nil {
			b.Fatalf("ferry backup: %v\n%s", err, out)
		}
		b.StopTimer()
		peakRSS = max(peakRSS, peak)
		m, err := snapshot.ReadManifest(ctx, store, name)
		if err != nil {
			b.Fatal(err)
		}
		objects = m.Totals.Objects
		b.Logf("%s: %d objects, %d bytes stored, %s by its manifest", name, objects, m.Totals.StoredBytes, m.CompletedAt.Sub(m.StartedAt).Round(time.Millisecond))
		if _, err := snapshot.Delete(ctx, store, name); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	if objects < benchNamespaces*benchPerNamespace {
		b.Fatalf("backed up %d objects, want at least %d", objects, benchNamespaces*benchPerNamespace)
	}
	b.ReportMetric(float64(objects)*float64(b.N)/b.Elapsed().Seconds(), "objects/s")
	b.ReportMetric(float64(objects), "objects")
	b.ReportMetric(float64(peakRSS)/1024, "peak-RSS-MiB")
}

// fillBenchVolume writes a dataset into dir: one random file of big bytes (from seed) and small
// text files spread over folders. It returns the bytes written.
func fillBenchVolume(b *testing.B, dir string, seed byte, big int64, small, folders int) int64 {
	b.Helper()
	f, err := os.Create(filepath.Join(dir, "dataset.bin"))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(f, io.LimitReader(rand.NewChaCha8([32]byte{seed}), big)); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	size := big
	for i := range small {
		sub := filepath.Join(dir, "small", fmt.Sprintf("%02d", i%folders))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		data := []byte(strings.Repeat(fmt.Sprintf("row %d;", i), 50))
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%05d", i)), data, 0o644); err != nil {
			b.Fatal(err)
		}
		size += int64(len(data))
	}
	return size
}
