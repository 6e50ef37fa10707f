package storage_test

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"testing"

	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/internal/memwatch"
	"github.com/ferrykube/ferry/storage/storagetest"
)

// benchSize is the object each benchmark operation moves.
const benchSize = 512 << 20

// BenchmarkS3 compares ferry's S3 backend with a raw multipart transfer (same part size and
// concurrency, driven directly with the S3 API) against the same MinIO, and reports peak heap.
// Run: make bench (go test -run '^$' -bench S3 ./storage/).
func BenchmarkS3(b *testing.B) {
	minio := testbed.Require(b, tb).MinIO["backup"]
	ctx := context.Background()
	backend := newS3(b, "bench/")
	raw := minio.S3Client()

	b.Run("upload/ferry", func(b *testing.B) {
		measure(b, func(i int) error {
			return backend.Put(ctx, "ferry-"+strconv.Itoa(i), onlyReader{storagetest.Stream(uint64(i), benchSize)})
		})
	})
	b.Run("upload/raw-multipart", func(b *testing.B) {
		measure(b, func(i int) error {
			return storagetest.RawUpload(ctx, raw, bucket, "bench/raw-"+strconv.Itoa(i), storagetest.Stream(uint64(i), benchSize))
		})
	})
	// The downloads read objects of their own, so they also run alone (-bench S3/download).
	if err := backend.Put(ctx, "download", onlyReader{storagetest.Stream(7, benchSize)}); err != nil {
		b.Fatal(err)
	}
	b.Run("download/ferry", func(b *testing.B) {
		measure(b, func(i int) error {
			rc, err := backend.Get(ctx, "download")
			if err != nil {
				return err
			}
			defer rc.Close()
			return copyAll(rc)
		})
	})
	b.Run("download/raw-ranged", func(b *testing.B) {
		measure(b, func(i int) error { return storagetest.RawDownload(ctx, raw, bucket, "bench/download", benchSize) })
	})
}

type onlyReader struct{ io.Reader }

func copyAll(r io.Reader) error {
	n, err := io.Copy(io.Discard, r)
	if err == nil && n != benchSize {
		err = fmt.Errorf("read %d bytes, want %d", n, benchSize)
	}
	return err
}

// measure runs op b.N times, reporting throughput and the peak heap seen while it ran.
func measure(b *testing.B, op func(i int) error) {
	b.SetBytes(benchSize)
	peak := memwatch.Peak(func() {
		b.ResetTimer()
		for i := range b.N {
			if err := op(i); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
	})
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
}
