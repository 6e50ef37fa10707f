package volumes

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/ferrykube/ferry/internal/memwatch"
	"github.com/klauspost/compress/zstd"
)

// BenchmarkMoverRestoreManyFiles runs a mover's two steps of a restore of a volume of many files
// of 1 KiB into an empty folder, as `ferry mover unpack --stage` and `--apply` run them (the
// staged list saved and printed, loaded back, the result printed), and reports each step's
// files/s and peak heap, and the heap per file: a mover pod's memory limit (512 MiB by default)
// must hold it. FERRY_BENCH_FILES sets the number of files (100,000 by default). Run:
// go test -run '^$' -bench MoverRestoreManyFiles ./snapshot/volumes/
func BenchmarkMoverRestoreManyFiles(b *testing.B) {
	n := benchFiles(b, 100000)
	src := b.TempDir()
	smallFiles(b, src, n)
	var archive bytes.Buffer
	enc, err := zstd.NewWriter(&archive, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		b.Fatal(err)
	}
	if err := Pack(src, enc); err != nil {
		b.Fatal(err)
	}
	enc.Close()
	ctx := context.Background()
	for i := range b.N {
		dir := b.TempDir()
		var st Staged
		start := time.Now()
		stagePeak := memwatch.Peak(func() {
			if st, err = StageCompressed(ctx, dir, bytes.NewReader(archive.Bytes())); err == nil {
				if err = SaveStaged(dir, &st); err == nil {
					err = PrintStaged(io.Discard, dir, st, st)
				}
			}
			st.Files = nil
		})
		if err != nil {
			b.Fatal(err)
		}
		staged := time.Since(start)
		start = time.Now()
		applyPeak := memwatch.Peak(func() {
			var loaded Staged
			if loaded, err = LoadStaged(dir, st, bufio.NewReader(bytes.NewReader(nil))); err != nil {
				return
			}
			err = ApplyAndPrint(ctx, dir, loaded, UnpackOptions{Delete: true}, io.Discard)
		})
		if err != nil {
			b.Fatal(err)
		}
		applied := time.Since(start)
		if i == 0 {
			fmt.Printf("mover restore of %d files: stage %.0f files/s, peak heap %.0f MiB (%.0f B a file); apply %.0f files/s, peak heap %.0f MiB (%.0f B a file)\n",
				n, float64(n)/staged.Seconds(), float64(stagePeak)/(1<<20), float64(stagePeak)/float64(n),
				float64(n)/applied.Seconds(), float64(applyPeak)/(1<<20), float64(applyPeak)/float64(n))
			b.ReportMetric(float64(stagePeak)/(1<<20), "stage-peak-heap-MiB")
			b.ReportMetric(float64(applyPeak)/(1<<20), "apply-peak-heap-MiB")
		}
	}
}
