// Package resources captures Kubernetes objects into a backup that is also a valid Velero backup,
// and (with restore and verify) puts them back. Normalization here is the one rule set backup,
// restore and verify share: what a cluster sets by itself is not part of an object's content.
package resources

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/ferrykube/ferry/plans/rules"
	"github.com/ferrykube/ferry/snapshot"

	"k8s.io/apimachinery/pkg/runtime"
)

// serverSetMetadata are set by the API server for each cluster and never carried over.
var serverSetMetadata = []string{
	"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink",
	"deletionTimestamp", "deletionGracePeriodSeconds", "generateName",
}

// Normalize returns a copy of obj without what the source cluster set by itself: server-set
// metadata, status, owner UIDs, and what the kind's rule drops (rules.Rule.Normalize: Service
// cluster IPs and the node ports the cluster allocated, claim binding, Job controller-uid
// selectors, pod node names, as Velero's restore resets them). gr is the group-resource, e.g.
// "jobs.batch".
func Normalize(gr string, obj map[string]any) map[string]any {
	out := runtime.DeepCopyJSON(obj)
	if normalize := rules.For(gr).Normalize; normalize != nil {
		normalize(out) // first: a Service reads the managed fields dropped below
	}
	if meta, _ := out["metadata"].(map[string]any); meta != nil {
		for _, f := range serverSetMetadata {
			delete(meta, f)
		}
		if refs, ok := meta["ownerReferences"].([]any); ok {
			for _, r := range refs {
				if rm, ok := r.(map[string]any); ok {
					delete(rm, "uid") // re-linked to the owner's new UID on restore
				}
			}
		}
	}
	delete(out, "status")
	return out
}

func nestedMap(m map[string]any, path ...string) map[string]any {
	for _, p := range path {
		next, ok := m[p].(map[string]any)
		if !ok {
			return nil
		}
		m = next
	}
	return m
}

// Digest is the SHA-256 of an object's normalized form as canonical JSON (sorted keys, compact).
func Digest(gr string, obj map[string]any) (string, error) {
	return DigestOf(gr, obj, snapshot.DigestSHA256, nil)
}

// FileDigest is the digest a backup records for an object stored as data (its file in the
// archive), and its scheme: keyed with the backup's digest key for a Secret (key must then be
// set), plain SHA-256 for the rest. It is of the bytes stored, not of a normalized form, so that
// no later ferry's rules change what it proves.
func FileDigest(gr string, data, key []byte) (digest, scheme string, err error) {
	scheme = snapshot.DigestFile
	if rules.For(gr).Secret {
		scheme = snapshot.DigestFileHMAC
	}
	digest, err = digestBytes(data, scheme, key)
	return digest, scheme, err
}

// DigestOf is the digest of the scheme of an object's normalized form as canonical JSON (sorted
// keys, compact): SHA-256, or HMAC-SHA-256 with key; what backups recorded before FileDigest.
func DigestOf(gr string, obj map[string]any, scheme string, key []byte) (string, error) {
	if !snapshot.NormalizedDigest(scheme) {
		return "", fmt.Errorf("digest scheme %q is not of the normalized form", scheme)
	}
	data, err := json.Marshal(Normalize(gr, obj))
	if err != nil {
		return "", err
	}
	return digestBytes(data, scheme, key)
}

// digestBytes is the digest of the scheme of data: its SHA-256, or its HMAC-SHA-256 with key.
func digestBytes(data []byte, scheme string, key []byte) (string, error) {
	switch {
	case scheme == snapshot.DigestSHA256 || scheme == snapshot.DigestFile:
		sum := sha256.Sum256(data)
		return hex.EncodeToString(sum[:]), nil
	case !snapshot.KeyedDigest(scheme):
		return "", fmt.Errorf("digest scheme %q is not known", scheme)
	case len(key) == 0:
		return "", fmt.Errorf("a keyed digest without a key")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write(data)
	return hex.EncodeToString(mac.Sum(nil)), nil
}
