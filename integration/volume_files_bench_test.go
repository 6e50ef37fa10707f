package integration

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/internal/memwatch"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/volumes"
	"github.com/ferrykube/ferry/storage"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// BenchmarkBackupVolumeFiles backs up a claim of many small files (1 KiB each) from blue into the
// backup MinIO with ferry backup, and reports files backed up per second of the whole command and
// the ferry process's peak RSS, which must not grow with the number of files; then it restores
// the backup onto green and verifies it, reporting files restored per second and the peak heap of
// each. FERRY_BENCH_PROFILE names a folder for a heap profile of each backup. The sizes are
// FERRY_BENCH_VOLUME_FILES, comma-separated (200,000 by default; the goal of issue 15 is
// 1,000,000); FERRY_BENCH_VOLUME_FORMATS picks tar or chunks (both by default). Run: make bench.
func BenchmarkBackupVolumeFiles(b *testing.B) {
	sizes := []int{200000}
	if env := os.Getenv("FERRY_BENCH_VOLUME_FILES"); env != "" {
		sizes = nil
		for _, s := range strings.Split(env, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n < 1 {
				b.Fatalf("FERRY_BENCH_VOLUME_FILES=%q: want numbers of files, comma-separated", env)
			}
			sizes = append(sizes, n)
		}
	}
	formats := []string{"tar", "chunks"}
	if env := os.Getenv("FERRY_BENCH_VOLUME_FORMATS"); env != "" {
		formats = strings.Split(env, ",")
		for _, f := range formats {
			if f != "tar" && f != "chunks" {
				b.Fatalf("FERRY_BENCH_VOLUME_FORMATS=%q: want tar, chunks or both, comma-separated", env)
			}
		}
	}
	blue, kc := clientsB(b, "blue")
	green, gkc := clientsB(b, "green")
	ctx := context.Background()
	if err := green.Apply(ctx, io.Discard, filepath.Join(repoDir(), "integration", "testdata", "standard-storageclass.yaml")); err != nil {
		b.Fatal(err)
	}
	greenCfg, err := green.RESTConfig()
	if err != nil {
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
	url := "s3://backups/bench-files?endpoint=" + minio.Endpoint + "&path-style=true"
	store, err := storage.Open(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range sizes {
		ns := fmt.Sprintf("bench-files-%d", n)
		dir, err := tb.DataDir(ns)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		writeSmallFiles(b, dir, n)
		b.Logf("%d files of 1 KiB written in %s", n, time.Since(start).Round(time.Millisecond))
		createClaim(b, kc, ns, "data", nil)
		if err := blue.BindClaim(ctx, ns, "data", dir); err != nil {
			b.Fatal(err)
		}
		config := namespacesConfig(b, ns)
		runs := 0
		for _, format := range formats {
			benchVolumeFiles(b, store, url, config, ns, format, n, &runs, greenCfg, gkc)
		}
	}
}

// benchVolumeFiles backs up the claim of n files in ns in format, then restores and verifies the
// last backup onto green.
func benchVolumeFiles(b *testing.B, store storage.Backend, url, config, ns, format string, n int, runs *int, greenCfg *rest.Config, gkc kubernetes.Interface) {
	ctx := context.Background()
	last := ""
	b.Run(fmt.Sprintf("backup/format=%s/files=%d", format, n), func(b *testing.B) {
		var peakRSS int64
		var took time.Duration
		for range b.N {
			*runs++
			name := fmt.Sprintf("%s-%d", ns, *runs)
			args := []string{"--storage", url, "backup", "--from", "blue", "-f", config, "--name", name, "--volume-format", format}
			if dir := os.Getenv("FERRY_BENCH_PROFILE"); dir != "" {
				// The heap profile at the end also counts every allocation made, by where.
				args = append(args, "--profile", "heap", "--profile-output", filepath.Join(dir, fmt.Sprintf("files-%d-%s-backup.heap.pprof", n, format)))
			}
			cmd := exec.Command(ferryBinary(b), ferryArgs(b, args)...)
			cmd.Env = append(os.Environ(), "KUBECONFIG="+tb.Kubeconfig)
			start := time.Now()
			out, peak, err := runPeakRSS(cmd, true)
			if err != nil {
				b.Fatalf("ferry backup: %v\n%s", err, out)
			}
			took += time.Since(start)
			peakRSS = max(peakRSS, peak)
			b.StopTimer()
			m, err := snapshot.ReadManifest(ctx, store, name)
			if err != nil {
				b.Fatal(err)
			}
			if s := snapshot.Summarize(m); len(s.Volumes) != 1 || s.Volumes[0].Files != n {
				b.Fatalf("backup %s: %+v, want one volume of %d files", name, s.Volumes, n)
			}
			last = name
			b.StartTimer()
		}
		b.ReportMetric(float64(n)*float64(b.N)/took.Seconds(), "files/s")
		b.ReportMetric(float64(peakRSS)/1024, "peak-RSS-MiB")
	})
	if last == "" {
		return
	}
	// The last backup onto green, through the Go API: a restore and a verify, each with the
	// peak heap of ferry's side.
	r, err := snapshot.Open(ctx, store, last, nil)
	if err != nil {
		b.Fatal(err)
	}
	restores := 0
	b.Run(fmt.Sprintf("restore/format=%s/files=%d", format, n), func(b *testing.B) {
		var restorePeak, verifyPeak uint64
		var moverPeak int64
		var took time.Duration
		for range b.N {
			b.StopTimer()
			restores++
			target := fmt.Sprintf("%s-%s-restored-%d", ns, format, restores)
			createClaim(b, gkc, target, "data", ptr.To("standard"))
			c := volumes.Contents{Config: greenCfg, Client: gkc, Image: "ferry", Mapping: snapshot.Mapping{Namespaces: map[string]string{ns: target}}}
			report := &snapshot.Report{}
			b.StartTimer()
			start := time.Now()
			moverPeak = max(moverPeak, moverRSS(func() {
				restorePeak = max(restorePeak, memwatch.Peak(func() { err = c.Restore(ctx, r, report) }))
			}))
			took += time.Since(start)
			if err != nil || len(report.Items) > 0 || report.Counts["volumes"][snapshot.StatusRestored] < n {
				b.Fatalf("restore: %v, %v, %+v", err, report.Counts, report.Items)
			}
			b.StopTimer()
			report = &snapshot.Report{}
			verifyPeak = max(verifyPeak, memwatch.Peak(func() { err = c.Verify(ctx, r, report) }))
			if err != nil || len(report.Items) > 0 || report.Counts["volumes"][snapshot.StatusIdentical] < n {
				b.Fatalf("verify: %v, %v, %+v", err, report.Counts, report.Items)
			}
			b.StartTimer()
		}
		b.ReportMetric(float64(n)*float64(b.N)/took.Seconds(), "files/s")
		b.ReportMetric(float64(restorePeak)/(1<<20), "restore-peak-heap-MiB")
		b.ReportMetric(float64(verifyPeak)/(1<<20), "verify-peak-heap-MiB")
		b.ReportMetric(float64(moverPeak)/1024, "mover-peak-RSS-MiB")
	})
}

// moverRSS runs fn and returns the highest peak RSS, in KiB, of the mover processes seen
// meanwhile: kwok runs a mover pod's commands as processes of this machine.
func moverRSS(fn func()) int64 {
	done := make(chan struct{})
	peak := make(chan int64)
	go func() {
		var most int64
		for {
			entries, _ := os.ReadDir("/proc")
			for _, e := range entries {
				cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
				if err != nil || !strings.Contains(string(cmdline), "ferry\x00mover\x00") {
					continue
				}
				status, _ := os.ReadFile("/proc/" + e.Name() + "/status")
				for _, line := range strings.Split(string(status), "\n") {
					if kib, ok := strings.CutPrefix(line, "VmHWM:"); ok {
						n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(kib, "kB")), 10, 64)
						most = max(most, n)
					}
				}
			}
			select {
			case <-done:
				peak <- most
				return
			case <-time.After(time.Second):
			}
		}
	}()
	fn()
	close(done)
	return <-peak
}

// writeSmallFiles fills dir with n files of 1 KiB, a thousand to a folder, each of its own bytes.
func writeSmallFiles(b *testing.B, dir string, n int) {
	b.Helper()
	data := make([]byte, 1024)
	for i := range n {
		sub := filepath.Join(dir, fmt.Sprintf("d%04d", i/1000))
		if i%1000 == 0 {
			if err := os.MkdirAll(sub, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		copy(data, fmt.Sprintf("file %d of %d\n", i, n))
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%07d.txt", i)), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}
