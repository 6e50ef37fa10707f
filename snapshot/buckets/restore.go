package buckets

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/tags"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/dynamic"
)

// kind names the buckets in reports.
const kind = "buckets"

// SHA256Metadata is the user metadata (x-amz-meta-ferry-sha256) a restore stores with each
// object: the SHA-256 of its bytes, so that a later restore learns from a HEAD that the object
// is already there as the backup holds it.
const SHA256Metadata = "Ferry-Sha256"

// targetClient reaches a backed-up bucket's store on the target cluster as the capture reached
// the source's: the configured endpoint, or a port-forward to a running pod of the workload in
// the mapped namespace, with the credentials of the Secret there; the bucket's target section
// over each of them.
func (c Copies) targetClient(ctx context.Context, r *snapshot.Reader, b snapshot.Bucket) (*minio.Client, func(), error) {
	var cfg config.Bucket
	found := false
	if p := r.Manifest.Plan; p != nil {
		cfg, found = p.Config.BucketNamed(b.Name)
	}
	if !found {
		return nil, nil, fmt.Errorf("the backup's configuration does not say where bucket %s is kept", b.Name)
	}
	cfg = cfg.OnTarget(c.Mapping.Namespace)
	item := plans.DataItem{Name: b.Name, Namespace: cfg.Namespace, Workload: cfg.Workload, Endpoint: cfg.Endpoint}
	if item.Endpoint == "" {
		dyn := c.dyn
		if dyn == nil {
			var err error
			if dyn, err = dynamic.NewForConfig(c.Config); err != nil {
				return nil, nil, err
			}
		}
		w, pod, err := plans.WaitForWorkloadPod(ctx, dyn, item.Namespace, cfg.Workload, plans.TargetPodWait)
		switch {
		case err != nil:
			return nil, nil, err
		case w == nil:
			return nil, nil, fmt.Errorf("no %s in namespace %s on the target", cfg.Workload, item.Namespace)
		case pod == nil:
			return nil, nil, fmt.Errorf("no running pod of %s in namespace %s on the target", cfg.Workload, item.Namespace)
		}
		item.Pod = pod.GetName()
	}
	return c.client(ctx, item, cfg)
}

// Restore puts every object of every backed-up bucket into the target's store, creating the
// bucket when it is missing (implements snapshot.Kind). Each object is checked against the
// manifest (size and SHA-256) as it streams, and an upload that does not match fails rather than
// store a wrong object. An object already there with the same size and SHA-256 is left untouched,
// so a second restore changes nothing. Objects the backup does not hold are left, unless Exact.
func (c Copies) Restore(ctx context.Context, r *snapshot.Reader, report *snapshot.Report) error {
	if c.Parallel <= 0 {
		c.Parallel = 8
	}
	report.AddNotInBackup(kind, r.Manifest, "bucket")
	for _, b := range r.Manifest.Buckets {
		err := c.restoreBucket(ctx, r, b, report)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			report.Add(kind, snapshot.StatusFailed, b.Name, fmt.Sprintf("%v; its %d objects were not restored", err, len(b.Objects)))
		}
	}
	return nil
}

// openBucket reaches the bucket's store on the target and says whether the bucket is there.
func (c Copies) openBucket(ctx context.Context, r *snapshot.Reader, b snapshot.Bucket) (mc *minio.Client, stop func(), exists bool, err error) {
	if mc, stop, err = c.targetClient(ctx, r, b); err != nil {
		return nil, nil, false, err
	}
	if exists, err = mc.BucketExists(ctx, b.Name); err != nil {
		stop()
		return nil, nil, false, fmt.Errorf("reach the store: %w", err)
	}
	return mc, stop, exists, nil
}

func (c Copies) restoreBucket(ctx context.Context, r *snapshot.Reader, b snapshot.Bucket, report *snapshot.Report) (err error) {
	mc, stop, exists, err := c.openBucket(ctx, r, b)
	if err != nil {
		return err
	}
	defer stop()
	meta, err := readMetadata(ctx, r, b)
	if err != nil {
		return err
	}
	want, err := readSettingsFile(ctx, r, b)
	if err != nil {
		return err
	}
	if !exists {
		// Object lock is given to a bucket only as it is made.
		opts := minio.MakeBucketOptions{ObjectLocking: want != nil && want.ObjectLock != nil}
		if err := mc.MakeBucket(ctx, b.Name, opts); err != nil && minio.ToErrorResponse(err).Code != minio.BucketAlreadyOwnedByYou {
			return fmt.Errorf("create the bucket: %w", err)
		}
	}
	if want != nil {
		if err := c.restoreSettings(ctx, mc, b.Name, *want, true, report); err != nil {
			return err
		}
		defer func() {
			if err != nil {
				return
			}
			if serr := c.restoreSettings(ctx, mc, b.Name, *want, false, report); ctx.Err() != nil {
				err = ctx.Err()
			} else if serr != nil {
				report.Add(kind, snapshot.StatusFailed, b.Name, fmt.Sprintf("its objects were restored, its policy, lifecycle and tags were not: %v", serr))
			}
		}()
	}
	var have map[string]int64
	err = c.retryBroken(ctx, b.Name, "listing the bucket", func() (err error) {
		have, err = listSizes(ctx, mc, b.Name)
		return err
	})
	if err != nil {
		return err
	}
	todo := decide(b.Objects, have, c.Exact)
	var failed atomic.Int64
	var encrypts storeEncrypts
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.Parallel)
	for _, o := range todo.put {
		g.Go(func() error {
			// An object is put whole, as a new version of its key: one whose connection broke
			// off (a port-forward's tunnel dropped) is put again.
			var status string
			err := c.retryBroken(gctx, b.Name+"/"+o.Key, "putting the object", func() (err error) {
				status, err = c.restoreObject(gctx, mc, r, b, o, meta, &encrypts)
				return err
			})
			if gctx.Err() != nil {
				return gctx.Err()
			}
			if err != nil {
				failed.Add(1)
				report.Add(kind, snapshot.StatusFailed, b.Name+"/"+o.Key, err.Error())
			} else {
				report.Count(kind, status)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return c.removeExtra(ctx, mc, b.Name, todo.remove, failed.Load(), report)
}

// removeExtra deletes the target's objects the backup does not hold (an exact restore's), once
// every object of the backup was put and checked: when some were not (a stored copy that failed
// its check), the bucket is not as the backup holds it, and its extra objects are left and listed
// as skipped.
func (c Copies) removeExtra(ctx context.Context, mc *minio.Client, bucket string, keys []string, failed int64, report *snapshot.Report) error {
	if failed > 0 {
		for _, key := range keys {
			report.Add(kind, snapshot.StatusSkipped, bucket+"/"+key,
				fmt.Sprintf("not in the backup, and not deleted: %d of the backup's objects of the bucket were not restored", failed))
		}
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.Parallel)
	for _, key := range keys {
		g.Go(func() error {
			if err := mc.RemoveObject(gctx, bucket, key, minio.RemoveObjectOptions{}); err != nil {
				if gctx.Err() != nil {
					return gctx.Err()
				}
				report.Add(kind, snapshot.StatusFailed, bucket+"/"+key, fmt.Sprintf("not in the backup, and could not be deleted: %v", err))
				return nil
			}
			report.Add(kind, snapshot.StatusDeleted, bucket+"/"+key, "not in the backup")
			return nil
		})
	}
	return g.Wait()
}

// put is an object of the backup to restore and what the target holds at its key.
type put struct {
	snapshot.BucketObject
	// present says the target has an object at the key; sameSize that it has the backup's size,
	// so it may already be the backup's object.
	present, sameSize bool
}

// work is what restoring a bucket does.
type work struct {
	put    []put
	remove []string // keys of the target's objects the backup does not hold (with Exact)
}

// decide compares the backup's objects with the sizes of the target's objects.
func decide(want []snapshot.BucketObject, have map[string]int64, prune bool) work {
	var w work
	backed := make(map[string]bool, len(want))
	for _, o := range want {
		backed[o.Key] = true
		size, ok := have[o.Key]
		w.put = append(w.put, put{BucketObject: o, present: ok, sameSize: ok && size == o.Size})
	}
	if prune {
		for key := range have {
			if !backed[key] {
				w.remove = append(w.remove, key)
			}
		}
	}
	return w
}

// restoreObject uploads an object unless the target already holds it with the same size,
// SHA-256 and metadata (meta: nil when the backup kept none), and returns the item's status. An
// object that differs only in its tags gets the backup's tags, not its bytes again: in a
// versioned bucket an upload would make a new version. An object whose tags the backup could not
// read keeps the target's tags: they are not compared, and an upload carries them over.
func (c Copies) restoreObject(ctx context.Context, mc *minio.Client, r *snapshot.Reader, b snapshot.Bucket, o put, meta map[string]objectMetadata, encrypts *storeEncrypts) (string, error) {
	var want *objectMetadata
	if meta != nil {
		m := meta[o.Key]
		want = &m
	}
	status := snapshot.StatusRestored
	if o.present {
		status = snapshot.StatusUpdated
	}
	if o.sameSize {
		same, err := sameOnTarget(ctx, mc, b, o.BucketObject, want)
		switch {
		case err != nil:
			return "", err
		case same == sameAll:
			return snapshot.StatusUnchanged, nil
		case same == sameButTags:
			return status, retag(ctx, mc, b.Name, o.Key, want.Tags)
		}
	}
	m := meta[o.Key]
	if m.TagsUnread {
		m.Tags = nil
		if o.present {
			var err error
			if m.Tags, err = objectTags(ctx, mc, b.Name, o.Key, -1); err != nil {
				return "", fmt.Errorf("the backup could not read the object's tags, and the target's, to keep them, cannot be read: %w", err)
			}
		}
	}
	if err := encrypts.before(m.ObjectMetadata); err != nil {
		return "", err
	}
	if err := upload(ctx, mc, r, b, o.BucketObject, m.ObjectMetadata); err != nil {
		return "", err
	}
	return status, encrypts.after(ctx, mc, b.Name, o.Key, m.ObjectMetadata)
}

// sameness is how much of a backup's object the target's holds.
type sameness int

const (
	notSame     sameness = iota
	sameButTags          // its bytes and metadata, not its tags
	sameAll
)

// sameOnTarget says whether the target's object has the backup's size and SHA-256 (by the
// digest a restore stored with it, or, for objects written otherwise, by hashing its bytes) and,
// when want is set, its metadata and tags.
func sameOnTarget(ctx context.Context, mc *minio.Client, b snapshot.Bucket, o snapshot.BucketObject, want *objectMetadata) (sameness, error) {
	bucket := b.Name
	info, err := mc.StatObject(ctx, bucket, o.Key, minio.StatObjectOptions{})
	if err != nil {
		return notSame, fmt.Errorf("look at the target's object: %w", err)
	}
	if info.Size != o.Size {
		return notSame, nil
	}
	same := sameAll
	if want != nil {
		got, err := targetMetadata(ctx, mc, b, o.Key, info, *want)
		if err != nil {
			return notSame, err
		}
		got = want.forComparing(b, got)
		if len(metadataDifferences(o.Key, want.ObjectMetadata, got)) > 0 {
			got.Tags = want.Tags
			if len(metadataDifferences(o.Key, want.ObjectMetadata, got)) > 0 {
				return notSame, nil
			}
			same = sameButTags
		}
	}
	for k, v := range info.UserMetadata {
		if strings.EqualFold(k, SHA256Metadata) {
			if v != o.SHA256 {
				return notSame, nil
			}
			return same, nil
		}
	}
	size, sum, err := hashObject(ctx, mc, bucket, o.Key)
	if err != nil || size != o.Size || sum != o.SHA256 {
		return notSame, err
	}
	return same, nil
}

// retag gives the target's object the backup's tags.
func retag(ctx context.Context, mc *minio.Client, bucket, key string, want map[string]string) error {
	if len(want) == 0 {
		if err := mc.RemoveObjectTagging(ctx, bucket, key, minio.RemoveObjectTaggingOptions{}); err != nil {
			return fmt.Errorf("remove the object's tags: %w", err)
		}
		return nil
	}
	t, err := tags.NewTags(want, true)
	if err == nil {
		err = mc.PutObjectTagging(ctx, bucket, key, t, minio.PutObjectTaggingOptions{})
	}
	if err != nil {
		return fmt.Errorf("put the object's tags: %w", err)
	}
	return nil
}

// hashObject reads a target's object and returns its size and SHA-256.
func hashObject(ctx context.Context, mc *minio.Client, bucket, key string) (int64, string, error) {
	obj, err := mc.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return 0, "", fmt.Errorf("read the target's object: %w", err)
	}
	defer obj.Close()
	h := sha256.New()
	n, err := io.Copy(h, obj)
	if err != nil {
		return 0, "", fmt.Errorf("read the target's object: %w", err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// storedName is the backup's file holding a bucket's object, as the capture named it: the name
// the manifest records for a key stored under its hash, else the escaped key. A recorded name
// that is not a hashed one is refused: a manifest never points outside its bucket's files.
func storedName(r *snapshot.Reader, b snapshot.Bucket, o snapshot.BucketObject) (string, error) {
	stored := o.Stored
	if stored == "" {
		stored = EscapeKey(o.Key)
	} else if !validHashed(stored) {
		return "", fmt.Errorf("the manifest stores the object under %.80q, not a hashed name: %w", stored, snapshot.ErrCorrupt)
	}
	name := b.Prefix + stored
	if r.Manifest.Encryption != nil {
		name += snapshot.EncryptedSuffix
	}
	return name, nil
}

// validHashed reports whether name is one StoredName makes for a long key.
func validHashed(name string) bool {
	sum, ok := strings.CutPrefix(name, hashedPrefix)
	if !ok || len(sum) != sha256.Size*2 {
		return false
	}
	_, err := hex.DecodeString(sum)
	return err == nil && strings.ToLower(sum) == sum
}

// upload streams an object from the backup into the target's store with its metadata, and its
// SHA-256 as user metadata. Nothing on the target is replaced before the backup's copy is checked
// against the manifest: the stream is checked as it goes, and its last bytes are handed to the
// upload only once it matches, so a wrong copy fails the upload before the store holds a whole
// object. An empty object's upload sends no body and so reads nothing: its copy is checked whole
// before the upload. A copy that fails its check leaves the target's object as it is; nothing is
// deleted for it.
func upload(ctx context.Context, mc *minio.Client, r *snapshot.Reader, b snapshot.Bucket, o snapshot.BucketObject, meta snapshot.ObjectMetadata) error {
	if o.Size < 0 {
		return fmt.Errorf("the manifest gives the object %d bytes: %w", o.Size, snapshot.ErrCorrupt)
	}
	name, err := storedName(r, b, o)
	if err != nil {
		return err
	}
	rc, err := r.Open(ctx, name)
	if err != nil {
		return err
	}
	defer rc.Close()
	v := newVerifying(rc, o)
	var body io.Reader = v
	if o.Size == 0 {
		if _, err := io.Copy(io.Discard, v); err != nil {
			return err
		}
		body = bytes.NewReader(nil)
	}
	opts, err := putOptions(meta, o.SHA256, time.Now())
	if err != nil {
		return err
	}
	if _, err := mc.PutObject(ctx, b.Name, o.Key, body, o.Size, opts); err != nil {
		if verr := v.failure(); verr != nil {
			return verr
		}
		locked := meta.Retention != nil || meta.LegalHold // a store without object lock answers NotImplemented too
		if c := code(err); meta.Encryption != nil && (c == "NotImplemented" && !locked || strings.HasPrefix(strings.ToLower(c), "kms")) {
			return fmt.Errorf("put: the target's store cannot keep it encrypted as the source's did (%s), and it is not put in clear: give the store a KMS (and that key): %w", encryptionText(meta.Encryption), err)
		}
		return fmt.Errorf("put: %w", err)
	}
	if !v.done {
		// An upload of a known size cannot end before its last byte was read, and that read
		// checks the copy: should one ever, the object is not taken back (that could delete
		// what the target held), and the item fails.
		if _, err := io.Copy(io.Discard, v); err != nil {
			return fmt.Errorf("%w; the upload ended before the copy was checked, and the object it stored was left", err)
		}
	}
	return nil
}

// verifying passes an object's bytes on while counting and hashing them. It holds back the end of
// the stream (returns the last bytes and io.EOF) until the size and SHA-256 match the manifest,
// and fails instead when they do not.
type verifying struct {
	src  io.Reader
	want snapshot.BucketObject
	h    hash.Hash
	n    int64
	err  error
	done bool
}

func newVerifying(src io.Reader, want snapshot.BucketObject) *verifying {
	return &verifying{src: src, want: want, h: sha256.New()}
}

func (v *verifying) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	if v.done {
		return 0, io.EOF
	}
	n, err := v.src.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, v.fail(fmt.Errorf("read the backup's copy: %w", err))
	}
	if v.n > v.want.Size {
		return 0, v.fail(fmt.Errorf("the backup's copy is longer than the %d bytes the manifest says: %w", v.want.Size, snapshot.ErrCorrupt))
	}
	if v.n < v.want.Size && err == nil {
		return n, nil
	}
	if err == nil { // as long as the manifest says: make sure it ends here
		var one [1]byte
		m, perr := io.ReadFull(v.src, one[:])
		if m > 0 {
			return 0, v.fail(fmt.Errorf("the backup's copy is longer than the %d bytes the manifest says: %w", v.want.Size, snapshot.ErrCorrupt))
		}
		if !errors.Is(perr, io.EOF) {
			return 0, v.fail(fmt.Errorf("read the backup's copy: %w", perr))
		}
	}
	if v.n != v.want.Size {
		return 0, v.fail(fmt.Errorf("the backup's copy holds %d bytes, the manifest says %d: %w", v.n, v.want.Size, snapshot.ErrCorrupt))
	}
	if sum := hex.EncodeToString(v.h.Sum(nil)); sum != v.want.SHA256 {
		return 0, v.fail(fmt.Errorf("the backup's copy has SHA-256 %s, the manifest says %s: %w", sum, v.want.SHA256, snapshot.ErrCorrupt))
	}
	v.done = true
	return n, io.EOF
}

func (v *verifying) fail(err error) error {
	v.err = err
	return err
}

func (v *verifying) failure() error { return v.err }

// listSizes lists a bucket of the target: each object's key and size.
func listSizes(ctx context.Context, mc *minio.Client, bucket string) (map[string]int64, error) {
	ctx, cancel := context.WithCancel(ctx) // ends the listing on an error
	defer cancel()
	out := map[string]int64{}
	for obj := range mc.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
		if obj.Err != nil {
			return nil, fmt.Errorf("list the target's bucket: %w", obj.Err)
		}
		out[obj.Key] = obj.Size
	}
	return out, nil
}
