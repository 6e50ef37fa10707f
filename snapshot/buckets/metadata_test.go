package buckets

import (
	"mime"
	"reflect"
	"testing"

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
