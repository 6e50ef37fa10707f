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
	"strings"

	"github.com/ferrykube/ferry/snapshot"

	"k8s.io/apimachinery/pkg/runtime"
)

// serverSetMetadata are set by the API server for each cluster and never carried over.
var serverSetMetadata = []string{
	"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink",
	"deletionTimestamp", "deletionGracePeriodSeconds", "generateName",
}

// bindingAnnotations are written by the volume binder and provisioners of the source cluster.
var bindingAnnotations = []string{
	"pv.kubernetes.io/bind-completed", "pv.kubernetes.io/bound-by-controller",
	"volume.kubernetes.io/storage-provisioner", "volume.beta.kubernetes.io/storage-provisioner",
	"volume.kubernetes.io/selected-node",
}

// Normalize returns a copy of obj without what the source cluster set by itself: server-set
// metadata, status, owner UIDs, and per kind the fields Velero's restore resets (Service cluster
// IPs and the node ports the cluster allocated, claim binding, Job controller-uid selectors, pod
// node names). gr is the group-resource, e.g. "jobs.batch".
func Normalize(gr string, obj map[string]any) map[string]any {
	out := runtime.DeepCopyJSON(obj)
	meta, _ := out["metadata"].(map[string]any)
	if gr == "services" {
		// Which node ports a user chose is read from the managed fields, dropped below.
		normalizeService(out, nestedMap(out, "spec"))
	}
	if meta != nil {
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
	spec, _ := out["spec"].(map[string]any)
	switch gr {
	case "persistentvolumeclaims":
		deleteAnnotations(meta, bindingAnnotations)
		delete(spec, "volumeName")
	case "persistentvolumes":
		deleteAnnotations(meta, bindingAnnotations)
		if ref, ok := spec["claimRef"].(map[string]any); ok {
			delete(ref, "uid")
			delete(ref, "resourceVersion")
		}
	case "jobs.batch":
		// The Job controller's UID labels, which the Job's own labels inherit when it has none.
		for _, m := range []map[string]any{nestedMap(spec, "selector", "matchLabels"), nestedMap(spec, "template", "metadata", "labels"), nestedMap(meta, "labels")} {
			delete(m, "controller-uid")
			delete(m, "batch.kubernetes.io/controller-uid")
		}
	case "daemonsets.apps":
		// The API server writes the template's generation here, counting the source's updates.
		deleteAnnotations(meta, []string{"deprecated.daemonset.template.generation"})
	case "replicasets.apps":
		// The revision and change-cause annotations are the Deployment's rollout history and
		// move (its ReplicaSets are restored first, so its controller keeps their numbers); the
		// replica counts are the controller's bookkeeping of the current scale.
		if controlledBy(meta, "Deployment") {
			deleteAnnotations(meta, []string{"deployment.kubernetes.io/desired-replicas", "deployment.kubernetes.io/max-replicas"})
		}
	case "pods":
		delete(spec, "nodeName")
		delete(spec, "priority")
		dropTokenVolumes(spec)
	}
	return out
}

// dropTokenVolumes removes the service account token volume that admission adds to every pod
// under a random name (kube-api-access-xxxxx), and its mounts: the target's admission adds its own.
func dropTokenVolumes(spec map[string]any) {
	vols, _ := spec["volumes"].([]any)
	dropped := map[string]bool{}
	kept := vols[:0:0]
	for _, v := range vols {
		name, _ := asMap(v)["name"].(string)
		if strings.HasPrefix(name, "kube-api-access-") && asMap(v)["projected"] != nil {
			dropped[name] = true
			continue
		}
		kept = append(kept, v)
	}
	if len(dropped) == 0 {
		return
	}
	if len(kept) == 0 {
		delete(spec, "volumes")
	} else {
		spec["volumes"] = kept
	}
	for _, list := range []string{"initContainers", "containers", "ephemeralContainers"} {
		containers, _ := spec[list].([]any)
		for _, c := range containers {
			cm := asMap(c)
			mounts, _ := cm["volumeMounts"].([]any)
			keptMounts := mounts[:0:0]
			for _, m := range mounts {
				if name, _ := asMap(m)["name"].(string); !dropped[name] {
					keptMounts = append(keptMounts, m)
				}
			}
			if len(keptMounts) == 0 {
				delete(cm, "volumeMounts")
			} else {
				cm["volumeMounts"] = keptMounts
			}
		}
	}
}

// controlledBy reports whether the object's controlling owner is of the kind.
func controlledBy(meta map[string]any, kind string) bool {
	refs, _ := meta["ownerReferences"].([]any)
	for _, r := range refs {
		rm := asMap(r)
		if rm["controller"] == true && rm["kind"] == kind {
			return true
		}
	}
	return false
}

func deleteAnnotations(meta map[string]any, keys []string) {
	ann, ok := meta["annotations"].(map[string]any)
	if !ok {
		return
	}
	for _, k := range keys {
		delete(ann, k)
	}
	if len(ann) == 0 {
		delete(meta, "annotations")
	}
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

// keyedDigest says which objects get keyed digests: those whose content is secret, so that the
// manifest, which is never encrypted, is no oracle for guessing it.
func keyedDigest(gr string) bool { return gr == "secrets" }

// ObjectDigest is the digest a backup records for an object, and its scheme: keyed with the
// backup's digest key for a Secret (key must then be set), plain SHA-256 for the rest.
func ObjectDigest(gr string, obj map[string]any, key []byte) (digest, scheme string, err error) {
	scheme = snapshot.DigestSHA256
	if keyedDigest(gr) {
		scheme = snapshot.DigestHMAC
	}
	digest, err = DigestOf(gr, obj, scheme, key)
	return digest, scheme, err
}

// DigestOf is the digest of the scheme of an object's normalized form as canonical JSON (sorted
// keys, compact): SHA-256, or HMAC-SHA-256 with key.
func DigestOf(gr string, obj map[string]any, scheme string, key []byte) (string, error) {
	data, err := json.Marshal(Normalize(gr, obj))
	if err != nil {
		return "", err
	}
	switch scheme {
	case snapshot.DigestSHA256:
		sum := sha256.Sum256(data)
		return hex.EncodeToString(sum[:]), nil
	case snapshot.DigestHMAC:
		if len(key) == 0 {
			return "", fmt.Errorf("a keyed digest without a key")
		}
		mac := hmac.New(sha256.New, key)
		mac.Write(data)
		return hex.EncodeToString(mac.Sum(nil)), nil
	}
	return "", fmt.Errorf("digest scheme %q is not known", scheme)
}
