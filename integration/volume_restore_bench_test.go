package integration

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/internal/memwatch"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/volumes"
	"github.com/ferrykube/ferry/storage"
	"k8s.io/utils/ptr"
)

// BenchmarkRestoreVolume restores a claim holding a 256 MiB file and 2,000 small files from the
// backup MinIO onto a new claim on green, through the API server (exec) and with the mover
// reading storage itself (direct), and reports volume MB/s and ferry's peak heap.
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
	cmd := exec.Command(ferryBinary(b), ferryArgs(b, []string{"--storage", url, "backup", "--from", "blue", "-f", config, "--name", "bench-restore"})...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+tb.Kubeconfig)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("ferry backup: %v\n%s", err, out)
	}
	store, err := storage.Open(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	r, err := snapshot.Open(ctx, store, "bench-restore", nil)
	if err != nil {
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
	for _, mode := range []string{"exec", "direct"} {
		b.Run(mode, func(b *testing.B) {
			b.SetBytes(size)
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
