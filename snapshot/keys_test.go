package snapshot

import (
	"strings"
	"testing"
)

// TestClaimStreamFitsAFileName: a claim's stream keeps its readable name while it fits a file
// name with its extension and the encrypted suffix; a longer claim's name (up to Kubernetes' 253)
// is cut and made unique by its hash, and two claims that share the kept part get two streams.
func TestClaimStreamFitsAFileName(t *testing.T) {
	const ext = ".tree.jsonl.zst"
	fits := strings.Repeat("f", MaxStoredSegment-len(ext)-len(EncryptedSuffix))
	for _, tc := range []struct {
		name, claim string
		readable    bool
	}{
		{"short", "workspace-notebook-1", true},
		{"at the limit", fits, true},
		{"one past the limit", fits + "f", false},
		{"the longest claim", strings.Repeat("c", 253), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ClaimStream("volumes", "team", tc.claim, ext)
			if readable := got == "volumes/team/"+tc.claim+ext; readable != tc.readable {
				t.Errorf("ClaimStream of a claim of %d characters = %q: readable %v, want %v", len(tc.claim), got, readable, tc.readable)
			}
			segment := got[strings.LastIndex(got, "/")+1:] + EncryptedSuffix
			if len(segment) > MaxStoredSegment {
				t.Errorf("a claim of %d characters is stored as %d bytes, more than %d", len(tc.claim), len(segment), MaxStoredSegment)
			}
		})
	}
	a, b := strings.Repeat("x", 252)+"a", strings.Repeat("x", 252)+"b"
	if ClaimStream("volumes", "team", a, ext) == ClaimStream("volumes", "team", b, ext) {
		t.Errorf("two long claims that differ in their last character share a stream")
	}
}
