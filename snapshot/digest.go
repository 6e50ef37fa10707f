package snapshot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"strings"

	"github.com/ferrykube/ferry/internal/badinput"
)

// Digest schemes of an object's digest (objects[].digest in the manifest).
const (
	// DigestFile is the SHA-256 of the object's file in the archive, byte for byte: what a
	// backup records since its digests stopped depending on the rules that compare objects,
	// which each ferry refines.
	DigestFile = "sha256-file"
	// DigestFileHMAC is the HMAC-SHA-256 of the object's file keyed with the backup's digest
	// key. Secrets get it: a plain hash of a short value is a guessing oracle.
	DigestFileHMAC = "hmac-sha256-file"

	// DigestSHA256 is the SHA-256 of the normalized form; it is what format 1 wrote for every
	// object and what an object without a digest field has. The normalized form is the one
	// the reading ferry makes, whose rules may differ from the writing ferry's.
	DigestSHA256 = ""
	// DigestHMAC is the HMAC-SHA-256 of the normalized form keyed with the backup's digest key,
	// as backups before DigestFileHMAC recorded Secrets' digests.
	DigestHMAC = "hmac-sha256"
)

// KeyedDigest reports whether digests of the scheme are keyed with the backup's digest key.
func KeyedDigest(scheme string) bool { return scheme == DigestHMAC || scheme == DigestFileHMAC }

// NormalizedDigest reports whether digests of the scheme are of the normalized form (backups
// made before file digests).
func NormalizedDigest(scheme string) bool { return scheme == DigestSHA256 || scheme == DigestHMAC }

// DigestKeyFile holds a backup's digest key (64 hexadecimal digits); it is a stream like any
// other, so it is encrypted when the backup is and never part of the manifest.
const DigestKeyFile = "ferry-digest-key"

// digestKeySize is the size of the random key of keyed digests, in bytes.
const digestKeySize = 32

// knownDigest reports whether this ferry can check digests of the scheme.
func knownDigest(scheme string) bool {
	return NormalizedDigest(scheme) || scheme == DigestFile || scheme == DigestFileHMAC
}

// DigestKey returns the backup's digest key, storing it first (as DigestKeyFile, encrypted when
// the backup is) when this is the first call. Objects' keyed digests need it.
func (w *Writer) DigestKey(ctx context.Context) ([]byte, error) {
	w.keyMu.Lock()
	defer w.keyMu.Unlock()
	if w.digestKey != nil {
		return w.digestKey, nil
	}
	key := make([]byte, digestKeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("backup %s: make the digest key: %w", w.name, err)
	}
	file, err := w.Put(ctx, DigestKeyFile, strings.NewReader(hex.EncodeToString(key)+"\n"))
	if err != nil {
		return nil, fmt.Errorf("backup %s: store %s: %w", w.name, DigestKeyFile, err)
	}
	w.mu.Lock()
	w.manifest.DigestKey = file
	w.mu.Unlock()
	w.digestKey = key
	return key, nil
}

// DigestKey reads the backup's digest key, checked against the manifest and decrypted. A backup
// whose objects have keyed digests but which records no key is corrupt.
func (r *Reader) DigestKey(ctx context.Context) ([]byte, error) {
	file := r.Manifest.DigestKey
	if file == "" {
		return nil, fmt.Errorf("backup %s: its objects have keyed digests but the manifest names no digest key: %w", r.name, ErrCorrupt)
	}
	rc, err := r.Open(ctx, file)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(rc, 4*digestKeySize))
	if err == nil {
		err = rc.Close()
	} else {
		rc.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("backup %s: %s: %w", r.name, file, err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(data)))
	if err != nil || len(key) != digestKeySize {
		return nil, fmt.Errorf("backup %s: %s is not a digest key of %d hexadecimal digits: %w", r.name, file, 2*digestKeySize, ErrCorrupt)
	}
	return key, nil
}

// checkDigests checks the manifest's digest schemes: each must be one this ferry knows (another
// is refused as bad input, naming it, since its digests cannot be checked), and keyed digests need
// a recorded key.
func checkDigests(name string, m *Manifest, recorded map[string]bool) error {
	keyed := false
	for _, o := range m.Objects {
		if !knownDigest(o.Digest) {
			id := o.Resource + " " + o.Name
			if o.Namespace != "" {
				id = o.Resource + " " + o.Namespace + "/" + o.Name
			}
			return badinput.Errorf("backup %s: object %s has a digest of scheme %q, which this ferry does not know (it knows %s, %s, sha256 and %s): use a newer ferry", name, id, o.Digest, DigestFile, DigestFileHMAC, DigestHMAC)
		}
		keyed = keyed || KeyedDigest(o.Digest)
	}
	if m.DigestKey != "" && !recorded[m.DigestKey] {
		return fmt.Errorf("backup %s: %s: %w: digest key %q is not a recorded stream", name, ManifestFile, ErrBadManifest, m.DigestKey)
	}
	if keyed && m.DigestKey == "" {
		return fmt.Errorf("backup %s: %s: %w: objects have keyed digests but no digest key is named", name, ManifestFile, ErrBadManifest)
	}
	return nil
}
