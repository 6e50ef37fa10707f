package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/snapshot"
)

// BenchmarkRestoreObjects20k restores blue's 20,000 ConfigMaps (those of BenchmarkPlan20k) from a
// backup in the backup MinIO onto a fresh cluster with ferry restore, and reports objects restored
// per second of the whole command (the archive read and checked first) and ferry's peak RSS. Each
// iteration restores into namespaces of new names (--namespace-map), so every object is created.
// Run: make bench.
func BenchmarkRestoreObjects20k(b *testing.B) {
	namespaces := fillBlue20k(b)
	ctx := context.Background()
	if _, err := tb.AddCluster(ctx, "bench-restore"); err != nil {
		b.Fatal(err)
	}
	minio := tb.MinIO["backup"]
	if err := minio.CreateBucket(ctx, "backups"); err != nil {
		b.Fatal(err)
	}
	for _, kv := range minio.Env() {
		k, v, _ := strings.Cut(kv, "=")
		b.Setenv(k, v)
	}
	url := "s3://backups/bench-restore?endpoint=" + minio.Endpoint + "&path-style=true"
	config := namespacesConfig(b, namespaces...)
	ferry := func(args ...string) *exec.Cmd {
		cmd := exec.Command(ferryBinary(b), ferryArgs(b, args)...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+tb.Kubeconfig)
		return cmd
	}
	if out, err := ferry("--storage", url, "backup", "--from", "blue", "-f", config, "--name", "objects20k").CombinedOutput(); err != nil {
		b.Fatalf("ferry backup: %v\n%s", err, out)
	}
	var restored int
	var peakRSS int64
	b.ResetTimer()
	for i := range b.N {
		args := []string{"--storage", url, "restore", "--to", "bench-restore", "--backup", "objects20k", "-o", "json"}
		for _, ns := range namespaces {
			args = append(args, "--namespace-map", fmt.Sprintf("%s=%s-r%d", ns, ns, i))
		}
		cmd := ferry(args...)
		out, peak, err := runPeakRSS(cmd, false)
		b.StopTimer()
		var rep struct {
			Counts map[string]map[string]int `json:"counts"`
			Error  string                    `json:"error"`
		}
		if jerr := json.Unmarshal(out, &rep); jerr != nil || rep.Error != "" || rep.Counts["objects"][snapshot.StatusFailed] > 0 {
			b.Fatalf("ferry restore: %v %v %s\n%s", err, jerr, rep.Error, out)
		}
		restored = rep.Counts["objects"][snapshot.StatusRestored]
		peakRSS = max(peakRSS, peak)
		b.Logf("restore %d: %v", i, rep.Counts["objects"])
		b.StartTimer()
	}
	b.StopTimer()
	if restored < benchNamespaces*benchPerNamespace {
		b.Fatalf("restored %d objects, want at least %d", restored, benchNamespaces*benchPerNamespace)
	}
	b.ReportMetric(float64(restored)*float64(b.N)/b.Elapsed().Seconds(), "objects/s")
	b.ReportMetric(float64(restored), "objects")
	b.ReportMetric(float64(peakRSS)/1024, "peak-RSS-MiB")
}
