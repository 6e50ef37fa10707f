package resources

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/ferrykube/ferry/snapshot"
	"github.com/klauspost/compress/gzip"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Entry is one object of a backup's archive, as backed up. Object is nil for an archive that
// spools its objects (ReadArchive's): Archive.Object reads it.
type Entry struct {
	GroupResource string // "deployments.apps", "configmaps"
	Namespace     string
	Name          string
	APIVersion    string
	Kind          string
	Object        map[string]any
	at            spoolRef
}

// ID names the entry as reports do: "apps/v1 Deployment ns/name".
func (e Entry) ID() string {
	if e.Object != nil {
		return objectID(e.Object, e.Namespace)
	}
	name := e.Name
	if e.Namespace != "" {
		name = e.Namespace + "/" + name
	}
	return e.APIVersion + " " + e.Kind + " " + name
}

func objectID(obj map[string]any, namespace string) string {
	u := unstructured.Unstructured{Object: obj}
	name := u.GetName()
	if namespace != "" {
		name = namespace + "/" + name
	}
	return u.GetAPIVersion() + " " + u.GetKind() + " " + name
}

// Archive is every object of a backup, by group-resource, in the archive's order. Memory holds
// the objects' keys; their contents, once checked, wait in a local spool (or, for an archive made
// in memory, in Object).
type Archive struct {
	ByResource map[string][]Entry
	Count      int

	spool *spool
	// ownerKinds are, by group-resource, the group/Kind of every owner its objects reference.
	ownerKinds map[string]map[string]bool
	// controlled holds the ownerKey of each object with a controlling owner reference.
	controlled map[string]bool
	// ownedBy holds, by the ownerKey of each object with owner references, its owners'
	// (a namespaced object's owners taken to be in its namespace).
	ownedBy map[string][]string
	// podOwners holds, by the ownerKey of each pod, its owner references: whether the target
	// makes it anew (the pods' rule) decides what the objects it owns do.
	podOwners map[string]any
	transform func(map[string]any) map[string]any
	// Drifted names the objects (as Entry.ID does) of a backup made before file digests whose
	// normalized form under this ferry's rules is not the one the backup recorded: rules that
	// changed since, which DriftNote explains.
	Drifted []string
}

// DriftNote says why the Drifted objects were restored all the same.
const DriftNote = "recorded with a digest of its normalized form by an older ferry, whose rules for this kind differ from this one's; the archive's stream matched the manifest's SHA-256 and size"

// newSpooledArchive is an empty archive whose objects go to a local spool; Close removes it.
func newSpooledArchive() (*Archive, error) {
	s, err := newSpool()
	if err != nil {
		return nil, err
	}
	return &Archive{ByResource: map[string][]Entry{}, spool: s, ownerKinds: map[string]map[string]bool{}, controlled: map[string]bool{}, ownedBy: map[string][]string{}}, nil
}

// Close removes the archive's spool.
func (a *Archive) Close() error {
	if a == nil || a.spool == nil {
		return nil
	}
	return a.spool.close()
}

// Transform makes Object return f of each object (f may change its argument).
func (a *Archive) Transform(f func(map[string]any) map[string]any) { a.transform = f }

// add appends one object, whose JSON is data (or, when nil, obj's), keeping its keys in memory
// and its contents in the spool when there is one.
func (a *Archive) add(gr, namespace, name string, obj map[string]any, data []byte) error {
	u := unstructured.Unstructured{Object: obj}
	e := Entry{GroupResource: gr, Namespace: namespace, Name: name, APIVersion: u.GetAPIVersion(), Kind: u.GetKind()}
	a.noteKeys(gr, e, obj)
	if a.spool == nil {
		e.Object = obj
	} else {
		if data == nil {
			var err error
			if data, err = json.Marshal(obj); err != nil {
				return fmt.Errorf("%s: %w", e.ID(), err)
			}
		}
		var err error
		if e.at, err = a.spool.put(data); err != nil {
			return err
		}
	}
	if entries, ok := a.ByResource[gr]; ok {
		e.GroupResource = entries[0].GroupResource // one copy of the string
	}
	a.ByResource[gr] = append(a.ByResource[gr], e)
	a.Count++
	return nil
}

func (a *Archive) noteKeys(gr string, e Entry, obj map[string]any) {
	if a.ownerKinds == nil {
		a.ownerKinds = map[string]map[string]bool{}
	}
	if a.controlled == nil {
		a.controlled = map[string]bool{}
	}
	if a.ownedBy == nil {
		a.ownedBy = map[string][]string{}
	}
	key := e.ownerKey()
	if gr == "pods" {
		if a.podOwners == nil {
			a.podOwners = map[string]any{}
		}
		if refs, ok, _ := unstructured.NestedFieldNoCopy(obj, "metadata", "ownerReferences"); ok {
			a.podOwners[key] = refs
		}
	}
	for _, ref := range (&unstructured.Unstructured{Object: obj}).GetOwnerReferences() {
		gv, _ := schema.ParseGroupVersion(ref.APIVersion)
		if a.ownerKinds[gr] == nil {
			a.ownerKinds[gr] = map[string]bool{}
		}
		a.ownerKinds[gr][gv.Group+"/"+ref.Kind] = true
		if ref.Controller != nil && *ref.Controller {
			a.controlled[key] = true
		}
		a.ownedBy[key] = append(a.ownedBy[key], ownerKey(gv.Group, ref.Kind, e.Namespace, ref.Name))
	}
}

// ownerKey is the entry's key as owner references name it (see ownerKey).
func (e Entry) ownerKey() string {
	gv, _ := schema.ParseGroupVersion(e.APIVersion)
	return ownerKey(gv.Group, e.Kind, e.Namespace, e.Name)
}

// index fills in the keys of an archive made in memory (a literal: Object set, keys not).
func (a *Archive) index() {
	if a.ownerKinds != nil {
		return
	}
	a.ownerKinds, a.controlled, a.ownedBy, a.podOwners = map[string]map[string]bool{}, map[string]bool{}, map[string][]string{}, map[string]any{}
	for gr, entries := range a.ByResource {
		for i, e := range entries {
			if e.Object == nil {
				continue
			}
			u := unstructured.Unstructured{Object: e.Object}
			if e.APIVersion == "" {
				entries[i].APIVersion, entries[i].Kind = u.GetAPIVersion(), u.GetKind()
			}
			a.noteKeys(gr, entries[i], e.Object)
		}
	}
}

// Object is the entry's object, read from the spool when it is there (a new copy each time).
func (a *Archive) Object(e Entry) (map[string]any, error) {
	obj := e.Object
	if obj == nil {
		if a.spool == nil {
			return nil, fmt.Errorf("%s: not in the archive", e.ID())
		}
		data, err := a.spool.get(e.at)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.ID(), err)
		}
		if err := json.Unmarshal(data, &obj); err != nil {
			return nil, fmt.Errorf("%s: %w", e.ID(), err)
		}
	}
	if a.transform != nil {
		obj = a.transform(obj)
	}
	return obj, nil
}

// Controlled says whether the entry's object has a controlling owner reference.
func (a *Archive) Controlled(e Entry) bool {
	a.index()
	return a.controlled[e.ownerKey()]
}

// ArchiveFile finds the stored name of the backup's object archive (encrypted or not).
func ArchiveFile(r *snapshot.Reader) string {
	file := r.Name() + ".tar.gz"
	if _, ok := r.Stream(file + snapshot.EncryptedSuffix); ok {
		return file + snapshot.EncryptedSuffix
	}
	return file
}

// ReadArchive reads the backup's object archive: the version-less tree of Velero's layout, which
// holds every object once at its preferred version. For a ferry backup, the archive must hold
// exactly the objects of the manifest, each with the digest the manifest records for it (or, of
// a backup made before file digests, drifted: see manifestCheck), and the stored stream must be
// the manifest's to its last byte: all of it is checked before ReadArchive returns, so nothing is
// applied from an archive that fails. The objects checked wait in a local
// spool (memory holds their keys only); Close removes it.
func ReadArchive(ctx context.Context, r *snapshot.Reader) (*Archive, error) {
	file := ArchiveFile(r)
	var check objectCheck
	if !r.Velero {
		var err error
		if check, err = manifestCheck(ctx, r); err != nil {
			return nil, err
		}
	}
	rc, err := r.Open(ctx, file)
	if err != nil {
		return nil, err
	}
	a, err := readArchive(rc, check)
	if err != nil {
		a.Close()
		// Say so when the stored file is not what the manifest recorded, rather than how it broke.
		if derr := snapshot.Drain(rc); errors.Is(derr, snapshot.ErrCorrupt) {
			err = derr
		}
	} else if err = rc.Close(); err != nil {
		a.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("backup %s: %s: %w", r.Name(), file, err)
	}
	if !r.Velero {
		if err := a.matchManifest(r.Manifest.Objects); err != nil {
			a.Close()
			return nil, fmt.Errorf("backup %s: %s: %w", r.Name(), file, err)
		}
	}
	return a, nil
}

// objectCheck checks one object of the archive, as stored (data) and decoded (obj), against what
// the manifest says of it. drifted is true when only the rules that normalize it changed since
// the backup (a digest of the normalized form that differs).
type objectCheck func(gr, namespace, name string, obj map[string]any, data []byte) (drifted bool, err error)

// manifestCheck checks each object's digest against the manifest's: the stream's SHA-256 proves
// the archive is the one stored, this proves each object is the one the backup recorded (and
// listed in its report), so that no writer's slip is restored unnoticed. Keyed digests need the
// backup's digest key, read (and checked) first. A digest of the normalized form (backups made
// before file digests) depends on the rules of the ferry that reads it, which change: one that
// differs is drifted, not corrupt, since the stream it came in was checked whole.
func manifestCheck(ctx context.Context, r *snapshot.Reader) (objectCheck, error) {
	want := make(map[string]snapshot.Object, len(r.Manifest.Objects))
	var key []byte
	for _, o := range r.Manifest.Objects {
		want[objectKey(o.GroupResource(), o.Namespace, o.Name)] = o
		if snapshot.KeyedDigest(o.Digest) && key == nil {
			var err error
			if key, err = r.DigestKey(ctx); err != nil {
				return nil, err
			}
		}
	}
	return func(gr, namespace, name string, obj map[string]any, data []byte) (bool, error) {
		o, ok := want[objectKey(gr, namespace, name)]
		if !ok || o.SHA256 == "" {
			return false, nil // matchManifest names objects the manifest lacks; format 1 had no empty digests
		}
		var digest string
		var err error
		if snapshot.NormalizedDigest(o.Digest) {
			digest, err = DigestOf(gr, obj, o.Digest, key)
		} else {
			digest, err = digestBytes(data, o.Digest, key)
		}
		switch {
		case err != nil:
			return false, err
		case digest == o.SHA256:
			return false, nil
		case snapshot.NormalizedDigest(o.Digest):
			return true, nil
		}
		return false, fmt.Errorf("%s %s: not the object the manifest recorded (digest differs): %w", gr, path.Join(namespace, name), snapshot.ErrCorrupt)
	}, nil
}

func objectKey(gr, namespace, name string) string { return gr + "/" + namespace + "/" + name }

func readArchive(in io.Reader, check objectCheck) (*Archive, error) {
	gz, err := gzip.NewReader(in)
	if err != nil {
		return nil, fmt.Errorf("not a gzip stream: %w", err)
	}
	tr := tar.NewReader(gz)
	a, err := newSpooledArchive()
	if err != nil {
		return nil, err
	}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return a, fmt.Errorf("reading the tar stream: %w", err)
		}
		gr, ns, name, ok := versionlessPath(h.Name)
		if !ok || h.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return a, fmt.Errorf("%s: %w", h.Name, err)
		}
		// Numbers as written: a float64 would print a large integer otherwise than the capture did.
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			return a, fmt.Errorf("%s: %w", h.Name, err)
		}
		u := unstructured.Unstructured{Object: obj}
		if u.GetName() != name || u.GetNamespace() != ns {
			return a, fmt.Errorf("%s holds %s/%s", h.Name, u.GetNamespace(), u.GetName())
		}
		if check != nil {
			drifted, err := check(gr, ns, name, obj, data)
			if err != nil {
				return a, err
			}
			if drifted {
				a.Drifted = append(a.Drifted, objectID(obj, ns))
			}
		}
		if err := a.add(gr, ns, name, obj, data); err != nil {
			return a, err
		}
	}
	// Drain the gzip stream to its end so the stored stream is checked to its last byte.
	if _, err := io.Copy(io.Discard, gz); err != nil {
		return a, err
	}
	return a, nil
}

// versionlessPath parses resources/<gr>/cluster/<name>.json and
// resources/<gr>/namespaces/<ns>/<name>.json; the per-version trees repeat the same objects.
func versionlessPath(p string) (gr, ns, name string, ok bool) {
	parts := strings.Split(p, "/")
	if len(parts) < 4 || parts[0] != "resources" || !strings.HasSuffix(p, ".json") {
		return "", "", "", false
	}
	switch {
	case len(parts) == 4 && parts[2] == "cluster":
		return parts[1], "", strings.TrimSuffix(parts[3], ".json"), true
	case len(parts) == 5 && parts[2] == "namespaces":
		return parts[1], parts[3], strings.TrimSuffix(parts[4], ".json"), true
	}
	return "", "", "", false
}

func (a *Archive) matchManifest(objects []snapshot.Object) error {
	want := map[string]bool{}
	for _, o := range objects {
		want[objectKey(o.GroupResource(), o.Namespace, o.Name)] = true
	}
	var extra []string
	for gr, entries := range a.ByResource {
		for _, e := range entries {
			key := objectKey(gr, e.Namespace, e.Name)
			if !want[key] {
				extra = append(extra, key)
			}
			delete(want, key)
		}
	}
	if len(extra) > 0 || len(want) > 0 {
		var missing []string
		for k := range want {
			missing = append(missing, k)
		}
		return fmt.Errorf("the archive does not hold the manifest's objects (%d missing, e.g. %v; %d not in the manifest, e.g. %v): %w",
			len(missing), first(missing, 3), len(extra), first(extra, 3), snapshot.ErrCorrupt)
	}
	return nil
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }
