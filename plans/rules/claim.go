package rules

import (
	"encoding/json"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// bindingAnnotations are written by the volume binder and provisioners of the source cluster.
var bindingAnnotations = []string{
	"pv.kubernetes.io/bind-completed", "pv.kubernetes.io/bound-by-controller",
	"volume.kubernetes.io/storage-provisioner", "volume.beta.kubernetes.io/storage-provisioner",
	"volume.kubernetes.io/selected-node",
}

// PersistentVolumeClaims come with the storage, lose their binding (the target binds them anew)
// and their data source, have their storage class mapped, and are healthy once Bound. A data
// source (a VolumeSnapshot, a claim cloned, a populator's object) says how the source cluster
// first filled the claim; on the target ferry fills it (its files, or its database's dump), and a
// provisioner given the source would wait for a snapshot or populator the target lacks, or clone
// files the claim has since deleted. Claims an operator's resource owns (CloudNativePG's) are
// made with the storage all the same: the volumes' restore fills them while the rest is made.
// A generic ephemeral volume's claim, which its pod owns, stays: scratch space, made and deleted
// with the pod, whose controller makes a new pod, with a claim of its own, on the target.
func claimRules() map[string]Rule {
	return map[string]Rule{"persistentvolumeclaims": {
		Wave:      WaveStorage,
		KeepsWave: true,
		Exclude:   ephemeralClaim,
		Skip:      ephemeralClaim,
		Normalize: func(obj map[string]any) {
			deleteAnnotations(nestedMap(obj, "metadata"), bindingAnnotations)
			unfitClaim(obj)
			spec := nestedMap(obj, "spec")
			delete(spec, "volumeName")
			dropDataSource(spec)
		},
		StorageClasses: func(obj map[string]any) []map[string]any { return []map[string]any{nestedMap(obj, "spec")} },
		Health: func(obj map[string]any) (bool, string) {
			phase, _, _ := unstructured.NestedString(obj, "status", "phase")
			return phase == "Bound", "the claim is " + strings.ToLower(phase)
		},
		NeverReady: func(obj map[string]any) bool {
			phase, _, _ := unstructured.NestedString(obj, "status", "phase")
			volume, _, _ := unstructured.NestedString(obj, "spec", "volumeName")
			return NeverBound(phase, volume)
		},
	}}
}

// NeverBound says whether a claim of that phase and volume name never had a volume: pending, with
// none named (a workspace whose notebook never started, a claim waiting for its first pod). It
// holds no data, only its object.
func NeverBound(phase, volumeName string) bool { return phase == "Pending" && volumeName == "" }

// FittedAnnotation, on a claim a restore made larger than the backup's so that its volume holds
// the claim's files (FitClaim), holds the request the backup's had and the one the restore gave:
// {"requested":"1Gi","fitted":"6Gi"}.
const FittedAnnotation = "ferry.dev/fitted-storage"

type fittedRequests struct {
	Requested string `json:"requested"`
	Fitted    string `json:"fitted"`
}

// FitClaim raises the storage request of a claim a restore makes (obj, its prepared form) when a
// file system of that size could not hold the files its volume receives: fileBytes in entries
// names. A provisioner that never enforces a claim's size (local-path, NFS) lets a claim of 1Gi
// hold 30 GiB; a cloud disk is made as large as the claim requests, and the restore would run out
// of space part way. It returns the request before and after, or "" when the claim is large
// enough (or requests no size ferry reads).
func FitClaim(obj map[string]any, fileBytes, entries int64) (from, to string) {
	requested, ok := storageRequest(obj)
	size, holds := fittedSize(requested, fileBytes, entries)
	if !ok || holds {
		return "", ""
	}
	nestedMap(obj, "spec", "resources", "requests")["storage"] = size.String()
	setAnnotation(obj, FittedAnnotation, fittedRecord(requested.String(), size.String()))
	return requested.String(), size.String()
}

// GrowClaim is the merge patch that grows a claim already on the target (live) as FitClaim
// sizes a new one, and the request before and after; nil when it holds the files as it is (a
// warm migration's later round fills it with more than its first). The record keeps the request
// the claim had before ferry first grew it.
func GrowClaim(live map[string]any, fileBytes, entries int64) (patch map[string]any, from, to string) {
	requested, ok := storageRequest(live)
	size, holds := fittedSize(requested, fileBytes, entries)
	if !ok || holds {
		return nil, "", ""
	}
	before := requested.String()
	if f, ok := fittedRecordOf(live); ok {
		before = f.Requested
	}
	return map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{FittedAnnotation: fittedRecord(before, size.String())}},
		"spec":     map[string]any{"resources": map[string]any{"requests": map[string]any{"storage": size.String()}}},
	}, requested.String(), size.String()
}

// KeepLargerRequest gives obj, the form of a claim an update applies to the target's (live), the
// live one's request and its FitClaim record when the live one requests more: a claim never
// shrinks, and the target refuses a write that would.
func KeepLargerRequest(obj, live map[string]any) {
	have, ok1 := storageRequest(live)
	want, ok2 := storageRequest(obj)
	if !ok1 || !ok2 || have.Cmp(want) <= 0 {
		return
	}
	nestedMap(obj, "spec", "resources", "requests")["storage"] = have.String()
	if f, ok := fittedRecordOf(live); ok {
		setAnnotation(obj, FittedAnnotation, fittedRecord(f.Requested, f.Fitted))
	}
}

// fittedSize is the request a claim needs to hold fileBytes in entries names, and whether one of
// requested holds them. Each name takes at least a block of 4 KiB; a claim that requests less than
// that sum is given a tenth more, which a file system keeps for itself (ext4's reserved blocks,
// journal and inode tables), in whole MiB (GiB from 1 GiB on). One that requests at least the sum
// keeps its request: a sparse file's size (a virtual machine's disk image, about as large as its
// claim) counts whole, though its holes take no space.
func fittedSize(requested resource.Quantity, fileBytes, entries int64) (resource.Quantity, bool) {
	least := fileBytes + entries*4096
	if requested.Value() >= least {
		return requested, true
	}
	needs := least / 9 * 10
	unit := int64(1 << 20)
	if needs >= 1<<30 {
		unit = 1 << 30
	}
	return *resource.NewQuantity((needs+unit-1)/unit*unit, resource.BinarySI), false
}

// storageRequest is a claim's storage request, if it has one ferry reads.
func storageRequest(obj map[string]any) (resource.Quantity, bool) {
	text, _ := nestedMap(obj, "spec", "resources", "requests")["storage"].(string)
	q, err := resource.ParseQuantity(text)
	return q, err == nil
}

func fittedRecord(requested, fitted string) string {
	record, _ := json.Marshal(fittedRequests{Requested: requested, Fitted: fitted})
	return string(record)
}

// unfitClaim gives a claim FitClaim made larger the request of the backup it was restored from,
// as long as it still has the one the restore gave it (one grown since keeps its own), and drops
// the record: the claim is the source's, the size only what the target's storage needs.
func unfitClaim(obj map[string]any) {
	f, ok := fittedRecordOf(obj)
	deleteAnnotations(nestedMap(obj, "metadata"), []string{FittedAnnotation})
	if ok {
		nestedMap(obj, "spec", "resources", "requests")["storage"] = f.Requested
	}
}

// fittedRecordOf is the FitClaim record of a claim, when it holds: the claim has the request the
// record says ferry gave it (not one someone changed since), and the record reads.
func fittedRecordOf(obj map[string]any) (fittedRequests, bool) {
	var f fittedRequests
	annotations, _ := nestedMap(obj, "metadata")["annotations"].(map[string]any)
	record, ok := annotations[FittedAnnotation].(string)
	if !ok || json.Unmarshal([]byte(record), &f) != nil {
		return f, false
	}
	now, ok := storageRequest(obj)
	given, err := resource.ParseQuantity(f.Fitted)
	if _, rerr := resource.ParseQuantity(f.Requested); !ok || err != nil || rerr != nil || now.Cmp(given) != 0 {
		return f, false
	}
	return f, true
}

// ephemeralClaim says why a claim its pod controls (a generic ephemeral volume's) does not move.
func ephemeralClaim(obj map[string]any) string {
	for _, ref := range (&unstructured.Unstructured{Object: obj}).GetOwnerReferences() {
		if ref.Kind == "Pod" && ref.APIVersion == "v1" && ref.Controller != nil && *ref.Controller {
			return "a generic ephemeral volume of pod " + ref.Name + ": scratch space, made and deleted with its pod"
		}
	}
	return ""
}

// dropDataSource takes the data source out of a claim's spec (or a claim template's).
func dropDataSource(spec map[string]any) {
	delete(spec, "dataSource")
	delete(spec, "dataSourceRef")
}
