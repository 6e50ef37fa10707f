package buckets

import (
	"strings"
	"testing"

	"github.com/ferrykube/ferry/snapshot"
)

func TestEscapeKey(t *testing.T) {
	for in, want := range map[string]string{
		"v2/artifacts/run-1/model.tgz": "v2/artifacts/run-1/model.tgz",
		"a//b":                         "a/%00/b",
		"/lead":                        "%00/lead",
		"trail/":                       "trail/%00",
		"../up/./x":                    "%2E%2E/up/%2E/x",
		"with space?and#hash":          "with%20space%3Fand%23hash",
		"dir/.ferry-tmp-1":             "dir/%2Eferry-tmp-1",
	} {
		if got := EscapeKey(in); got != want {
			t.Errorf("EscapeKey(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestStoredNameKeepsWithinLimits: a key of up to S3's 1,024 bytes, which escaping can triple,
// is stored under a name no segment of which exceeds a file name's 255 bytes and whose whole fits
// an S3 key with room for the backup's folders; short keys keep their readable escaped name, and
// two long keys never share a name.
func TestStoredNameKeepsWithinLimits(t *testing.T) {
	for _, tc := range []struct {
		name   string
		key    string
		hashed bool
	}{
		{"short", "v2/artifacts/run-1/model.tgz", false},
		{"segment at the limit", strings.Repeat("a", snapshot.MaxStoredSegment), false},
		{"segment escaped past the limit", strings.Repeat("é", snapshot.MaxStoredSegment/6+1), true},
		{"one segment of 1,024 bytes", strings.Repeat("k", 1024), true},
		{"1,024 bytes in short segments", strings.Repeat("abcdefg/", 128), true},
		{"1,020 bytes of spaces", strings.Repeat("a b/", 255), true},
		{"a 255-byte name in folders", "deep/" + strings.Repeat("n", 250), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, hashed := StoredName(tc.key)
			if hashed != tc.hashed {
				t.Fatalf("StoredName(%d bytes) hashed %v, want %v (%d bytes: %.60q...)", len(tc.key), hashed, tc.hashed, len(got), got)
			}
			if !hashed && got != EscapeKey(tc.key) {
				t.Errorf("a short key is stored as %q, want its escaped key %q", got, EscapeKey(tc.key))
			}
			if len(got) > snapshot.MaxStoredName {
				t.Errorf("stored name of %d bytes, want at most %d", len(got), snapshot.MaxStoredName)
			}
			for _, seg := range strings.Split(got, "/") {
				if len(seg) > snapshot.MaxStoredSegment || seg == "" || seg == "." || seg == ".." {
					t.Errorf("stored name has the segment %.40q of %d bytes", seg, len(seg))
				}
			}
		})
	}
	a, _ := StoredName(strings.Repeat("x", 1000) + "a")
	b, _ := StoredName(strings.Repeat("x", 1000) + "b")
	if a == b {
		t.Errorf("two long keys share the stored name %s", a)
	}
	// No escaped key is ever a hashed name: "%" followed by "h" is not an escape.
	if esc := EscapeKey("%hashed/x"); strings.HasPrefix(esc, hashedPrefix) {
		t.Errorf("EscapeKey(%%hashed/x) = %q, which a hashed name could collide with", esc)
	}
}
