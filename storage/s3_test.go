package storage_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/internal/memwatch"
	"github.com/ferrykube/ferry/storage"
	"github.com/ferrykube/ferry/storage/storagetest"
)

// tb is the package's shared testbed: only the MinIO that serves as backup storage.
var tb *testbed.Testbed

func TestMain(m *testing.M) {
	os.Exit(testbed.Main(m, testbed.Options{MinIOs: []string{"backup"}}, &tb))
}

const bucket = "conformance"

func newS3(t testing.TB, prefix string) storage.Backend {
	t.Helper()
	tb := testbed.Require(t, tb)
	minio := tb.MinIO["backup"]
	ctx := context.Background()
	if err := minio.CreateBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	b, err := storage.NewS3(ctx, storage.S3Config{
		Bucket: bucket, Prefix: prefix, Endpoint: minio.Endpoint, PathStyle: true, Region: "us-east-1",
		Credentials: minio.Credentials(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestS3Conformance(t *testing.T) {
	testbed.Require(t, tb)
	var n atomic.Int64
	storagetest.Run(t, func(t *testing.T) storage.Backend {
		return newS3(t, fmt.Sprintf("run-%d/", n.Add(1)))
	})
}

func TestS3OpenFromURL(t *testing.T) {
	minio := testbed.Require(t, tb).MinIO["backup"]
	ctx := context.Background()
	if err := minio.CreateBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	for _, kv := range minio.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	url := "s3://" + bucket + "/from-url?endpoint=" + minio.Endpoint + "&path-style=true"
	b, err := storage.Open(ctx, url)
	if err != nil {
		t.Fatalf("Open(%s) with credentials from the AWS environment: %v", url, err)
	}
	if err := b.Put(ctx, "k", strings.NewReader("v")); err != nil {
		t.Fatal(err)
	}

	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
	if _, err := storage.Open(ctx, url); err == nil || !strings.Contains(err.Error(), "access denied: check the credentials") {
		t.Fatalf("Open with a wrong secret key = %v, want an access-denied error that says to check the credentials", err)
	}
}

func TestS3BadBucketAndCredentials(t *testing.T) {
	minio := testbed.Require(t, tb).MinIO["backup"]
	ctx := context.Background()
	_, err := storage.NewS3(ctx, storage.S3Config{Bucket: "no-such-bucket", Endpoint: minio.Endpoint, PathStyle: true, Credentials: minio.Credentials()})
	if err == nil || !strings.Contains(err.Error(), `bucket "no-such-bucket" does not exist`) {
		t.Fatalf("missing bucket: %v, want a message naming the bucket", err)
	}
	_, err = storage.NewS3(ctx, storage.S3Config{Bucket: bucket, Endpoint: minio.Endpoint, PathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("nobody", "nothing-at-all", "")})
	if err == nil || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("unknown access key: %v, want access denied", err)
	}
}

// A multipart upload cut off by a killed ferry stays in the bucket, unlisted; CleanPartial aborts
// those under the prefix and no other.
func TestS3AbortsInterruptedUploads(t *testing.T) {
	b := newS3(t, "partial/")
	ctx := context.Background()
	client := tb.MinIO["backup"].S3Client()
	start := func(key string) {
		up, err := client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String("partial/" + key)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(bucket), Key: aws.String("partial/" + key), UploadId: up.UploadId,
			PartNumber: aws.Int32(1), Body: strings.NewReader("half an upload")}); err != nil {
			t.Fatal(err)
		}
	}
	start("backups/x/volumes/ns/claim.tar.zst")
	start("backups/y/other.tar.zst")
	n, err := b.(storage.PartialCleaner).CleanPartial(ctx, "backups/x/")
	if err != nil || n != 1 {
		t.Fatalf("CleanPartial = %d, %v; want the one upload under backups/x/", n, err)
	}
	left, err := client.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, u := range left.Uploads {
		if strings.HasPrefix(aws.ToString(u.Key), "partial/") {
			keys = append(keys, aws.ToString(u.Key))
		}
	}
	if len(keys) != 1 || keys[0] != "partial/backups/y/other.tar.zst" {
		t.Errorf("uploads left: %v, want only backups/y's", keys)
	}
}

// TestS3PutHoldsLittleMemory: an upload's buffers are bounded by what is uploaded, not by the
// part size times the parts in flight. The transfer manager's multipart upload allocates
// Concurrency+1 parts of PartSize up front (5 × 32 MiB) for any object of 16 MiB or more: each
// pack of the chunk repository (16 MiB and a little more) took 160 MiB while it was uploaded, and
// each file list or tree of a claim of a million files as much.
func TestS3PutHoldsLittleMemory(t *testing.T) {
	b := newS3(t, "memory/")
	ctx := context.Background()
	data := bytes.Repeat([]byte("0123456789abcdef"), (17<<20)/16) // a pack's size: above S3's multipart threshold
	for _, tc := range []struct {
		name string
		put  func() error
		max  uint64
	}{
		// Known size: uploaded from the bytes, without a copy.
		{"bytes", func() error { return b.Put(ctx, "pack", bytes.NewReader(data)) }, 24 << 20},
		{"create", func() error {
			return b.Create(ctx, fmt.Sprintf("record-%d", time.Now().UnixNano()), bytes.NewReader(data))
		}, 24 << 20},
		// A stream said to be small: parts of the least size S3 takes.
		{"small stream", func() error {
			return b.Put(storage.WithSmallParts(ctx), "list", io.MultiReader(bytes.NewReader(data)))
		}, 64 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			peak := memwatch.Peak(func() { err = tc.put() })
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("uploading %d MiB took %d MiB of heap", len(data)>>20, peak>>20)
			if peak > tc.max {
				t.Errorf("uploading %d MiB took %d MiB of heap, want at most %d", len(data)>>20, peak>>20, tc.max>>20)
			}
		})
	}
	rc, err := b.Get(ctx, "list")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if got, _ := io.ReadAll(rc); !bytes.Equal(got, data) {
		t.Errorf("the stream uploaded in small parts reads back as %d bytes, want its %d", len(got), len(data))
	}
}

// TestS3CopiesALargeObjectInParts: an object larger than the biggest CopyObject (5 GiB on S3;
// 5 MiB here) is copied in parts, whole, and a failed copy leaves no unfinished upload.
func TestS3CopiesALargeObjectInParts(t *testing.T) {
	minio := testbed.Require(t, tb).MinIO["backup"]
	ctx := context.Background()
	if err := minio.CreateBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	b, err := storage.NewS3(ctx, storage.S3Config{Bucket: bucket, Prefix: "copy-parts/", Endpoint: minio.Endpoint, PathStyle: true, Region: "us-east-1",
		Credentials: minio.Credentials(), PartSize: 5 << 20, MaxCopySize: 5 << 20})
	if err != nil {
		t.Fatal(err)
	}
	const size = 12<<20 + 17 // three parts, the last short
	h := sha256.New()
	if err := b.Put(ctx, "src", io.TeeReader(storagetest.Stream(7, size), h)); err != nil {
		t.Fatal(err)
	}
	if err := b.Copy(ctx, "src", "dst", size); err != nil {
		t.Fatalf("Copy: %v", err)
	}
	rc, err := b.Get(ctx, "dst")
	if err != nil {
		t.Fatal(err)
	}
	got := sha256.New()
	n, err := io.Copy(got, rc)
	rc.Close()
	if err != nil || n != size || !bytes.Equal(got.Sum(nil), h.Sum(nil)) {
		t.Fatalf("the copy: %d bytes (%v), sha256 %x, want %d bytes %x", n, err, got.Sum(nil), size, h.Sum(nil))
	}
	if err := b.Copy(ctx, "missing", "dst", size); !errors.Is(err, storage.ErrNotExist) {
		t.Fatalf("Copy of a missing key: %v, want ErrNotExist", err)
	}
	if left, err := b.CleanPartial(ctx, ""); err != nil || left != 0 {
		t.Errorf("unfinished uploads left: %d (%v)", left, err)
	}
}

// TestS3PutTakesAKnownSHA256: a body put with its SHA-256 (WithSHA256) is signed with it, not
// read once more for it; the store checks it, so a wrong sum fails the Put and stores nothing.
func TestS3PutTakesAKnownSHA256(t *testing.T) {
	b := newS3(t, "known-sha256/")
	ctx := context.Background()
	body := []byte("a pack's bytes")
	sum := sha256.Sum256(body)
	if err := b.Put(storage.WithSHA256(ctx, hex.EncodeToString(sum[:])), "right", bytes.NewReader(body)); err != nil {
		t.Fatalf("put with its SHA-256: %v", err)
	}
	rc, err := b.Get(ctx, "right")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read back %q (%v), want %q", got, err, body)
	}
	wrong := sha256.Sum256([]byte("other bytes"))
	if err := b.Put(storage.WithSHA256(ctx, hex.EncodeToString(wrong[:])), "wrong", bytes.NewReader(body)); err == nil {
		t.Fatal("a put with a wrong SHA-256 succeeded: the sum was not used")
	}
	if _, err := b.Stat(ctx, "wrong"); !errors.Is(err, storage.ErrNotExist) {
		t.Errorf("after the failed put: %v, want not found", err)
	}
}
