package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/plans"
)

// The digest schemes a manifest records decide how its objects' digests are read: a format 1
// manifest (plain SHA-256 digests, no key) still reads; a keyed digest needs a recorded key; a
// scheme this ferry does not know is refused as bad input naming it.
func TestManifestDigestSchemes(t *testing.T) {
	ctx := context.Background()
	secret := map[string]any{"version": "v1", "kind": "Secret", "resource": "secrets", "namespace": "a", "name": "db", "sha256": strings.Repeat("a", 64)}
	with := func(fields map[string]any) map[string]any {
		out := map[string]any{}
		for k, v := range secret {
			out[k] = v
		}
		for k, v := range fields {
			out[k] = v
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		edit    func(m map[string]any)
		badIn   bool   // refused as bad input
		corrupt bool   // refused as a bad manifest
		want    string // in the error
	}{
		{name: "format 1, plain digests", edit: func(m map[string]any) {
			m["formatVersion"] = "1"
			m["objects"] = []any{secret}
			delete(m, "digestKey")
		}},
		{name: "format 2, keyed digest and its key", edit: func(m map[string]any) {
			m["objects"] = []any{with(map[string]any{"digest": DigestHMAC})}
		}},
		{name: "keyed digest without a key", edit: func(m map[string]any) {
			m["objects"] = []any{with(map[string]any{"digest": DigestHMAC})}
			delete(m, "digestKey")
		}, corrupt: true, want: "no digest key"},
		{name: "a key that is not a stream", edit: func(m map[string]any) {
			m["digestKey"] = "elsewhere"
		}, corrupt: true, want: "not a recorded stream"},
		{name: "unknown scheme", edit: func(m map[string]any) {
			m["objects"] = []any{with(map[string]any{"digest": "blake3-keyed"})}
		}, badIn: true, want: `secrets a/db has a digest of scheme "blake3-keyed"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newStore(t)
			w, err := Create(ctx, store, "b", plans.Cluster{}, &plans.Plan{}, time.Now(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.DigestKey(ctx); err != nil {
				t.Fatal(err)
			}
			m, err := w.Commit(ctx, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			data, _ := json.Marshal(m)
			var doc map[string]any
			json.Unmarshal(data, &doc)
			tc.edit(doc)
			data, _ = json.Marshal(doc)
			_, err = DecodeManifest(strings.NewReader(string(data)), "b")
			switch {
			case tc.badIn && !badinput.Is(err), tc.corrupt && !errors.Is(err, ErrBadManifest):
				t.Fatalf("%v; want it refused (bad input %v, bad manifest %v)", err, tc.badIn, tc.corrupt)
			case !tc.badIn && !tc.corrupt && err != nil:
				t.Fatal(err)
			case err != nil && !strings.Contains(err.Error(), tc.want):
				t.Errorf("%v; want it to say %q", err, tc.want)
			}
		})
	}
}

// The digest key is made once per backup, stored as a stream (encrypted when the backup is), and
// read back checked and decrypted; each backup has its own.
func TestDigestKeyStream(t *testing.T) {
	ctx := context.Background()
	id, _ := age.GenerateX25519Identity()
	for _, tc := range []struct {
		name       string
		recipients []string
		file       string
	}{
		{"plain", nil, DigestKeyFile},
		{"encrypted", []string{id.Recipient().String()}, DigestKeyFile + EncryptedSuffix},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newStore(t)
			keys := map[string]bool{}
			for _, name := range []string{"b1", "b2"} {
				w, err := Create(ctx, store, name, plans.Cluster{}, &plans.Plan{}, time.Now(), tc.recipients)
				if err != nil {
					t.Fatal(err)
				}
				k1, err := w.DigestKey(ctx)
				if err != nil {
					t.Fatal(err)
				}
				k2, _ := w.DigestKey(ctx)
				if string(k1) != string(k2) || len(k1) != 32 {
					t.Fatalf("DigestKey twice: %x, %x; want one key of 32 bytes", k1, k2)
				}
				keys[string(k1)] = true
				m, err := w.Commit(ctx, time.Now())
				if err != nil {
					t.Fatal(err)
				}
				if m.DigestKey != tc.file || len(m.Streams) != 1 || m.Streams[0].Key != tc.file {
					t.Fatalf("manifest digest key %q, streams %+v; want %s", m.DigestKey, m.Streams, tc.file)
				}
				r, err := Open(ctx, store, name, []age.Identity{id})
				if err != nil {
					t.Fatal(err)
				}
				read, err := r.DigestKey(ctx)
				if err != nil || string(read) != string(k1) {
					t.Fatalf("read key %x, %v; want %x", read, err, k1)
				}
			}
			if len(keys) != 2 {
				t.Error("two backups got the same digest key")
			}
		})
	}
}
