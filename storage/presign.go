package storage

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// Presigner is a backend that lets another process (a mover pod) read one object, or write the
// parts of one multipart upload, for a short time and without any credentials: S3's presigned
// URLs. Each URL is signed for its method, key (and upload, part and length) and expiry alone;
// starting, completing and aborting an upload stay with the holder of the credentials.
type Presigner interface {
	// PresignGet returns a request that reads the object at key, valid for expires.
	PresignGet(ctx context.Context, key string, expires time.Duration) (PresignedRequest, error)
	// CreateUpload starts a multipart upload to key and returns its ID. Nothing appears under key
	// before CompleteUpload.
	CreateUpload(ctx context.Context, key string) (string, error)
	// PresignPart returns a request that writes part (1 to MaxParts) of the upload: exactly size
	// bytes (1 to MaxPartSize), valid for expires.
	PresignPart(ctx context.Context, key, uploadID string, part int32, size int64, expires time.Duration) (PresignedRequest, error)
	// CompleteUpload makes the parts, in their order, the object at key and describes it. The
	// server refuses a part whose ETag is not the one it stored.
	CompleteUpload(ctx context.Context, key, uploadID string, parts []UploadedPart) (ObjectInfo, error)
	// AbortUpload discards the upload and the parts it holds. An upload already gone is no error.
	AbortUpload(ctx context.Context, key, uploadID string) error
}

// PresignedRequest is one HTTP request another process may send, as signed. The URL is a
// credential until it expires: it travels on stdin, never in a pod spec, log or error.
type PresignedRequest struct {
	Method string `json:"method"`
	URL    string `json:"url"`
	// Header is sent as it is (the signature covers it); Host and Content-Length come from the
	// URL and the body.
	Header  http.Header `json:"header,omitempty"`
	Expires time.Time   `json:"expires"`
	// InsecureSkipVerify: the storage URL turned TLS certificate verification off.
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
}

// UploadedPart is one part of a multipart upload as the server stored it.
type UploadedPart struct {
	Number int32  `json:"number"`
	ETag   string `json:"etag"`
	Size   int64  `json:"size"`
}

// PresignGet implements Presigner.
func (b *S3) PresignGet(ctx context.Context, key string, expires time.Duration) (PresignedRequest, error) {
	k, err := b.objectKey(key)
	if err != nil {
		return PresignedRequest{}, err
	}
	now := time.Now()
	out, err := b.presign.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b.cfg.Bucket), Key: aws.String(k)}, s3.WithPresignExpires(expires))
	if err != nil {
		return PresignedRequest{}, fmt.Errorf("presign a read of %s in %s: %w", key, b, err)
	}
	return b.presigned(out, now.Add(expires)), nil
}

// CreateUpload implements Presigner.
func (b *S3) CreateUpload(ctx context.Context, key string) (string, error) {
	k, err := b.objectKey(key)
	if err != nil {
		return "", err
	}
	out, err := b.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(b.cfg.Bucket), Key: aws.String(k)})
	if err != nil {
		return "", fmt.Errorf("start an upload of %s to %s: %w", key, b, err)
	}
	return aws.ToString(out.UploadId), nil
}

// PresignPart implements Presigner. The length is signed: a body of another length is refused.
func (b *S3) PresignPart(ctx context.Context, key, uploadID string, part int32, size int64, expires time.Duration) (PresignedRequest, error) {
	k, err := b.objectKey(key)
	if err != nil {
		return PresignedRequest{}, err
	}
	switch {
	case part < 1 || part > MaxParts:
		return PresignedRequest{}, fmt.Errorf("presign part %d of %s: parts are numbered 1 to %d", part, key, MaxParts)
	case size < 1 || size > MaxPartSize:
		// An empty part would leave the length unsigned.
		return PresignedRequest{}, fmt.Errorf("presign part %d of %s: %d bytes, want 1 to %d", part, key, size, int64(MaxPartSize))
	}
	now := time.Now()
	out, err := b.presign.PresignUploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(b.cfg.Bucket), Key: aws.String(k),
		UploadId: aws.String(uploadID), PartNumber: aws.Int32(part), ContentLength: aws.Int64(size)}, s3.WithPresignExpires(expires))
	if err != nil {
		return PresignedRequest{}, fmt.Errorf("presign part %d of %s in %s: %w", part, key, b, err)
	}
	return b.presigned(out, now.Add(expires)), nil
}

// CompleteUpload implements Presigner.
func (b *S3) CompleteUpload(ctx context.Context, key, uploadID string, parts []UploadedPart) (ObjectInfo, error) {
	k, err := b.objectKey(key)
	if err != nil {
		return ObjectInfo{}, err
	}
	done := make([]types.CompletedPart, len(parts))
	for i, p := range parts {
		done[i] = types.CompletedPart{PartNumber: aws.Int32(p.Number), ETag: aws.String(p.ETag)}
	}
	_, err = b.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String(b.cfg.Bucket), Key: aws.String(k),
		UploadId: aws.String(uploadID), MultipartUpload: &types.CompletedMultipartUpload{Parts: done}})
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("complete the upload of %s to %s: %w", key, b, err)
	}
	return b.Stat(ctx, key)
}

// AbortUpload implements Presigner.
func (b *S3) AbortUpload(ctx context.Context, key, uploadID string) error {
	k, err := b.objectKey(key)
	if err != nil {
		return err
	}
	_, err = b.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String(b.cfg.Bucket), Key: aws.String(k), UploadId: aws.String(uploadID)})
	var ae interface{ ErrorCode() string }
	if err != nil && !(errors.As(err, &ae) && ae.ErrorCode() == "NoSuchUpload") {
		return fmt.Errorf("abort the upload of %s to %s: %w", key, b, err)
	}
	return nil
}

func (b *S3) presigned(out *v4.PresignedHTTPRequest, expires time.Time) PresignedRequest {
	h := http.Header{}
	for name, values := range out.SignedHeader {
		switch http.CanonicalHeaderKey(name) {
		case "Host", "Content-Length":
		default:
			h[http.CanonicalHeaderKey(name)] = values
		}
	}
	if len(h) == 0 {
		h = nil
	}
	return PresignedRequest{Method: out.Method, URL: out.URL, Header: h, Expires: expires, InsecureSkipVerify: b.cfg.InsecureSkipVerify}
}

// PresignedHTTPClient is the client of a process that holds presigned requests and no SDK client.
// It has no overall timeout: S3 checks a signature when a request starts, and a long download
// of a large object may take hours.
func PresignedHTTPClient(insecureSkipVerify bool) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 16
	tr.ResponseHeaderTimeout = 2 * time.Minute
	if insecureSkipVerify {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
	}
	return &http.Client{Transport: tr}
}

// PresignedStatusError is a presigned request the server answered with an error status: 403
// for an expired URL or one used for something it was not signed for.
type PresignedStatusError struct {
	Method string
	Status int
	// Code is the S3 error code (AccessDenied, SignatureDoesNotMatch, NoSuchUpload...), if any.
	Code string
}

func (e *PresignedStatusError) Error() string {
	s := fmt.Sprintf("%s refused: %d %s", e.Method, e.Status, http.StatusText(e.Status))
	if e.Code != "" {
		s += " (" + e.Code + ")"
	}
	return s
}

// GetPresigned sends a presigned GET and returns the object's body.
func GetPresigned(ctx context.Context, client *http.Client, req PresignedRequest) (io.ReadCloser, error) {
	resp, err := sendPresigned(ctx, client, req, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// PutPresigned sends a presigned PUT (a part of an upload) with body and returns the ETag the
// server gave it.
func PutPresigned(ctx context.Context, client *http.Client, req PresignedRequest, body []byte) (string, error) {
	resp, err := sendPresigned(ctx, client, req, body)
	if err != nil {
		return "", err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	etag := resp.Header.Get("ETag")
	if etag == "" {
		return "", fmt.Errorf("%s: the server gave no ETag", req.Method)
	}
	return etag, nil
}

// sendPresigned sends the request and returns a successful response. Its errors never hold the
// URL, whose query is the signature.
func sendPresigned(ctx context.Context, client *http.Client, req PresignedRequest, body []byte) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	hr, err := http.NewRequestWithContext(ctx, req.Method, req.URL, r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", req.Method, redact(err))
	}
	for name, values := range req.Header {
		hr.Header[name] = values
	}
	if body != nil {
		hr.ContentLength = int64(len(body))
	}
	resp, err := client.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", req.Method, withoutQuery(req.URL), redact(err))
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	var s3err struct {
		Code string `xml:"Code"`
	}
	// Only the code: S3's error document may echo the string it signed, and the key ID.
	xml.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&s3err)
	return nil, &PresignedStatusError{Method: req.Method, Status: resp.StatusCode, Code: strings.TrimSpace(s3err.Code)}
}

// redact keeps the cause of a url.Error, which would print the whole URL.
func redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// withoutQuery is a URL fit for messages: host and path, no signature.
func withoutQuery(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a presigned URL)"
	}
	return u.Host + u.Path
}
