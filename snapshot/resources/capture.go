package resources

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path"
	"sort"
	"time"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/rules"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/klauspost/compress/gzip"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// FormatVersion is the Velero archive format ferry writes.
const FormatVersion = "1.1.0"

// Objects lists the plan's resource types on the live cluster and writes every object that moves
// into the backup, as a Velero archive (<name>.tar.gz) and resource list, recording the digest of
// each object's file in the manifest.
type Objects struct {
	Dynamic     dynamic.Interface
	Plan        *plans.Plan
	Concurrency int   // resource types listed at once (default 8); objects applied at once (default 32)
	PageSize    int64 // LIST page size (default 500)

	// Restore and verify.
	Mapping snapshot.Mapping
	// Existing is what to do with an object already on the target that differs from the backup:
	// ExistingSkip (default), ExistingUpdate, ExistingReplace or ExistingFail.
	Existing string
	// Exact makes restore and verify also count what an object on the target holds that the
	// backup's lacks as a difference (a carry-back, where blue must hold exactly green's objects).
	Exact bool
	// SkipOwned leaves objects with a controlling owner to the target's controllers.
	SkipOwned bool
	// Upgrade restores and verifies a backup made for an upgrade onto a target that runs the
	// platform's new release: what its plan leaves to that release or behind on the source is
	// left out (plans.Placement), and the target's CRDs are never changed.
	Upgrade bool
	// Select, when set, restores only what it selects (--include/--exclude).
	Select *plans.Filter
	// Mapper finds owners that are not in the backup on the target.
	Mapper meta.RESTMapper
	// WaitTimeout bounds waiting for CRDs to be Established and workloads to become healthy
	// (default 2 minutes).
	WaitTimeout time.Duration
	// AwaitAdmission lists an object an admission webhook refuses because its server cannot be
	// called as awaiting (snapshot.StatusAwaiting), not failed: the target's writers are stopped
	// (a carry-back's blue, an upgrade's green), and one of them may be that server (Katib's
	// controller admits every Experiment).
	AwaitAdmission bool
	// AdmissionWait makes a create or change again while an admission webhook's server cannot be
	// called, for up to this long: the writers were started moments before.
	AdmissionWait time.Duration
	// Only, when set, restores and verifies only the objects it names (as reports name them on
	// the target): those a restore left awaiting the target's writers.
	Only []string
	Log  *slog.Logger

	// digest makes the manifest's digest of a listed object stored as data and names its
	// scheme; set while a backup captures, nil when objects are only listed (Live).
	digest func(gr string, data []byte) (digest, scheme string, err error)
	// placement is the upgrade plan's, set from the plan when Upgrade is (forUpgrade).
	placement *plans.Placement
	// velero is set when the backup restored or verified is Velero's (see clusterOwn).
	velero bool
}

type item struct {
	paths []string
	data  []byte
	obj   snapshot.Object
}

// Name implements snapshot.Kind.
func (c Objects) Name() string { return "objects" }

// Capture implements snapshot.Kind.
func (c Objects) Capture(ctx context.Context, w *snapshot.Writer) error {
	c = c.listDefaults()
	filter, err := plans.NewFilter(c.Plan.Config)
	if err != nil {
		return err
	}
	var key []byte
	for _, r := range c.Plan.Resources {
		if rules.For(r.GroupResource()).Secret {
			// Stored before the archive, so that a backup never records a keyed digest without it.
			if key, err = w.DigestKey(ctx); err != nil {
				return err
			}
			break
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	pr, pw := io.Pipe()
	uploaded := make(chan error, 1)
	go func() {
		_, err := w.Put(ctx, w.Name()+".tar.gz", pr)
		pr.CloseWithError(err) // unblock the writer if the upload failed
		uploaded <- err
	}()

	items := make(chan item, 256)
	c.digest = func(gr string, data []byte) (string, string, error) { return FileDigest(gr, data, key) }
	listed := c.listAll(ctx, filter, items)

	bytesTotal, resourceList, objects, writeErr := writeArchive(pw, items)
	if writeErr != nil {
		cancel()
		for range items { // let the listers finish
		}
	}
	listErr := <-listed
	err = firstErr(writeErr, listErr)
	pw.CloseWithError(err)
	if upErr := <-uploaded; err == nil {
		err = upErr
	}
	if err != nil {
		return err
	}
	w.AddObjects(objects, bytesTotal)

	data, err := gzipJSON(resourceList)
	if err != nil {
		return err
	}
	_, err = w.Put(ctx, w.Name()+"-resource-list.json.gz", bytes.NewReader(data))
	return err
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// listDefaults are the defaults of listing: 8 resource types at once, pages of 500.
func (c Objects) listDefaults() Objects {
	if c.Concurrency <= 0 {
		c.Concurrency = 8
	}
	if c.PageSize <= 0 {
		c.PageSize = 500
	}
	return c
}

// listAll lists the plan's resource types, Concurrency lists at once, into items, which it closes
// when all are listed; the channel it returns then yields the first error. A namespaced type is
// listed in each namespace the selection names, when it names them (plans.Filter.Namespaces).
func (c Objects) listAll(ctx context.Context, filter *plans.Filter, items chan<- item) <-chan error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.Concurrency)
	listed := make(chan error, 1)
	named := filter.Namespaces()
	go func() {
		for _, r := range c.Plan.Resources {
			for _, ns := range listScopes(r, named) {
				g.Go(func() error { return c.listResource(gctx, filter, r, ns, items) })
			}
		}
		listed <- g.Wait()
		close(items)
	}()
	return listed
}

// listScopes are the namespaces to list a type in: the selection's named ones, or "" (the whole
// cluster) for a cluster-scoped type or a selection that names no namespace (named nil).
func listScopes(r plans.Resource, named []string) []string {
	if r.Namespaced && named != nil {
		return named
	}
	return []string{""}
}

func (c Objects) listResource(ctx context.Context, filter *plans.Filter, r plans.Resource, namespace string, items chan<- item) error {
	gvr := schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource}
	gr := r.GroupResource()
	err := kube.EachObject(ctx, c.Dynamic, gvr, namespace, c.PageSize, func(obj *unstructured.Unstructured) error {
		if filter.Reason(r, obj) != "" {
			return nil
		}
		if capture := rules.For(gr).Capture; capture != nil {
			capture(obj.Object)
		}
		// The list's items carry no kind; Velero's reader needs it.
		obj.SetAPIVersion(gvr.GroupVersion().String())
		obj.SetKind(r.Kind)
		data, err := json.Marshal(obj.Object)
		if err != nil {
			return err
		}
		var digest, scheme string
		if c.digest != nil {
			if digest, scheme, err = c.digest(gr, data); err != nil {
				return fmt.Errorf("digest of %s %s/%s: %w", gr, obj.GetNamespace(), obj.GetName(), err)
			}
		}
		scope := "cluster"
		if r.Namespaced {
			scope = path.Join("namespaces", obj.GetNamespace())
		}
		file := obj.GetName() + ".json"
		it := item{
			paths: []string{
				path.Join("resources", gr, scope, file),
				path.Join("resources", gr, r.Version+velerov1.PreferredVersionDir, scope, file),
			},
			data: data,
			obj:  snapshot.Object{Group: r.Group, Version: r.Version, Kind: r.Kind, Resource: r.Resource, Namespace: obj.GetNamespace(), Name: obj.GetName(), SHA256: digest, Digest: scheme},
		}
		select {
		case items <- it:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	if err != nil && namespace != "" {
		return fmt.Errorf("list %s in namespace %s: %w", gr, namespace, err)
	} else if err != nil {
		return fmt.Errorf("list %s: %w", gr, err)
	}
	return nil
}

// writeArchive writes Velero's tar layout (regular files, mode 0755, metadata/version first).
func writeArchive(out io.Writer, items <-chan item) (size int64, resourceList map[string][]string, objects []snapshot.Object, err error) {
	gz := gzip.NewWriter(out)
	tw := tar.NewWriter(gz)
	now := time.Now()
	add := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(data)), ModTime: now}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	resourceList = map[string][]string{}
	if err := add("metadata/version", []byte(FormatVersion+"\n")); err != nil {
		return 0, nil, nil, err
	}
	for it := range items {
		for _, p := range it.paths {
			if err := add(p, it.data); err != nil {
				return 0, nil, nil, err
			}
		}
		size += int64(len(it.data))
		objects = append(objects, it.obj)
		key := it.obj.Version + "/" + it.obj.Kind
		if it.obj.Group != "" {
			key = it.obj.Group + "/" + key
		}
		id := it.obj.Name
		if it.obj.Namespace != "" {
			id = it.obj.Namespace + "/" + id
		}
		resourceList[key] = append(resourceList[key], id)
	}
	if err := tw.Close(); err != nil {
		return 0, nil, nil, err
	}
	if err := gz.Close(); err != nil {
		return 0, nil, nil, err
	}
	for _, ids := range resourceList {
		sort.Strings(ids)
	}
	return size, resourceList, objects, nil
}

func gzipJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	if err := json.NewEncoder(gz).Encode(v); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// VeleroBackup is velero-backup.json for a completed backup, so that Velero lists and restores it.
func VeleroBackup(name string, plan *plans.Plan, items int, started, completed time.Time, labels map[string]string) ([]byte, error) {
	b := velerov1.Backup{
		TypeMeta:   metav1.TypeMeta{APIVersion: velerov1.SchemeGroupVersion.String(), Kind: "Backup"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "velero", Labels: labels},
		Spec: velerov1.BackupSpec{
			IncludedNamespaces: plan.Config.Include.Namespaces,
			ExcludedNamespaces: plan.Config.Exclude.Namespaces,
			IncludedResources:  plan.Config.Include.Resources,
			ExcludedResources:  plan.Config.Exclude.Resources,
		},
		Status: velerov1.BackupStatus{
			Version: 1, FormatVersion: FormatVersion, Phase: velerov1.BackupPhaseCompleted,
			StartTimestamp: &metav1.Time{Time: started.UTC()}, CompletionTimestamp: &metav1.Time{Time: completed.UTC()},
			Progress: &velerov1.BackupProgress{TotalItems: items, ItemsBackedUp: items},
		},
	}
	return json.MarshalIndent(b, "", "  ")
}
