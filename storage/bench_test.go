package storage_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/internal/memwatch"
	"github.com/ferrykube/ferry/storage"
	"github.com/ferrykube/ferry/storage/storagetest"
	"golang.org/x/sync/errgroup"
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
			return rawUpload(ctx, raw, "bench/raw-"+strconv.Itoa(i), storagetest.Stream(uint64(i), benchSize))
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
		measure(b, func(i int) error { return rawDownload(ctx, raw, "bench/download", benchSize) })
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

func rawUpload(ctx context.Context, client *s3.Client, key string, r io.Reader) error {
	mpu, err := client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return err
	}
	var parts []types.CompletedPart
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(storage.DefaultConcurrency)
	for n := int32(1); ; n++ {
		buf := make([]byte, storage.DefaultPartSize)
		read, err := io.ReadFull(r, buf)
		if read == 0 {
			break
		}
		if err != nil && err != io.ErrUnexpectedEOF {
			return err
		}
		g.Go(func() error {
			out, err := client.UploadPart(gctx, &s3.UploadPartInput{Bucket: aws.String(bucket), Key: aws.String(key),
				UploadId: mpu.UploadId, PartNumber: aws.Int32(n), Body: bytes.NewReader(buf[:read])})
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			parts = append(parts, types.CompletedPart{PartNumber: aws.Int32(n), ETag: out.ETag, ChecksumCRC32: out.ChecksumCRC32})
			return nil
		})
		if read < len(buf) {
			break
		}
	}
	if err := g.Wait(); err != nil {
		return err
	}
	slices.SortFunc(parts, func(a, b types.CompletedPart) int { return int(aws.ToInt32(a.PartNumber) - aws.ToInt32(b.PartNumber)) })
	_, err = client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key),
		UploadId: mpu.UploadId, MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
	return err
}

func rawDownload(ctx context.Context, client *s3.Client, key string, size int64) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(storage.DefaultConcurrency)
	for off := int64(0); off < size; off += storage.DefaultPartSize {
		end := min(off+storage.DefaultPartSize, size) - 1
		g.Go(func() error {
			out, err := client.GetObject(gctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key),
				Range: aws.String(fmt.Sprintf("bytes=%d-%d", off, end))})
			if err != nil {
				return err
			}
			defer out.Body.Close()
			_, err = io.Copy(io.Discard, out.Body)
			return err
		})
	}
	return g.Wait()
}
