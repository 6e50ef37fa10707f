package buckets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/snapshot"
	"github.com/minio/minio-go/v7"
)

func TestMetadataDifferences(t *testing.T) {
	for _, tc := range []struct {
		name, key string
		want, got snapshot.ObjectMetadata
		diffs     []string
	}{
		{"same", "a.json", snapshot.ObjectMetadata{ContentType: "application/json"}, snapshot.ObjectMetadata{ContentType: "application/json"}, nil},
		{"content type changed", "a.json", snapshot.ObjectMetadata{ContentType: "application/json"}, snapshot.ObjectMetadata{ContentType: "text/plain"},
			[]string{`content type: backup "application/json", target "text/plain"`}},
		{"content type lost", "a.json", snapshot.ObjectMetadata{ContentType: "application/json"}, snapshot.ObjectMetadata{},
			[]string{`content type: backup "application/json", target ""`}},
		// An object stored with the store's default type has none of its own: a store of another
		// make may serve the type its key's extension suggests (SeaweedFS does).
		{"the store's guess from the key", "a.html", snapshot.ObjectMetadata{}, snapshot.ObjectMetadata{ContentType: mime.TypeByExtension(".html")}, nil},
		{"a type the key does not suggest", "a.bin", snapshot.ObjectMetadata{}, snapshot.ObjectMetadata{ContentType: "text/html"},
			[]string{`content type: backup "", target "text/html"`}},
		{"user metadata by key", "a", snapshot.ObjectMetadata{User: map[string]string{"run": "1"}}, snapshot.ObjectMetadata{User: map[string]string{"run": "2"}},
			[]string{"user metadata differs: run"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := metadataDifferences(tc.key, tc.want, tc.got); !reflect.DeepEqual(got, tc.diffs) {
				t.Errorf("metadataDifferences = %q, want %q", got, tc.diffs)
			}
		})
	}
	for _, ct := range []string{"application/octet-stream", ""} {
		if m := metadataOf(minio.ObjectInfo{ContentType: ct}); m.ContentType != "" {
			t.Errorf("an object of content type %q is recorded with %q, want none of its own", ct, m.ContentType)
		}
	}
}

func TestObjectLocks(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	retained := func(mode string, until time.Time) *snapshot.ObjectRetention {
		return &snapshot.ObjectRetention{Mode: mode, Until: until}
	}
	later, sooner := now.Add(72*time.Hour), now.Add(24*time.Hour)
	for _, tc := range []struct {
		name      string
		want, got snapshot.ObjectMetadata
		diffs     []string
	}{
		{"the same retention", snapshot.ObjectMetadata{Retention: retained("GOVERNANCE", later)}, snapshot.ObjectMetadata{Retention: retained("GOVERNANCE", later.Add(400*time.Millisecond))}, nil},
		{"a retention lost", snapshot.ObjectMetadata{Retention: retained("COMPLIANCE", later)}, snapshot.ObjectMetadata{},
			[]string{"retention: backup COMPLIANCE until 2026-12-10T12:00:00Z, target none"}},
		{"the bucket's default in its place", snapshot.ObjectMetadata{Retention: retained("GOVERNANCE", later)}, snapshot.ObjectMetadata{Retention: retained("GOVERNANCE", sooner)},
			[]string{"retention: backup GOVERNANCE until 2026-12-10T12:00:00Z, target GOVERNANCE until 2026-12-08T12:00:00Z"}},
		{"another mode", snapshot.ObjectMetadata{Retention: retained("GOVERNANCE", later)}, snapshot.ObjectMetadata{Retention: retained("COMPLIANCE", later)},
			[]string{"retention: backup GOVERNANCE until 2026-12-10T12:00:00Z, target COMPLIANCE until 2026-12-10T12:00:00Z"}},
		// A retention that has run out holds nothing; the target's bucket gives what it puts its own.
		{"an expired retention", snapshot.ObjectMetadata{Retention: retained("GOVERNANCE", now.Add(-time.Hour))}, snapshot.ObjectMetadata{Retention: retained("GOVERNANCE", sooner)}, nil},
		{"none, and the target's default", snapshot.ObjectMetadata{}, snapshot.ObjectMetadata{Retention: retained("GOVERNANCE", sooner)}, nil},
		{"a legal hold lost", snapshot.ObjectMetadata{LegalHold: true}, snapshot.ObjectMetadata{}, []string{"legal hold: backup on, target off"}},
		{"a legal hold added", snapshot.ObjectMetadata{}, snapshot.ObjectMetadata{LegalHold: true}, []string{"legal hold: backup off, target on"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := lockDifferences(tc.want, tc.got, now); !reflect.DeepEqual(got, tc.diffs) {
				t.Errorf("lockDifferences = %q, want %q", got, tc.diffs)
			}
		})
	}

	info := minio.ObjectInfo{Metadata: map[string][]string{"X-Amz-Object-Lock-Mode": {"GOVERNANCE"},
		"X-Amz-Object-Lock-Retain-Until-Date": {"2026-12-10T12:00:00.250Z"}, "X-Amz-Object-Lock-Legal-Hold": {"ON"}}}
	m := metadataOf(info)
	if want := retained("GOVERNANCE", later.Add(250*time.Millisecond)); !reflect.DeepEqual(m.Retention, want) || !m.LegalHold || isZero(m) {
		t.Fatalf("metadataOf the lock headers = %+v, %v; want %+v and a legal hold", m.Retention, m.LegalHold, want)
	}
	// Sent to the second, rounded up: the target never lets the object go sooner.
	if opts, _ := putOptions(m, "sum", now); opts.Mode != minio.Governance || !opts.RetainUntilDate.Equal(later.Add(time.Second)) || opts.LegalHold != minio.LegalHoldEnabled {
		t.Errorf("putOptions: mode %q until %s, legal hold %q", opts.Mode, opts.RetainUntilDate, opts.LegalHold)
	}
	if opts, _ := putOptions(m, "sum", later.Add(time.Hour)); opts.Mode != "" || !opts.RetainUntilDate.IsZero() {
		t.Errorf("putOptions of an expired retention: mode %q until %s, want none", opts.Mode, opts.RetainUntilDate)
	}
}

func TestBusyStoresAreAskedAgainNotTakenForRefusals(t *testing.T) {
	defer func(pause time.Duration) { busyPause = pause }(busyPause)
	busyPause = time.Millisecond
	wrapped := func(code string, status int) error {
		return fmt.Errorf("read the tags of k: %w", minio.ErrorResponse{Code: code, StatusCode: status})
	}
	for _, tc := range []struct {
		err  error
		busy bool
	}{
		{wrapped("SlowDown", 503), true},
		{wrapped("InternalError", 500), true},
		{wrapped("SomethingNew", 502), true},
		{wrapped("", 429), true},
		{wrapped("AccessDenied", 403), false},
		{wrapped("NotImplemented", 501), false},
		{errors.New("connection reset"), false},
	} {
		if got := busy(tc.err); got != tc.busy {
			t.Errorf("busy(%v) = %v, want %v", tc.err, got, tc.busy)
		}
	}
	calls := 0
	err := retryBusy(context.Background(), func() error {
		if calls++; calls < 3 {
			return wrapped("SlowDown", 503)
		}
		return nil
	}, nil)
	if err != nil || calls != 3 {
		t.Errorf("retryBusy: %d calls, %v; want 3 and success", calls, err)
	}
	calls = 0
	err = retryBusy(context.Background(), func() error { calls++; return wrapped("AccessDenied", 403) }, nil)
	if code(err) != "AccessDenied" || calls != 1 {
		t.Errorf("retryBusy on a refusal: %d calls, %v; want 1", calls, err)
	}
	calls = 0
	err = retryBusy(context.Background(), func() error { calls++; return wrapped("SlowDown", 503) }, nil)
	if code(err) != "SlowDown" || calls != busyAttempts {
		t.Errorf("retryBusy on a store busy throughout: %d calls, %v; want %d and its error", calls, err, busyAttempts)
	}
}

func TestUnreadTagsAreNotCompared(t *testing.T) {
	want := objectMetadata{ObjectMetadata: snapshot.ObjectMetadata{ContentType: "application/json"}, TagsUnread: true}
	got := snapshot.ObjectMetadata{ContentType: "application/json", Tags: map[string]string{"owner": "target"}}
	if d := metadataDifferences("a.json", want.ObjectMetadata, want.forComparing(snapshot.Bucket{}, got)); d != nil {
		t.Errorf("unread tags compared: %q", d)
	}
	read := objectMetadata{ObjectMetadata: want.ObjectMetadata}
	if d := metadataDifferences("a.json", read.ObjectMetadata, read.forComparing(snapshot.Bucket{}, got)); len(d) != 1 {
		t.Errorf("read tags not compared: %q", d)
	}
	// A backup that did not read the objects' locks (made before them) leaves the target's.
	held := snapshot.ObjectMetadata{ContentType: "application/json", LegalHold: true}
	if d := metadataDifferences("a.json", read.ObjectMetadata, read.forComparing(snapshot.Bucket{}, held)); d != nil {
		t.Errorf("locks compared for a backup that did not read them: %q", d)
	}
	if d := metadataDifferences("a.json", read.ObjectMetadata, read.forComparing(snapshot.Bucket{Locks: true}, held)); len(d) != 1 {
		t.Errorf("read locks not compared: %q", d)
	}
	data, err := json.Marshal(map[string]objectMetadata{"a.json": want})
	if err != nil || !strings.Contains(string(data), `"tagsUnread":true`) || !strings.Contains(string(data), `"contentType":"application/json"`) {
		t.Errorf("stored as %s, %v", data, err)
	}
}

// TestObjectEncryption: an object the store keeps encrypted is put encrypted the same way, and a
// target that keeps it in clear, or under another key, differs; one that encrypts what the
// backup's store did not loses nothing.
func TestObjectEncryption(t *testing.T) {
	s3 := &snapshot.ServerSideEncryption{Algorithm: "AES256"}
	kms := func(key string) *snapshot.ServerSideEncryption {
		return &snapshot.ServerSideEncryption{Algorithm: "aws:kms", KMSKeyID: key}
	}
	for _, tc := range []struct {
		name      string
		want, got *snapshot.ServerSideEncryption
		diffs     []string
	}{
		{"none", nil, nil, nil},
		{"SSE-S3 kept", s3, s3, nil},
		{"SSE-S3 lost", s3, nil, []string{"encryption: backup AES256, target none"}},
		{"SSE-KMS by ARN and by ID", kms("arn:aws:kms:platform"), kms("platform"), nil},
		{"SSE-KMS under another key", kms("platform"), kms("other"), []string{"encryption: backup aws:kms with key platform, target aws:kms with key other"}},
		{"SSE-KMS for SSE-S3", kms("platform"), s3, []string{"encryption: backup aws:kms with key platform, target AES256"}},
		{"encrypted where the backup's was not", nil, s3, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := metadataDifferences("a", snapshot.ObjectMetadata{Encryption: tc.want}, snapshot.ObjectMetadata{Encryption: tc.got})
			if !reflect.DeepEqual(got, tc.diffs) {
				t.Errorf("metadataDifferences = %q, want %q", got, tc.diffs)
			}
			if d := settingsDifferences(snapshot.BucketSettings{Encryption: tc.want}, snapshot.BucketSettings{Encryption: tc.got}); len(d) != len(tc.diffs) {
				t.Errorf("settingsDifferences = %q, want %d", d, len(tc.diffs))
			}
		})
	}

	for _, tc := range []struct {
		name    string
		headers map[string][]string
		want    *snapshot.ServerSideEncryption
		sse     string // the header putOptions sends
	}{
		{"in clear", nil, nil, ""},
		{"SSE-S3", map[string][]string{"X-Amz-Server-Side-Encryption": {"AES256"}}, s3, "AES256"},
		{"SSE-KMS", map[string][]string{"X-Amz-Server-Side-Encryption": {"aws:kms"}, "X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id": {"arn:aws:kms:platform"}},
			kms("arn:aws:kms:platform"), "aws:kms"},
		// Two layers (AWS's DSSE-KMS) stay two layers.
		{"DSSE-KMS", map[string][]string{"X-Amz-Server-Side-Encryption": {"aws:kms:dsse"}, "X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id": {"platform"}},
			&snapshot.ServerSideEncryption{Algorithm: "aws:kms:dsse", KMSKeyID: "platform"}, "aws:kms:dsse"},
	} {
		t.Run("read and put "+tc.name, func(t *testing.T) {
			m := metadataOf(minio.ObjectInfo{Metadata: tc.headers})
			if !reflect.DeepEqual(m.Encryption, tc.want) || isZero(m) != (tc.want == nil) {
				t.Fatalf("metadataOf = %+v, want %+v", m.Encryption, tc.want)
			}
			opts, err := putOptions(m, "sum", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			sent := ""
			if opts.ServerSideEncryption != nil {
				h := map[string][]string{}
				opts.ServerSideEncryption.Marshal(h)
				sent = h["X-Amz-Server-Side-Encryption"][0]
				if tc.want.KMSKeyID != "" && h["X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id"][0] != tc.want.KMSKeyID {
					t.Errorf("putOptions sends the key %q, want %q", h["X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id"], tc.want.KMSKeyID)
				}
			}
			if sent != tc.sse {
				t.Errorf("putOptions asks for encryption %q, want %q", sent, tc.sse)
			}
		})
	}
}

// TestUnknownEncryptionIsNotPutInClear: an object the backup says its store kept encrypted by an
// algorithm S3 does not have is not put at all.
func TestUnknownEncryptionIsNotPutInClear(t *testing.T) {
	_, err := putOptions(snapshot.ObjectMetadata{Encryption: &snapshot.ServerSideEncryption{Algorithm: "rot13"}}, "sum", time.Now())
	if err == nil || !strings.Contains(err.Error(), "not put in clear") {
		t.Errorf("putOptions of an unknown encryption: %v; want it refused", err)
	}
}
