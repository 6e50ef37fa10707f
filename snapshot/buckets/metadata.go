package buckets

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrykube/ferry/snapshot"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/encrypt"
)

// metadataFile is where a backup keeps a bucket's objects' metadata: apart from the objects'
// files, whose names any key may take.
func metadataFile(bucket string) string { return "bucket-metadata/" + bucket + ".json" }

// objectMetadata is an object's metadata as a backup keeps it in its bucket's metadata file.
// TagsUnread says the store did not let the backup read the object's tags (no permission): its
// Tags are then not the object's, a restore leaves the target's tags of the object as they are,
// and verify does not compare them, as with a bucket's unread settings.
type objectMetadata struct {
	snapshot.ObjectMetadata
	TagsUnread bool `json:"tagsUnread,omitempty"`
}

// forComparing is got with what backup b could not read taken as the backup's (the object's
// tags, the bucket's objects' locks), so that metadataDifferences does not name them.
func (m objectMetadata) forComparing(b snapshot.Bucket, got snapshot.ObjectMetadata) snapshot.ObjectMetadata {
	if m.TagsUnread {
		got.Tags = m.Tags
	}
	if !b.Locks {
		got.Retention, got.LegalHold = m.Retention, m.LegalHold
	}
	return got
}

// defaultContentType is what a store gives an object put without one; kept as "".
const defaultContentType = "application/octet-stream"

// metadataOf is what an object carries beside its bytes, as its store returned it. The SHA-256 a
// ferry restore stores is ferry's, not the object's.
func metadataOf(info minio.ObjectInfo) snapshot.ObjectMetadata {
	m := snapshot.ObjectMetadata{
		ContentType:        info.ContentType,
		ContentEncoding:    info.Metadata.Get("Content-Encoding"),
		ContentDisposition: info.Metadata.Get("Content-Disposition"),
		ContentLanguage:    info.Metadata.Get("Content-Language"),
		CacheControl:       info.Metadata.Get("Cache-Control"),
	}
	if m.ContentType == defaultContentType {
		m.ContentType = ""
	}
	if mode := info.Metadata.Get("X-Amz-Object-Lock-Mode"); mode != "" {
		date := info.Metadata.Get("X-Amz-Object-Lock-Retain-Until-Date")
		until, err := time.Parse(time.RFC3339Nano, date)
		if err != nil { // a store that writes it as an HTTP date
			until, err = http.ParseTime(date)
		}
		if err == nil {
			m.Retention = &snapshot.ObjectRetention{Mode: strings.ToUpper(mode), Until: until.UTC()}
		}
	}
	m.LegalHold = strings.EqualFold(info.Metadata.Get("X-Amz-Object-Lock-Legal-Hold"), string(minio.LegalHoldEnabled))
	if alg := info.Metadata.Get("X-Amz-Server-Side-Encryption"); alg != "" {
		m.Encryption = &snapshot.ServerSideEncryption{Algorithm: alg}
		if alg != sseS3 {
			m.Encryption.KMSKeyID = info.Metadata.Get("X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id")
		}
	}
	for k, v := range info.UserMetadata {
		if strings.EqualFold(k, SHA256Metadata) {
			continue
		}
		if m.User == nil {
			m.User = map[string]string{}
		}
		m.User[strings.ToLower(k)] = v
	}
	return m
}

// putOptions restores an object's metadata, with ferry's SHA-256 of its bytes beside it, and its
// lock: its retention while it holds (now on), its legal hold.
func putOptions(m snapshot.ObjectMetadata, sha string, now time.Time) (minio.PutObjectOptions, error) {
	user := map[string]string{SHA256Metadata: sha}
	for k, v := range m.User {
		user[k] = v
	}
	opts := minio.PutObjectOptions{UserMetadata: user, UserTags: m.Tags, ContentType: m.ContentType, ContentEncoding: m.ContentEncoding,
		ContentDisposition: m.ContentDisposition, ContentLanguage: m.ContentLanguage, CacheControl: m.CacheControl}
	if r := m.Retention; r != nil && r.Until.After(now) {
		// Sent to the second: rounded up, so that the target never lets it go sooner.
		until := r.Until.Truncate(time.Second)
		if until.Before(r.Until) {
			until = until.Add(time.Second)
		}
		opts.Mode, opts.RetainUntilDate = minio.RetentionMode(r.Mode), until
	}
	if m.LegalHold {
		opts.LegalHold = minio.LegalHoldEnabled
	}
	// S3 takes a lock only with the content's checksum.
	opts.SendContentMd5 = opts.Mode != "" || opts.LegalHold != ""
	var err error
	opts.ServerSideEncryption, err = serverSide(m.Encryption)
	return opts, err
}

// lockDifferences names how the target's object's lock differs from the backup's: a retention
// the backup's object had, and still holds at now, that the target's lacks or has otherwise (to
// the second; a target's retention where the backup's had none, or has expired, is its bucket's
// default, given to every object put there), and the legal hold.
func lockDifferences(want, got snapshot.ObjectMetadata, now time.Time) []string {
	var out []string
	if w := want.Retention; w != nil && w.Until.After(now) {
		g := got.Retention
		if g == nil || g.Mode != w.Mode || g.Until.Sub(w.Until).Abs() >= time.Second {
			out = append(out, fmt.Sprintf("retention: backup %s, target %s", retentionText(w), retentionText(g)))
		}
	}
	if want.LegalHold != got.LegalHold {
		out = append(out, fmt.Sprintf("legal hold: backup %s, target %s", onOff(want.LegalHold), onOff(got.LegalHold)))
	}
	return out
}

func retentionText(r *snapshot.ObjectRetention) string {
	if r == nil {
		return "none"
	}
	return r.Mode + " until " + r.Until.Format(time.RFC3339)
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// metadataDifferences names how the target's object key's metadata differs from the backup's:
// the standard headers with both values, user metadata by key only (its values may be secret).
// An object the backup holds with the store's default content type has none of its own: a
// store of another make may serve it with the type its key's extension suggests (SeaweedFS serves
// "x.txt" as text/plain), which is no difference.
func metadataDifferences(key string, want, got snapshot.ObjectMetadata) []string {
	var out []string
	if want.ContentType == "" && got.ContentType != "" && got.ContentType == mime.TypeByExtension(path.Ext(key)) {
		got.ContentType = ""
	}
	for _, f := range []struct{ name, want, got string }{
		{"content type", want.ContentType, got.ContentType}, {"content encoding", want.ContentEncoding, got.ContentEncoding},
		{"content disposition", want.ContentDisposition, got.ContentDisposition}, {"content language", want.ContentLanguage, got.ContentLanguage},
		{"cache control", want.CacheControl, got.CacheControl},
	} {
		if f.want != f.got {
			out = append(out, fmt.Sprintf("%s: backup %q, target %q", f.name, f.want, f.got))
		}
	}
	if keys := differentKeys(want.User, got.User); len(keys) > 0 {
		out = append(out, "user metadata differs: "+strings.Join(keys, ", "))
	}
	if keys := differentKeys(want.Tags, got.Tags); len(keys) > 0 {
		out = append(out, "tags differ: "+strings.Join(keys, ", "))
	}
	if !keepsEncrypted(want.Encryption, got.Encryption) {
		out = append(out, fmt.Sprintf("encryption: backup %s, target %s", encryptionText(want.Encryption), encryptionText(got.Encryption)))
	}
	return append(out, lockDifferences(want, got, time.Now())...)
}

// sseS3 is SSE-S3's algorithm: the store's own keys. Any other (aws:kms, aws:kms:dsse) names a
// key of a KMS.
const sseS3 = "AES256"

// serverSide is how an object is asked to be kept encrypted as e says; nil for none.
func serverSide(e *snapshot.ServerSideEncryption) (encrypt.ServerSide, error) {
	switch {
	case e == nil:
		return nil, nil
	case e.Algorithm == sseS3:
		return encrypt.NewSSE(), nil
	case strings.HasPrefix(e.Algorithm, "aws:kms"):
		return kmsEncryption(*e), nil
	}
	return nil, fmt.Errorf("the backup says its store kept it encrypted by %q, which S3 does not have: it is not put in clear", e.Algorithm)
}

// kmsEncryption asks for SSE-KMS of its algorithm (aws:kms, or aws:kms:dsse, two layers) under
// its key (the store's default key when none), which encrypt.NewSSEKMS sends only as aws:kms.
type kmsEncryption snapshot.ServerSideEncryption

func (k kmsEncryption) Type() encrypt.Type { return encrypt.KMS }

func (k kmsEncryption) Marshal(h http.Header) {
	h.Set("X-Amz-Server-Side-Encryption", k.Algorithm)
	if k.KMSKeyID != "" {
		h.Set("X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id", k.KMSKeyID)
	}
}

// storeEncrypts learns, from the first object of each algorithm put with server-side encryption
// into a bucket, whether the target's store keeps objects as asked: one that takes the request
// and ignores it (an S3 proxy, a store without the feature) would keep in clear what the source
// kept encrypted. After one such object, the bucket's other encrypted objects are not put.
type storeEncrypts struct {
	trusted sync.Map // algorithm -> true once an object was seen kept so
	ignored atomic.Pointer[string]
}

// before refuses an encrypted object once the store was seen to ignore encryption.
func (s *storeEncrypts) before(meta snapshot.ObjectMetadata) error {
	if ignored := s.ignored.Load(); ignored != nil && meta.Encryption != nil {
		return fmt.Errorf("not put: the target's store kept %s otherwise than asked to encrypt it, and would keep this object, encrypted on the source, so too", *ignored)
	}
	return nil
}

// after checks, until the store has kept one object of its algorithm encrypted, that it keeps
// the object put at key as meta says.
func (s *storeEncrypts) after(ctx context.Context, mc *minio.Client, bucket, key string, meta snapshot.ObjectMetadata) error {
	if meta.Encryption == nil {
		return nil
	}
	if _, ok := s.trusted.Load(meta.Encryption.Algorithm); ok {
		return nil
	}
	info, err := mc.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return fmt.Errorf("put, but how the target's store keeps it cannot be read: %w", err)
	}
	if got := metadataOf(info).Encryption; !keepsEncrypted(meta.Encryption, got) {
		s.ignored.CompareAndSwap(nil, &key)
		return fmt.Errorf("put, and the target's store keeps it encrypted by %s, not %s as the source's did, though asked to: it holds it so now; the bucket's other encrypted objects are not put", encryptionText(got), encryptionText(meta.Encryption))
	}
	s.trusted.Store(meta.Encryption.Algorithm, true)
	return nil
}

// keepsEncrypted says whether got keeps what want keeps encrypted at rest as want does: the same
// algorithm and KMS key (by its ID or its ARN, as MinIO names it "arn:aws:kms:ID"). A target that
// encrypts what the backup's store kept in clear loses nothing: AWS encrypts every new object.
func keepsEncrypted(want, got *snapshot.ServerSideEncryption) bool {
	switch {
	case want == nil:
		return true
	case got == nil || got.Algorithm != want.Algorithm:
		return false
	}
	return want.KMSKeyID == "" || strings.TrimPrefix(want.KMSKeyID, "arn:aws:kms:") == strings.TrimPrefix(got.KMSKeyID, "arn:aws:kms:")
}

// encryptionText names an encryption: its algorithm and KMS key, "none" for nil. A key's ID is
// its name in the KMS, not a secret.
func encryptionText(e *snapshot.ServerSideEncryption) string {
	switch {
	case e == nil:
		return "none"
	case e.KMSKeyID != "":
		return e.Algorithm + " with key " + e.KMSKeyID
	}
	return e.Algorithm
}

// differentKeys are the keys, sorted, whose values differ between two maps or that only one has.
func differentKeys(want, got map[string]string) []string {
	var keys []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if v, ok := got[k]; !ok || v != want[k] {
			keys = append(keys, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	return keys
}

// objectTags reads an object's tags when its store says it has some: count is the X-Amz-Tagging-
// Count of its GET or HEAD, -1 when not known.
func objectTags(ctx context.Context, mc *minio.Client, bucket, key string, count int) (map[string]string, error) {
	if count == 0 {
		return nil, nil
	}
	t, err := mc.GetObjectTagging(ctx, bucket, key, minio.GetObjectTaggingOptions{})
	if code(err) == "NoSuchKey" {
		return nil, nil // deleted since it was read: a backup holds it as it was read
	}
	if err != nil {
		return nil, fmt.Errorf("read the tags of %s: %w", key, err)
	}
	if m := t.ToMap(); len(m) > 0 {
		return m, nil
	}
	return nil, nil
}

// busy says whether a store's error is one of a store that is busy or failing for a while
// (SlowDown, InternalError, a 5xx but 501, or 429), which asking again may get past: not a refusal.
func busy(err error) bool {
	var resp minio.ErrorResponse
	if !errors.As(err, &resp) {
		return false
	}
	switch resp.Code {
	case "SlowDown", "SlowDownRead", "SlowDownWrite", "InternalError", "ServiceUnavailable", "RequestTimeout", "RequestTimeTooSkewed", "XMinioServerNotInitialized":
		return true
	}
	// 501 is a store without the feature: a refusal.
	return resp.StatusCode >= 500 && resp.StatusCode != 501 || resp.StatusCode == 429
}

// busyAttempts and busyPause are how often, and after how long a first pause (doubled each time),
// a read a store answered as busy is made again: on top of the S3 client's own retries.
var (
	busyAttempts = 5
	busyPause    = time.Second
)

// retryBusy runs f again while it fails with a busy store's error (busy), at most busyAttempts
// times in all; it returns f's last error.
func retryBusy(ctx context.Context, f func() error, retrying func(attempt int, err error)) error {
	pause := busyPause
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil || !busy(err) || ctx.Err() != nil || attempt >= busyAttempts {
			return err
		}
		if retrying != nil {
			retrying(attempt, err)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause *= 2
	}
}

// targetMetadata is a target's object's metadata: what its HEAD says, and its tags when the
// backup kept the objects' tags (tagsKept) and could read this object's (want).
func targetMetadata(ctx context.Context, mc *minio.Client, b snapshot.Bucket, key string, info minio.ObjectInfo, want objectMetadata) (snapshot.ObjectMetadata, error) {
	m := metadataOf(info)
	if !tagsKept(b) || want.TagsUnread {
		return m, nil
	}
	var err error
	m.Tags, err = objectTags(ctx, mc, b.Name, key, info.UserTagCount)
	return m, err
}

// tagsKept says whether a backup kept its bucket's objects' tags: those of format 6 and later,
// which keep the bucket's settings too. A restore of an older one leaves the target's tags.
func tagsKept(b snapshot.Bucket) bool { return b.Settings != "" }

// isZero says whether the object has no metadata but the store's defaults.
func isZero(m snapshot.ObjectMetadata) bool {
	return m.ContentType == "" && m.ContentEncoding == "" && m.ContentDisposition == "" && m.ContentLanguage == "" && m.CacheControl == "" && len(m.User) == 0 && len(m.Tags) == 0 &&
		m.Retention == nil && !m.LegalHold && m.Encryption == nil
}

// storeMetadata writes a bucket's objects' metadata into the backup, when any has some.
func storeMetadata(ctx context.Context, w *snapshot.Writer, entry *snapshot.Bucket, meta map[string]objectMetadata) error {
	if len(meta) == 0 {
		return nil
	}
	file, err := putBucketFile(ctx, w, metadataFile(entry.Name), "the objects' metadata", meta)
	entry.Metadata = file
	return err
}

// putBucketFile writes v as one of a bucket's JSON files into the backup (encrypted when the
// backup is) and returns the file the manifest names; what names it in errors.
func putBucketFile(ctx context.Context, w *snapshot.Writer, name, what string, v any) (string, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	file, err := w.Put(ctx, name, bytes.NewReader(data))
	if err != nil {
		return "", fmt.Errorf("store %s: %w", what, err)
	}
	return file, nil
}

// readMetadata reads a bucket's objects' metadata from the backup; nil for a backup that kept
// none.
func readMetadata(ctx context.Context, r *snapshot.Reader, b snapshot.Bucket) (map[string]objectMetadata, error) {
	if b.Metadata == "" {
		return nil, nil
	}
	meta := map[string]objectMetadata{}
	if err := readBucketFile(ctx, r, b.Metadata, metadataFile(b.Name), "the objects' metadata", &meta); err != nil {
		return nil, err
	}
	return meta, nil
}

// readBucketFile reads one of a bucket's JSON files of the backup into v, checked as every
// stream is: recorded is the file the manifest names, which must be name (or its encrypted
// form); what names it in errors.
func readBucketFile(ctx context.Context, r *snapshot.Reader, recorded, name, what string, v any) error {
	if recorded != name && recorded != name+snapshot.EncryptedSuffix {
		return fmt.Errorf("the manifest keeps %s in %.80q, not in %s: %w", what, recorded, name, snapshot.ErrCorrupt)
	}
	rc, err := r.Open(ctx, recorded)
	if err != nil {
		return err
	}
	data, err := io.ReadAll(rc)
	if cerr := rc.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %v: %w", what, err, snapshot.ErrCorrupt)
	}
	return nil
}
