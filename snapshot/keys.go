package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
)

// Limits of the names a backup stores a stream under, below those of its storage: a file name (a
// file storage's, each segment of a MinIO key) holds at most 255 bytes, an S3 key 1,024, of
// which the storage's folder, the backup's name and the stream's folders take their share.
const (
	MaxStoredSegment = 200
	MaxStoredName    = 512
)

// claimKept is how much of a claim's name a stream's name keeps when the whole would not fit.
const claimKept = 120

// ClaimStream is the stream of a claim in folder dir, with extension ext, before the encrypted
// suffix: dir/<namespace>/<claim><ext>. A claim's name may be 253 characters, more than a
// segment holds with an extension and the encrypted suffix; such a name keeps its first
// characters, then "_" (which no claim's name holds) and the SHA-256 of the whole name, in hex,
// so that no two claims share a stream. The manifest records the name beside the claim's.
func ClaimStream(dir, namespace, claim, ext string) string {
	name := claim
	if len(claim)+len(ext)+len(EncryptedSuffix) > MaxStoredSegment {
		sum := sha256.Sum256([]byte(claim))
		name = claim[:min(len(claim), claimKept)] + "_" + hex.EncodeToString(sum[:16])
	}
	return dir + "/" + namespace + "/" + name + ext
}
