package volumes

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ferrykube/ferry/internal/memwatch"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"github.com/ferrykube/ferry/storage/repo"
	"github.com/klauspost/compress/zstd"
)

// BenchmarkChunkedManyFiles backs up a volume of many files of 1 KiB as a chunked backup, the
// mover's side and ferry's in this process (packChunks with PackTree, as streamTree runs them
// over exec) into a repository on local disk: first in full, then incrementally with nothing
// changed. It reports files/s and the peak heap of each, beside the raw reference of the same
// run: Pack's tar through zstd to nothing. The process's peak RSS (all of it, the files'
// creation too) is reported last. FERRY_BENCH_FILES sets the number of files (20,000 by default;
// 1,000,000 is issue 17's goal). Run: go test -run '^$' -bench ChunkedManyFiles ./snapshot/volumes/
func BenchmarkChunkedManyFiles(b *testing.B) {
	n := benchFiles(b, 20000)
	dir := b.TempDir()
	start := time.Now()
	smallFiles(b, dir, n)
	b.Logf("%d files of 1 KiB written in %s", n, time.Since(start).Round(time.Millisecond))
	ctx := context.Background()
	report := func(b *testing.B, took time.Duration, peak uint64) {
		b.ReportMetric(float64(n)*float64(b.N)/took.Seconds(), "files/s")
		b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
		b.ReportMetric(0, "ns/op")
	}
	b.Run(fmt.Sprintf("raw-tar-zstd/files=%d", n), func(b *testing.B) {
		var took time.Duration
		var peak uint64
		for range b.N {
			start := time.Now()
			peak = max(peak, memwatch.Peak(func() {
				enc, _ := zstd.NewWriter(io.Discard, zstd.WithEncoderLevel(zstd.SpeedFastest))
				if err := Pack(dir, enc); err != nil {
					b.Fatal(err)
				}
				enc.Close()
			}))
			took += time.Since(start)
		}
		report(b, took, peak)
	})
	var first bytes.Buffer
	for _, step := range []string{"full", "incremental"} {
		b.Run(fmt.Sprintf("chunked-%s/files=%d", step, n), func(b *testing.B) {
			var took time.Duration
			var peak uint64
			for range b.N {
				b.StopTimer()
				st, err := storage.NewFile(b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				r, err := openRepo(ctx, st, repo.Options{})
				if err != nil {
					b.Fatal(err)
				}
				if step == "incremental" {
					// The first backup, in this repository, outside the measure.
					cw, _ := r.NewWriter(ctx)
					first.Reset()
					incremental(b, cw, dir, nil, &first, func(snapshot.File) error { return nil })
					if err := cw.Close(ctx); err != nil {
						b.Fatal(err)
					}
				}
				cw, err := r.NewWriter(ctx)
				if err != nil {
					b.Fatal(err)
				}
				var prev []byte
				if step == "incremental" {
					prev = first.Bytes()
				}
				var tree countWriter
				b.StartTimer()
				start := time.Now()
				reused := 0
				peak = max(peak, memwatch.Peak(func() {
					reused = incremental(b, cw, dir, prev, &tree, func(snapshot.File) error { return nil })
					if err := cw.Close(ctx); err != nil {
						b.Fatal(err)
					}
				}))
				took += time.Since(start)
				if step == "incremental" && reused != n {
					b.Fatalf("%d files taken from the previous tree, want %d", reused, n)
				}
				s := cw.Stats()
				b.Logf("%s: %d chunks, %d new bytes, %d bytes of packs, tree stream %d bytes", step, s.Chunks, s.NewBytes, s.StoredBytes, tree.n)
			}
			report(b, took, peak)
		})
	}
	if rss, err := memwatch.SelfPeakRSS(); err == nil {
		b.Logf("process peak RSS %d MiB (%d files)", rss>>20, n)
	}
}

// benchFiles is the number of files FERRY_BENCH_FILES asks a benchmark for, else n.
func benchFiles(b *testing.B, n int) int {
	if env := os.Getenv("FERRY_BENCH_FILES"); env != "" {
		var err error
		if n, err = strconv.Atoi(env); err != nil || n < 1 {
			b.Fatalf("FERRY_BENCH_FILES=%q: want a number of files", env)
		}
	}
	return n
}
