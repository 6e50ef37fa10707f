package storage_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ferrykube/ferry/integration/testbed"
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
