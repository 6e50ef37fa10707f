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
	if d := metadataDifferences("a.json", want.ObjectMetadata, want.forComparing(got)); d != nil {
		t.Errorf("unread tags compared: %q", d)
	}
	read := objectMetadata{ObjectMetadata: want.ObjectMetadata}
	if d := metadataDifferences("a.json", read.ObjectMetadata, read.forComparing(got)); len(d) != 1 {
		t.Errorf("read tags not compared: %q", d)
	}
	data, err := json.Marshal(map[string]objectMetadata{"a.json": want})
	if err != nil || !strings.Contains(string(data), `"tagsUnread":true`) || !strings.Contains(string(data), `"contentType":"application/json"`) {
		t.Errorf("stored as %s, %v", data, err)
	}
}
