package integration

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/internal/memwatch"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/volumes"
	"github.com/ferrykube/ferry/storage"
	"github.com/ferrykube/ferry/storage/storagetest"
	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// BenchmarkRestoreVolume restores a claim holding a 256 MiB file and 2,000 small files from the
// backup MinIO onto a new claim on green: from a tar stream through the API server (exec) and with
// the mover reading storage itself (direct), and from the chunk repository through the API server
// (exec-chunks). It reports volume MB/s and ferry's peak heap, and beside them the raw references
// of the same run: a ranged download of the claim's bytes from the same MinIO (raw-download) and a
// copy of its files to a new folder of the same disk (disk-write). Issue 17's goal: 80 % of the
// lower of the two.
func BenchmarkRestoreVolume(b *testing.B) {
	blue, bkc := clientsB(b, "blue")
	green, gkc := clientsB(b, "green")
	ctx := context.Background()
	const ns, claim = "bench-restore", "data"
	createClaim(b, bkc, ns, claim, nil)
	dir, err := tb.DataDir("bench-restore")
	if err != nil {
		b.Fatal(err)
	}
	size := fillBenchVolume(b, dir, 6, 256<<20, 2000, 40)
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
	url := "s3://backups/bench-restore?endpoint=" + minio.Endpoint + "&path-style=true"
	config := namespacesConfig(b, ns)
	store, err := storage.Open(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	backup := func(name string, flags ...string) *snapshot.Reader {
		b.Helper()
		cmd := exec.Command(ferryBinary(b), ferryArgs(b, append([]string{"--storage", url, "backup", "--from", "blue", "-f", config, "--name", name}, flags...))...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+tb.Kubeconfig)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("ferry backup: %v\n%s", err, out)
		}
		r, err := snapshot.Open(ctx, store, name, nil)
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	// The tar stream explicitly: chunks are the default through exec, and direct movers read tar.
	tarBackup, chunksBackup := backup("bench-restore", "--volume-format", "tar"), backup("bench-restore-chunks", "--volume-format", "chunks")
	for _, r := range []*snapshot.Reader{tarBackup, chunksBackup} {
		if len(r.Manifest.Volumes) != 1 {
			b.Fatalf("backup %s holds %d volumes, want 1", r.Name(), len(r.Manifest.Volumes))
		}
	}
	if f := tarBackup.Manifest.Volumes[0].Format; f != "" {
		b.Fatalf("backup %s stored its volume as %q, want the tar stream", tarBackup.Name(), f)
	}
	if err := storagetest.RawUpload(ctx, minio.S3Client(), "backups", "bench-restore-raw", treeReader(b, dir)); err != nil {
		b.Fatal(err)
	}
	presigner := store.(storage.Presigner)
	if err := green.Apply(ctx, io.Discard, filepath.Join(repoDir(), "integration", "testdata", "standard-storageclass.yaml")); err != nil {
		b.Fatal(err)
	}
	cfg, err := green.RESTConfig()
	if err != nil {
		b.Fatal(err)
	}
	restores := 0 // the benchmark function runs more than once: every restore gets a new claim
	// disk-write-synced flushes the copy to the disk as well, as every restore does before it
	// reports the claim restored; raw-exec is what the exec path carries: the raw object,
	// downloaded, through exec's stdin into one file of a pod's folder on green, flushed. (It
	// reads the size, not to the end: kwok's exec does not pass on the end of stdin.)
	for _, mode := range []string{"raw-download", "disk-write", "disk-write-synced", "raw-exec", "exec", "exec-chunks", "direct"} {
		b.Run(mode, func(b *testing.B) {
			b.SetBytes(size)
			switch mode {
			case "raw-download":
				for range b.N {
					if err := storagetest.RawDownload(ctx, minio.S3Client(), "backups", "bench-restore-raw", size); err != nil {
						b.Fatal(err)
					}
				}
				return
			case "raw-exec":
				for range b.N {
					b.StopTimer()
					restores++
					pod := fmt.Sprintf("bench-restore-raw-exec-%d", restores)
					to, err := tb.DataDir(pod)
					if err != nil {
						b.Fatal(err)
					}
					runPod(b, gkc, "default", simplePod(pod))
					if err := green.MapExec(ctx, "default", pod, to, nil); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					out, err := minio.S3Client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("backups"), Key: aws.String("bench-restore-raw")})
					if err != nil {
						b.Fatal(err)
					}
					var stderr strings.Builder
					err = kube.Exec(ctx, cfg, gkc, kube.ExecRequest{Namespace: "default", Pod: pod, Command: []string{"sh", "-c", fmt.Sprintf("head -c %d > data", size)}, Stdin: out.Body, Stderr: &stderr})
					out.Body.Close()
					if err != nil {
						b.Fatalf("exec head: %v: %s", err, stderr.String())
					}
					syncFS(b, to)
					b.StopTimer()
					if fi, err := os.Stat(filepath.Join(to, "data")); err != nil || fi.Size() != size {
						b.Fatalf("raw exec wrote %v (%v), want %d bytes", fi, err, size)
					}
					os.RemoveAll(to)
					gkc.CoreV1().Pods("default").Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
					b.StartTimer()
				}
				return
			case "disk-write", "disk-write-synced":
				for i := range b.N {
					b.StopTimer()
					to, err := tb.DataDir(fmt.Sprintf("bench-restore-copy-%d", i))
					if err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					copyTree(b, dir, to)
					if mode == "disk-write-synced" {
						syncFS(b, to)
					}
					b.StopTimer()
					os.RemoveAll(to)
					b.StartTimer()
				}
				return
			}
			r := tarBackup
			if mode == "exec-chunks" {
				r = chunksBackup
			}
			var peak uint64
			for range b.N {
				b.StopTimer()
				restores++
				target := fmt.Sprintf("bench-restore-%s-%d", mode, restores)
				createClaim(b, gkc, target, claim, ptr.To("standard"))
				c := volumes.Contents{Config: cfg, Client: gkc, Image: "ferry", Mapping: snapshot.Mapping{Namespaces: map[string]string{ns: target}}}
				if mode == "direct" {
					c.Direct = presigner
				}
				report := &snapshot.Report{}
				b.StartTimer()
				peak = max(peak, memwatch.Peak(func() { err = c.Restore(ctx, r, report) }))
				if err != nil || len(report.Items) > 0 {
					b.Fatalf("restore: %v %+v", err, report.Items)
				}
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
		})
	}
}

// copyTree copies the folders and regular files under src to dst, as the disk's raw reference.
func copyTree(b *testing.B, src, dst string) {
	b.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(to)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		b.Fatal(err)
	}
}

// syncFS flushes the filesystem that holds dir, as a restoring mover does once it has staged.
func syncFS(b *testing.B, dir string) {
	b.Helper()
	d, err := os.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		b.Fatal(err)
	}
}
