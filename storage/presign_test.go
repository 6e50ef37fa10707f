package storage_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ferrykube/ferry/storage"
)

// presigner is the S3 backend's Presigner: the file backend has none (direct movers need S3).
func presigner(t *testing.T, b storage.Backend) storage.Presigner {
	t.Helper()
	p, ok := b.(storage.Presigner)
	if !ok {
		t.Fatalf("%s does not implement storage.Presigner", b)
	}
	return p
}

// refused asserts that a presigned request failed with the HTTP status want.
func refused(t *testing.T, what string, err error, want int) {
	t.Helper()
	var se *storage.PresignedStatusError
	if !errors.As(err, &se) || se.Status != want {
		t.Fatalf("%s: %v, want HTTP %d", what, err, want)
	}
	if strings.Contains(err.Error(), "X-Amz-Signature") || strings.Contains(err.Error(), "http") {
		t.Fatalf("%s: the error names the URL: %v", what, err)
	}
	t.Logf("%s: %v", what, err)
}

// otherKey points a presigned request at another key of the same bucket, signature unchanged.
func otherKey(req storage.PresignedRequest, from, to string) storage.PresignedRequest {
	req.URL = strings.Replace(req.URL, from, to, 1)
	return req
}

// waitExpired waits until a presigned request is past its expiry, with a margin for the server.
func waitExpired(req storage.PresignedRequest) {
	time.Sleep(time.Until(req.Expires) + 1500*time.Millisecond)
}

// A presigned GET reads its own object, and only until it expires; changing the key in its URL
// breaks the signature.
func TestS3PresignGet(t *testing.T) {
	b := newS3(t, "presign-get/")
	p := presigner(t, b)
	ctx := context.Background()
	client := storage.PresignedHTTPClient(false)
	for k, v := range map[string]string{"vol/a.tar.zst": "the volume a", "vol/b.tar.zst": "the volume b"} {
		if err := b.Put(ctx, k, strings.NewReader(v)); err != nil {
			t.Fatal(err)
		}
	}
	req, err := p.PresignGet(ctx, "vol/a.tar.zst", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if req.Method != http.MethodGet || time.Until(req.Expires) > time.Minute || time.Until(req.Expires) < 50*time.Second {
		t.Fatalf("presigned GET %s expiring %s, want GET within a minute", req.Method, req.Expires)
	}
	// The signature only: never the secret key (the URL names the access key's ID, as every
	// presigned URL does).
	if secret := tb.MinIO["backup"].SecretKey; strings.Contains(fmt.Sprint(req), secret) {
		t.Fatal("the presigned request holds the secret key")
	}
	rc, err := storage.GetPresigned(ctx, client, req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(got) != "the volume a" {
		t.Fatalf("presigned GET read %q, %v", got, err)
	}
	_, err = storage.GetPresigned(ctx, client, otherKey(req, "vol/a.tar.zst", "vol/b.tar.zst"))
	refused(t, "a presigned GET of vol/a changed to vol/b", err, http.StatusForbidden)

	short, err := p.PresignGet(ctx, "vol/a.tar.zst", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	waitExpired(short)
	_, err = storage.GetPresigned(ctx, client, short)
	refused(t, "an expired presigned GET", err, http.StatusForbidden)
}

// A multipart upload that ferry starts takes parts through presigned URLs, each for its part of
// its upload of its key and its length only, until it expires; ferry completes or aborts it.
func TestS3PresignUpload(t *testing.T) {
	b := newS3(t, "presign-put/")
	p := presigner(t, b)
	ctx := context.Background()
	client := storage.PresignedHTTPClient(false)
	const key = "vol/c.tar.zst"
	id, err := p.CreateUpload(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	first := bytes.Repeat([]byte("0123456789abcdef"), 5<<20/16) // S3's smallest part but the last
	last := []byte("the end")
	put := func(part int32, data []byte) (string, error) {
		req, err := p.PresignPart(ctx, key, id, part, int64(len(data)), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return storage.PutPresigned(ctx, client, req, data)
	}
	etag1, err := put(1, first)
	if err != nil {
		t.Fatal(err)
	}
	req2, err := p.PresignPart(ctx, key, id, 2, int64(len(last)), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_, err = storage.PutPresigned(ctx, client, req2, append(append([]byte{}, last...), '!'))
	refused(t, "a part longer than its URL says", err, http.StatusForbidden)
	_, err = storage.PutPresigned(ctx, client, otherKey(req2, key, "vol/other.tar.zst"), last)
	refused(t, "a part URL of vol/c changed to vol/other", err, http.StatusForbidden)
	etag2, err := storage.PutPresigned(ctx, client, req2, last)
	if err != nil {
		t.Fatal(err)
	}
	short, err := p.PresignPart(ctx, key, id, 3, 1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	waitExpired(short)
	_, err = storage.PutPresigned(ctx, client, short, []byte("x"))
	refused(t, "an expired part URL", err, http.StatusForbidden)

	if _, err := b.Stat(ctx, key); !errors.Is(err, storage.ErrNotExist) {
		t.Fatalf("an upload not completed is visible: %v", err)
	}
	info, err := p.CompleteUpload(ctx, key, id, []storage.UploadedPart{{Number: 1, ETag: etag1, Size: int64(len(first))}, {Number: 2, ETag: etag2, Size: int64(len(last))}})
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(len(first) + len(last)); info.Size != want {
		t.Fatalf("completed upload of %d bytes, want %d", info.Size, want)
	}
	rc, err := b.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, append(append([]byte{}, first...), last...)) {
		t.Fatal("the completed object differs from its parts")
	}
	if _, err := b.Stat(ctx, "vol/other.tar.zst"); !errors.Is(err, storage.ErrNotExist) {
		t.Fatalf("a part URL wrote another key: %v", err)
	}

	// Aborted: no upload is left, and its part URLs write nothing more.
	const gone = "vol/d.tar.zst"
	id, err = p.CreateUpload(ctx, gone)
	if err != nil {
		t.Fatal(err)
	}
	req, err := p.PresignPart(ctx, gone, id, 1, int64(len(last)), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := storage.PutPresigned(ctx, client, req, last); err != nil {
		t.Fatal(err)
	}
	if err := p.AbortUpload(ctx, gone, id); err != nil {
		t.Fatal(err)
	}
	if _, err := storage.PutPresigned(ctx, client, req, last); err == nil {
		t.Fatal("a part URL of an aborted upload still writes")
	}
	uploads, err := tb.MinIO["backup"].S3Client().ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range uploads.Uploads {
		if strings.HasPrefix(aws.ToString(u.Key), "presign-put/") {
			t.Errorf("upload of %s left behind", aws.ToString(u.Key))
		}
	}
	if _, err := b.Stat(ctx, gone); !errors.Is(err, storage.ErrNotExist) {
		t.Fatalf("an aborted upload is visible: %v", err)
	}

	// Parts out of S3's range are refused before anything is signed.
	for _, bad := range []struct {
		part int32
		size int64
	}{{0, 1}, {storage.MaxParts + 1, 1}, {1, 0}, {1, storage.MaxPartSize + 1}} {
		if _, err := p.PresignPart(ctx, key, "some-upload", bad.part, bad.size, time.Minute); err == nil {
			t.Errorf("PresignPart(part %d, %d bytes) signed", bad.part, bad.size)
		}
	}
}
