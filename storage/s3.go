package storage

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	"github.com/ferrykube/ferry/internal/badinput"
	"k8s.io/apimachinery/pkg/api/resource"
)

const (
	// DefaultPartSize lets a stream of unknown size grow to 312 GiB within S3's 10,000 parts, while
	// an upload holds at most (concurrency+1) parts in memory.
	DefaultPartSize = 32 << 20
	// DefaultConcurrency is how many parts of one object move at once.
	DefaultConcurrency = 4

	// MinPartSize and MaxPartSize bound S3's multipart parts (the last part may be smaller), and
	// MaxParts their number.
	MinPartSize = 5 << 20
	MaxPartSize = 5 << 30
	MaxParts    = 10000
)

// S3Config says where an S3 backend stores objects and how it connects.
type S3Config struct {
	Bucket string
	// Prefix is prepended to every key; empty or ending in "/".
	Prefix string
	// Endpoint is the server's base URL, e.g. http://127.0.0.1:9000; empty means AWS.
	Endpoint string
	// Region defaults to the AWS environment's region, else us-east-1.
	Region string
	// PathStyle addresses the bucket in the path, as MinIO needs.
	PathStyle bool
	// InsecureSkipVerify turns TLS certificate verification off.
	InsecureSkipVerify bool
	// Profile selects a profile of the shared AWS config files.
	Profile string
	// PartSize and Concurrency tune multipart transfers; zero means the defaults.
	PartSize    int64
	Concurrency int
	// MaxCopySize is the largest object Copy copies whole; larger ones are copied in parts.
	// Zero means DefaultMaxCopySize.
	MaxCopySize int64
	// Credentials, when set, override the AWS environment/profile chain (used by tests).
	Credentials aws.CredentialsProvider `json:"-"`
}

func parseS3URL(u *url.URL) (S3Config, error) {
	cfg := S3Config{Bucket: u.Host, Prefix: strings.Trim(u.Path, "/")}
	if cfg.Bucket == "" {
		return cfg, errors.New("no bucket: want s3://BUCKET[/PREFIX]")
	}
	if u.User != nil {
		return cfg, errors.New("credentials do not belong in the URL: use AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or an AWS profile")
	}
	boolParam := func(name string, dst *bool) error {
		v := u.Query().Get(name)
		if v == "" {
			return nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%s=%q: want true or false", name, v)
		}
		*dst = b
		return nil
	}
	for name, values := range u.Query() {
		v := values[0]
		var err error
		switch name {
		case "endpoint":
			e, perr := url.Parse(v)
			if perr != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
				err = fmt.Errorf("endpoint=%q: want http(s)://HOST[:PORT]", v)
			}
			cfg.Endpoint = v
		case "region":
			cfg.Region = v
		case "profile":
			cfg.Profile = v
		case "path-style":
			err = boolParam(name, &cfg.PathStyle)
		case "insecure-skip-verify":
			err = boolParam(name, &cfg.InsecureSkipVerify)
		case "part-size":
			q, perr := resource.ParseQuantity(v)
			switch {
			case perr != nil:
				err = fmt.Errorf("part-size=%q: want a size such as 64Mi", v)
			case q.Value() < MinPartSize || q.Value() > MaxPartSize:
				err = fmt.Errorf("part-size=%q: must be between 5Mi and 5Gi", v)
			}
			cfg.PartSize = q.Value()
		case "concurrency":
			n, perr := strconv.Atoi(v)
			if perr != nil || n < 1 || n > 64 {
				err = fmt.Errorf("concurrency=%q: want a number from 1 to 64", v)
			}
			cfg.Concurrency = n
		default:
			err = fmt.Errorf("unknown parameter %q (known: endpoint, region, path-style, insecure-skip-verify, profile, part-size, concurrency)", name)
		}
		if err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// S3 stores objects in an S3 bucket, moving large objects as concurrent multipart transfers.
type S3 struct {
	cfg      S3Config
	client   *s3.Client
	presign  *s3.PresignClient
	transfer *transfermanager.Client
}

var _ Presigner = (*S3)(nil)

// NewS3 connects to the bucket and checks that it exists, that the credentials may use it and that
// the server honours conditional writes.
func NewS3(ctx context.Context, cfg S3Config) (*S3, error) {
	if cfg.Prefix != "" && !strings.HasSuffix(cfg.Prefix, "/") {
		cfg.Prefix += "/"
	}
	if cfg.PartSize == 0 {
		cfg.PartSize = DefaultPartSize
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	httpClient := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.MaxIdleConnsPerHost = 4 * cfg.Concurrency
		if cfg.InsecureSkipVerify {
			if tr.TLSClientConfig == nil {
				tr.TLSClientConfig = &tls.Config{}
			}
			tr.TLSClientConfig.InsecureSkipVerify = true
		}
	})
	opts := []func(*config.LoadOptions) error{config.WithHTTPClient(httpClient)}
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	if cfg.Profile != "" {
		opts = append(opts, config.WithSharedConfigProfile(cfg.Profile))
	}
	if cfg.Credentials != nil {
		opts = append(opts, config.WithCredentialsProvider(cfg.Credentials))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3://%s: load AWS configuration: %w", cfg.Bucket, err)
	}
	if awsCfg.Region == "" {
		awsCfg.Region = "us-east-1"
	}
	cfg.Region = awsCfg.Region
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
	})
	b := &S3{
		cfg:     cfg,
		client:  client,
		presign: s3.NewPresignClient(client),
		transfer: transfermanager.New(client, func(o *transfermanager.Options) {
			o.PartSizeBytes = cfg.PartSize
			o.Concurrency = cfg.Concurrency
			o.FailTimeout = time.Minute // abort a failed multipart upload even after Ctrl-C
		}),
	}
	if _, err := client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(cfg.Bucket)}); err != nil {
		return nil, b.explain(err)
	}
	if err := b.checkConditional(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *S3) String() string {
	s := "s3://" + b.cfg.Bucket + "/" + b.cfg.Prefix
	if b.cfg.Endpoint != "" {
		s += " at " + b.cfg.Endpoint
	}
	return s
}

// explain turns errors of the bucket check into messages that say what to fix.
func (b *S3) explain(err error) error {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		switch re.HTTPStatusCode() {
		case http.StatusForbidden, http.StatusUnauthorized:
			return fmt.Errorf("%s: access denied: check the credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE) and the bucket policy: %w", b, err)
		case http.StatusNotFound:
			return fmt.Errorf("%s: bucket %q does not exist: %w", b, b.cfg.Bucket, err)
		}
	}
	if strings.Contains(err.Error(), "failed to retrieve credentials") || strings.Contains(err.Error(), "no EC2 IMDS") {
		return fmt.Errorf("%s: no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or AWS_PROFILE: %w", b, err)
	}
	return fmt.Errorf("%s: %w", b, err)
}

func (b *S3) objectKey(key string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", fmt.Errorf("%s: %w", b, err)
	}
	return b.cfg.Prefix + key, nil
}

func isNotFound(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NoSuchKey", "NotFound":
			return true
		}
	}
	return false
}

func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

func (b *S3) Put(ctx context.Context, key string, r io.Reader) error {
	k, err := b.objectKey(key)
	if err != nil {
		return err
	}
	if err := b.upload(ctx, &transfermanager.UploadObjectInput{Bucket: aws.String(b.cfg.Bucket), Key: aws.String(k), Body: r}); err != nil {
		return fmt.Errorf("put %s to %s: %w", key, b, err)
	}
	return nil
}

// singlePutMax bounds the bodies of known size that go up in one PUT, read from their own bytes:
// the chunk repository's packs (16 MiB and a little more), index objects, records.
const singlePutMax = 64 << 20

// upload stores in.Body. The transfer manager copies every body into buffers of its own (the first
// 16 MiB, then Concurrency+1 parts of PartSize allocated at once, 160 MiB by default): a body of
// known size goes up in one PUT instead, and a stream said to be small (WithSmallParts) in parts of
// the least size, one at a time.
func (b *S3) upload(ctx context.Context, in *transfermanager.UploadObjectInput) error {
	if rs, ok := in.Body.(io.ReadSeeker); ok {
		if size, err := remaining(rs); err == nil && size <= singlePutMax {
			var opts []func(*s3.Options)
			if sum, _ := ctx.Value(sha256Key{}).(string); sum != "" {
				// Over plain HTTP the signature covers the body by its SHA-256: the caller's
				// spares computing it again (the store still checks it).
				opts = append(opts, s3.WithAPIOptions(func(st *middleware.Stack) error {
					return st.Build.Add(middleware.BuildMiddlewareFunc("FerryPayloadSHA256", func(ctx context.Context, in middleware.BuildInput, next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
						return next.HandleBuild(v4.SetPayloadHash(ctx, sum), in)
					}), middleware.After)
				}))
			}
			_, err := b.client.PutObject(ctx, &s3.PutObjectInput{Bucket: in.Bucket, Key: in.Key, Body: rs,
				ContentLength: aws.Int64(size), IfNoneMatch: in.IfNoneMatch}, opts...)
			return err
		}
	}
	var opts []func(*transfermanager.Options)
	if small, _ := ctx.Value(smallPartsKey{}).(bool); small {
		// Written as a claim is walked, such a stream comes slower than one part goes up.
		opts = append(opts, func(o *transfermanager.Options) {
			o.PartSizeBytes, o.MultipartUploadThreshold, o.Concurrency = MinPartSize, MinPartSize, 1
		})
	}
	_, err := b.transfer.UploadObject(ctx, in, opts...)
	return err
}

// remaining is the number of bytes from a seeker's offset to its end; it leaves the offset as it was.
func remaining(rs io.Seeker) (int64, error) {
	at, err := rs.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, err
	}
	end, err := rs.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, err
	}
	if _, err := rs.Seek(at, io.SeekStart); err != nil {
		return 0, err
	}
	return end - at, nil
}

// Create uploads with If-None-Match: *, so the server decides atomically which writer wins.
func (b *S3) Create(ctx context.Context, key string, r io.Reader) error {
	k, err := b.objectKey(key)
	if err != nil {
		return err
	}
	err = b.upload(ctx, &transfermanager.UploadObjectInput{Bucket: aws.String(b.cfg.Bucket), Key: aws.String(k), Body: r, IfNoneMatch: aws.String("*")})
	switch status := httpStatus(err); {
	case err == nil:
		return nil
	case status == http.StatusPreconditionFailed, status == http.StatusConflict:
		// 409 means a concurrent conditional write of the same key is in progress; S3 lets
		// exactly one of them complete, so this one lost.
		return fmt.Errorf("create %s in %s: %w", key, b, ErrExists)
	default:
		return fmt.Errorf("create %s in %s: %w", key, b, err)
	}
}

// ReadVersion implements Swapper: the record and its ETag, from one GET.
func (b *S3) ReadVersion(ctx context.Context, key string) ([]byte, string, error) {
	k, err := b.objectKey(key)
	if err != nil {
		return nil, "", err
	}
	out, err := b.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b.cfg.Bucket), Key: aws.String(k)})
	if err != nil {
		if isNotFound(err) {
			return nil, "", &NotExistError{Location: b.String(), Key: key}
		}
		return nil, "", fmt.Errorf("get %s from %s: %w", key, b, err)
	}
	defer out.Body.Close()
	data, err := readSmall(out.Body)
	if err != nil {
		return nil, "", fmt.Errorf("get %s from %s: %w", key, b, err)
	}
	return data, aws.ToString(out.ETag), nil
}

// Swap implements Swapper with one PUT carrying If-Match (the version's ETag) or, from no
// version, If-None-Match: *; the server decides.
func (b *S3) Swap(ctx context.Context, key, version string, data []byte) (string, error) {
	k, err := b.objectKey(key)
	if err != nil {
		return "", err
	}
	in := &s3.PutObjectInput{Bucket: aws.String(b.cfg.Bucket), Key: aws.String(k), Body: bytes.NewReader(data)}
	if version == "" {
		in.IfNoneMatch = aws.String("*")
	} else {
		in.IfMatch = aws.String(version)
	}
	out, err := b.client.PutObject(ctx, in)
	if conditionFailed(err) {
		return "", fmt.Errorf("swap %s in %s: %w", key, b, ErrChanged)
	}
	if err != nil {
		return "", fmt.Errorf("swap %s in %s: %w", key, b, err)
	}
	return aws.ToString(out.ETag), nil
}

// conditionFailed tells a conditional write that lost: 412, or 409 while a concurrent conditional
// write of the key is in progress (exactly one of them completes), or, for If-Match, no object.
func conditionFailed(err error) bool {
	switch httpStatus(err) {
	case http.StatusPreconditionFailed, http.StatusConflict:
		return true
	}
	return err != nil && isNotFound(err)
}

// probePrefix is where NewS3 writes the object that shows whether the server honours conditions.
const probePrefix = "metadata/ferry/probe/"

// checkConditional writes a probe object conditionally, four times, and refuses a server that
// ignores If-None-Match or If-Match: ferry's commit markers, journal records and lease rely on
// the server deciding which of two writers wins. A server that does not let these credentials
// write at all is let through here; its writes fail on their own.
func (b *S3) checkConditional(ctx context.Context) error {
	var rnd [8]byte
	rand.Read(rnd[:])
	key := b.cfg.Prefix + probePrefix + hex.EncodeToString(rnd[:])
	put := func(mod func(*s3.PutObjectInput)) (string, error) {
		in := &s3.PutObjectInput{Bucket: aws.String(b.cfg.Bucket), Key: aws.String(key), Body: strings.NewReader("ferry checks conditional writes")}
		mod(in)
		out, err := b.client.PutObject(ctx, in)
		if err != nil {
			return "", err
		}
		return aws.ToString(out.ETag), nil
	}
	refuse := func(what string, err error) error {
		msg := fmt.Sprintf("%s: the server does not honour %s on writes (probe object %s): ferry needs S3 conditional writes (If-None-Match and If-Match) to commit backups once and to keep two runs off the same clusters; use a server that supports them", b, what, strings.TrimPrefix(key, b.cfg.Prefix))
		if err != nil {
			return badinput.Errorf("%s: %w", msg, err)
		}
		return badinput.Errorf("%s", msg)
	}
	etag, err := put(func(in *s3.PutObjectInput) { in.IfNoneMatch = aws.String("*") })
	switch status := httpStatus(err); {
	case err == nil:
	case status == http.StatusForbidden || status == http.StatusUnauthorized:
		return nil
	case status == http.StatusNotImplemented || status == http.StatusBadRequest:
		return refuse("If-None-Match", err)
	default:
		return fmt.Errorf("%s: write a probe object under %s: %w", b, probePrefix, err)
	}
	defer b.client.DeleteObject(context.WithoutCancel(ctx), &s3.DeleteObjectInput{Bucket: aws.String(b.cfg.Bucket), Key: aws.String(key)})
	if _, err := put(func(in *s3.PutObjectInput) { in.IfNoneMatch = aws.String("*") }); !conditionFailed(err) {
		return refuse("If-None-Match (a second create of one key succeeded)", err)
	}
	if _, err := put(func(in *s3.PutObjectInput) { in.IfMatch = aws.String(`"00000000000000000000000000000000"`) }); !conditionFailed(err) {
		return refuse("If-Match (a write against a wrong ETag succeeded)", err)
	}
	if _, err := put(func(in *s3.PutObjectInput) { in.IfMatch = aws.String(etag) }); err != nil {
		return refuse("If-Match (a write against the object's own ETag was refused)", err)
	}
	return nil
}

func (b *S3) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	k, err := b.objectKey(key)
	if err != nil {
		return nil, err
	}
	head, err := b.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(b.cfg.Bucket), Key: aws.String(k)})
	if err != nil {
		if isNotFound(err) {
			return nil, &NotExistError{Location: b.String(), Key: key}
		}
		return nil, fmt.Errorf("get %s from %s: %w", key, b, err)
	}
	return newRangeReader(ctx, b.client, b.cfg.Bucket, k, aws.ToString(head.ETag), aws.ToInt64(head.ContentLength), 2*b.cfg.Concurrency), nil
}

func (b *S3) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	k, err := b.objectKey(key)
	if err != nil {
		return ObjectInfo{}, err
	}
	out, err := b.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(b.cfg.Bucket), Key: aws.String(k)})
	if err != nil {
		if isNotFound(err) {
			return ObjectInfo{}, &NotExistError{Location: b.String(), Key: key}
		}
		return ObjectInfo{}, fmt.Errorf("stat %s in %s: %w", key, b, err)
	}
	return ObjectInfo{Key: key, Size: aws.ToInt64(out.ContentLength), ModTime: aws.ToTime(out.LastModified)}, nil
}

func (b *S3) Delete(ctx context.Context, key string) error {
	k, err := b.objectKey(key)
	if err != nil {
		return err
	}
	if _, err := b.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b.cfg.Bucket), Key: aws.String(k)}); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete %s from %s: %w", key, b, err)
	}
	return nil
}

// DefaultMaxCopySize is the largest object S3's CopyObject copies whole (S3's own limit).
const DefaultMaxCopySize = 5 << 30

// Copy implements Copier: the server copies the bytes, with CopyObject, or, for an object larger
// than MaxCopySize, in parts of PartSize (UploadPartCopy), each part only from the version of the
// source it found first.
func (b *S3) Copy(ctx context.Context, src, dst string, size int64) error {
	from, err := b.objectKey(src)
	if err != nil {
		return err
	}
	to, err := b.objectKey(dst)
	if err != nil {
		return err
	}
	fail := func(err error) error {
		if isNotFound(err) || httpStatus(err) == http.StatusNotFound {
			return &NotExistError{Location: b.String(), Key: src}
		}
		return fmt.Errorf("copy %s to %s in %s: %w", src, dst, b, err)
	}
	// The source is URL-encoded; a "+" would read as a space.
	source := aws.String(b.cfg.Bucket + "/" + strings.NewReplacer("%2F", "/", "+", "%2B").Replace(url.PathEscape(from)))
	if size <= cmp.Or(b.cfg.MaxCopySize, DefaultMaxCopySize) {
		if _, err := b.client.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String(b.cfg.Bucket), Key: aws.String(to), CopySource: source}); err != nil {
			return fail(err)
		}
		return nil
	}
	head, err := b.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(b.cfg.Bucket), Key: aws.String(from)})
	if err != nil {
		return fail(err)
	}
	size = aws.ToInt64(head.ContentLength)
	up, err := b.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(b.cfg.Bucket), Key: aws.String(to)})
	if err != nil {
		return fail(err)
	}
	var parts []types.CompletedPart
	for off, n := int64(0), int32(1); off < size; off, n = off+b.cfg.PartSize, n+1 {
		last := min(off+b.cfg.PartSize, size) - 1
		out, err := b.client.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: aws.String(b.cfg.Bucket), Key: aws.String(to), UploadId: up.UploadId,
			PartNumber: aws.Int32(n), CopySource: source, CopySourceIfMatch: head.ETag, CopySourceRange: aws.String(fmt.Sprintf("bytes=%d-%d", off, last))})
		if err != nil {
			b.client.AbortMultipartUpload(context.WithoutCancel(ctx), &s3.AbortMultipartUploadInput{Bucket: aws.String(b.cfg.Bucket), Key: aws.String(to), UploadId: up.UploadId})
			return fail(err)
		}
		parts = append(parts, types.CompletedPart{PartNumber: aws.Int32(n), ETag: out.CopyPartResult.ETag})
	}
	if _, err := b.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String(b.cfg.Bucket), Key: aws.String(to), UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}); err != nil {
		b.client.AbortMultipartUpload(context.WithoutCancel(ctx), &s3.AbortMultipartUploadInput{Bucket: aws.String(b.cfg.Bucket), Key: aws.String(to), UploadId: up.UploadId})
		return fail(err)
	}
	return nil
}

func (b *S3) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	if err := checkPrefix(prefix); err != nil {
		return fmt.Errorf("%s: %w", b, err)
	}
	pages := s3.NewListObjectsV2Paginator(b.client, &s3.ListObjectsV2Input{
		Bucket: aws.String(b.cfg.Bucket), Prefix: aws.String(b.cfg.Prefix + prefix),
	})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("list %q in %s: %w", prefix, b, err)
		}
		for _, obj := range page.Contents {
			info := ObjectInfo{
				Key:     strings.TrimPrefix(aws.ToString(obj.Key), b.cfg.Prefix),
				Size:    aws.ToInt64(obj.Size),
				ModTime: aws.ToTime(obj.LastModified),
			}
			if err := fn(info); err != nil {
				return err
			}
		}
	}
	return nil
}

// CleanPartial implements PartialCleaner: it aborts the unfinished multipart uploads under prefix
// (an upload cut off by a killed ferry stays, invisible and billed, until aborted).
func (b *S3) CleanPartial(ctx context.Context, prefix string) (int, error) {
	if err := checkPrefix(prefix); err != nil {
		return 0, fmt.Errorf("%s: %w", b, err)
	}
	// The whole bucket's uploads, filtered here: MinIO lists uploads by prefix only for an exact key.
	in := &s3.ListMultipartUploadsInput{Bucket: aws.String(b.cfg.Bucket)}
	want := b.cfg.Prefix + prefix
	aborted := 0
	for {
		page, err := b.client.ListMultipartUploads(ctx, in)
		if err != nil {
			return aborted, fmt.Errorf("list unfinished uploads under %s in %s: %w", prefix, b, err)
		}
		for _, u := range page.Uploads {
			if !strings.HasPrefix(aws.ToString(u.Key), want) {
				continue
			}
			_, err := b.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String(b.cfg.Bucket), Key: u.Key, UploadId: u.UploadId})
			if err != nil && !isNotFound(err) {
				return aborted, fmt.Errorf("abort the unfinished upload of %s in %s: %w", aws.ToString(u.Key), b, err)
			}
			aborted++
		}
		if !aws.ToBool(page.IsTruncated) {
			return aborted, nil
		}
		in.KeyMarker, in.UploadIdMarker = page.NextKeyMarker, page.NextUploadIdMarker
	}
}

type smallPartsKey struct{}

type sha256Key struct{}

// WithSHA256 returns ctx, telling a backend that the body of known size Put with it has the
// SHA-256 sum (hex). S3 over plain HTTP signs a body by its SHA-256: it takes this one instead of
// computing it (the SDK still reads the body for its CRC32), and the store checks it, so a wrong
// sum fails the Put. Over HTTPS the SDK signs with a trailing checksum and does not use it.
func WithSHA256(ctx context.Context, sum string) context.Context {
	return context.WithValue(ctx, sha256Key{}, sum)
}

// WithSmallParts returns ctx, telling a backend that uploads a stream in parts (S3) that the
// streams Put with it are small (a claim's file list or tree: tens of MB for a million files), so
// that their parts are of the least size S3 takes, one at a time. A multipart upload holds
// Concurrency+1 parts in memory from its start.
func WithSmallParts(ctx context.Context) context.Context {
	return context.WithValue(ctx, smallPartsKey{}, true)
}
