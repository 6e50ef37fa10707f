// Package buckets copies the platform's own S3 buckets (Kubeflow's MinIO artifact store) into the
// backup with minio-go, reaching the store through a port-forward to its pod or a direct endpoint,
// and records each object's key, size and SHA-256.
package buckets

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Copies copies the plan's buckets, and restores and verifies a backup's buckets on a target.
type Copies struct {
	Config *rest.Config
	Client kubernetes.Interface
	Plan   *plans.Plan
	// Parallel is how many objects are copied at once (default 8).
	Parallel int
	// Mapping renames namespaces on a restore's target: a store reached through a workload is
	// found there in the mapped namespace.
	Mapping snapshot.Mapping
	// Exact makes a restore delete the target's objects that the backup does not hold, leaving
	// each bucket as it was backed up (to carry data back); by default they are left alone. They
	// are deleted only once every object of the backup's bucket was put and checked: otherwise
	// they are left, and listed as skipped.
	Exact bool
	// Log takes the warnings of a copy that goes on (nil: none are logged).
	Log *slog.Logger
	// Storage is the backup's storage: a capture copies there, from the newest earlier backup of
	// the same store, the objects the store lists as that backup recorded them (unencrypted
	// backups only). Nil copies every object from the store.
	Storage storage.Backend

	dyn dynamic.Interface // made from Config when nil (tests set it)
}

// retryBroken runs f, a whole object's copy, put or read, again while its connection breaks off
// in transit (kube.RetryBroken); what names it in the warning.
func (c Copies) retryBroken(ctx context.Context, object, what string, f func() error) error {
	return kube.RetryBroken(ctx, f, func(attempt int, err error) {
		c.warn("the bucket's connection broke off; "+what+" again", "object", object, "attempt", attempt, "error", err)
	})
}

func (c Copies) warn(msg string, args ...any) {
	if c.Log != nil {
		c.Log.Warn(msg, args...)
	}
}

// bucketPrefix is where a backup stores a bucket's objects.
func bucketPrefix(bucket string) string { return "buckets/" + bucket + "/" }

// Name implements snapshot.Kind.
func (c Copies) Name() string { return "buckets" }

// Capture copies every bucket the plan found (implements snapshot.Kind); a bucket that cannot be
// reached fails the backup.
func (c Copies) Capture(ctx context.Context, w *snapshot.Writer) error {
	if c.Parallel <= 0 {
		c.Parallel = 8
	}
	var previous []snapshot.Previous
	if c.Storage != nil && len(c.Plan.Buckets) > 0 {
		previous = w.Recent(ctx)
	}
	for _, item := range c.Plan.Buckets {
		if !item.Found {
			continue
		}
		cfg := c.config(item.Name)
		if item.Endpoint == "" && item.Pod == "" {
			w.Skip("bucket", item.Name, fmt.Sprintf("no running pod of %s in %s to reach the store through", item.Workload, item.Namespace))
			continue
		}
		entry, err := c.copyBucket(ctx, w, item, cfg, c.earlierCopy(ctx, c.Storage, previous, item))
		if err != nil {
			return fmt.Errorf("bucket %s: %w", item.Name, err)
		}
		if entry.Reused > 0 && c.Log != nil {
			c.Log.Info("bucket objects unchanged since an earlier backup were copied in the storage", "bucket", item.Name,
				"objects", len(entry.Objects), "unchanged", entry.Reused, "unchangedBytes", entry.ReusedBytes, "from", entry.ReusedFrom)
		}
		w.AddBucket(entry)
	}
	return nil
}

func (c Copies) config(name string) config.Bucket {
	b, _ := c.Plan.Config.BucketNamed(name)
	return b
}

func (c Copies) client(ctx context.Context, item plans.DataItem, cfg config.Bucket) (*minio.Client, func(), error) {
	var accessKey, secretKey string
	if cfg.Secret != nil {
		s, err := c.Client.CoreV1().Secrets(item.Namespace).Get(ctx, cfg.Secret.Name, metav1.GetOptions{})
		if err != nil {
			return nil, nil, fmt.Errorf("credentials: %w", err)
		}
		accessKey, secretKey = string(s.Data[cfg.Secret.AccessKey]), string(s.Data[cfg.Secret.SecretKey])
	}
	host, secure, stop := "", false, func() {}
	if item.Endpoint != "" {
		u, err := url.Parse(item.Endpoint)
		if err != nil {
			return nil, nil, fmt.Errorf("endpoint %q: %w", item.Endpoint, err)
		}
		host, secure = u.Host, u.Scheme == "https"
	} else {
		addr, stopForward, err := kube.PortForward(ctx, c.Config, c.Client, item.Namespace, item.Pod, cfg.Port)
		if err != nil {
			return nil, nil, err
		}
		host, stop = addr, stopForward
	}
	mc, err := minio.New(host, &minio.Options{Creds: credentials.NewStaticV4(accessKey, secretKey, ""), Secure: secure})
	if err != nil {
		stop()
		return nil, nil, err
	}
	return mc, stop, nil
}

// copyBucket copies the bucket's objects into the backup; those the store lists as before copied
// in the storage from before, when it is not nil.
func (c Copies) copyBucket(ctx context.Context, w *snapshot.Writer, item plans.DataItem, cfg config.Bucket, before *earlier) (snapshot.Bucket, error) {
	entry := snapshot.Bucket{Name: item.Name, Prefix: bucketPrefix(item.Name)}
	mc, stop, err := c.client(ctx, item, cfg)
	if err != nil {
		return entry, err
	}
	defer stop()
	if ok, err := mc.BucketExists(ctx, item.Name); err != nil {
		return entry, fmt.Errorf("reach the store: %w", err)
	} else if !ok {
		return entry, fmt.Errorf("the store has no bucket %s", item.Name)
	}
	ctx, cancel := context.WithCancel(ctx) // also ends the listing if a copy fails
	defer cancel()
	var mu sync.Mutex
	meta := map[string]objectMetadata{}
	tags := &tagReader{c: c, mc: mc, bucket: item.Name}
	// A store that does not say whether the bucket has object lock (but for one without it) may
	// have it: its objects' locks are read.
	var lock snapshot.BucketSettings
	err = readObjectLock(ctx, mc, item.Name, &lock)
	tags.locked = lock.ObjectLock != nil || err != nil && code(err) != "NotImplemented"
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.Parallel)
	for obj := range mc.ListObjects(gctx, item.Name, listing(false)) {
		if obj.Err != nil {
			g.Wait()
			return entry, fmt.Errorf("list: %w", obj.Err)
		}
		g.Go(func() error {
			o, m, reused, err := c.copyListed(gctx, w, mc, tags, entry.Prefix, obj, before)
			if errors.Is(err, errDeletedSinceListed) {
				// A live store (a scheduled backup, a warm run's round) deletes objects while
				// they are copied: the backup holds the bucket as it was read.
				c.warn("the object was deleted after the bucket was listed: the backup does not hold it", "object", item.Name+"/"+obj.Key)
				return nil
			}
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			if !isZero(m.ObjectMetadata) || m.TagsUnread {
				meta[o.Key] = m
			}
			entry.Objects = append(entry.Objects, o)
			entry.Bytes += o.Size
			if reused {
				entry.Reused++
				entry.ReusedBytes += o.Size
				entry.ReusedFrom = before.backup
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return entry, err
	}
	if refusal := tags.refused.Load(); refusal != nil {
		w.Skip("bucket", item.Name+" object tags", fmt.Sprintf("the store does not let the objects' tags be read (%s): the backup holds those objects without them, and a restore leaves the target's tags of those objects as they are", *refusal))
	}
	entry.Locks, entry.EncryptionRead = true, true
	if lock.ObjectLock != nil && len(entry.Objects) > 0 {
		if refusal := lockRefusal(ctx, mc, item.Name, entry.Objects[0].Key); refusal != "" {
			entry.Locks = false
			w.Skip("bucket", item.Name+" object locks", fmt.Sprintf("the store does not let the objects' locks be read (%s): the backup holds those objects without their retention and legal hold, and a restore leaves the target's as they are", refusal))
		}
	}
	if err := c.storeSettings(ctx, w, mc, &entry); err != nil {
		return entry, err
	}
	return entry, storeMetadata(ctx, w, &entry, meta)
}

// copyListed backs up one listed object: copied in the storage from the earlier backup before
// when the store lists it as that backup recorded it (reused), read from the store otherwise.
func (c Copies) copyListed(ctx context.Context, w *snapshot.Writer, mc *minio.Client, tags *tagReader, prefix string, listed minio.ObjectInfo, before *earlier) (snapshot.BucketObject, objectMetadata, bool, error) {
	bucket := tags.bucket
	if old, ok := before.unchanged(listed); ok {
		err := w.CopyStream(ctx, before.backup, old.stream)
		if err == nil {
			// Tags and locks change without the object's bytes, ETag or time: read again.
			meta := old.meta
			if meta.Tags, meta.TagsUnread, err = tags.read(ctx, listed.Key, -1); err == nil {
				meta.Retention, meta.LegalHold, err = tags.lock(ctx, listed.Key, old.meta)
			}
			return old.object, meta, true, err
		}
		if ctx.Err() != nil {
			return old.object, old.meta, false, err
		}
		c.warn("the object did not change since the backup before, but its file there could not be copied: reading it from the store", "object", bucket+"/"+listed.Key, "backup", before.backup, "error", err)
	}
	var obj snapshot.BucketObject
	var info minio.ObjectInfo
	var contentMD5 string
	// An object is copied whole, into a file written anew: one whose connection broke off (a
	// port-forward's tunnel dropped) is copied again.
	err := c.retryBroken(ctx, bucket+"/"+listed.Key, "copying the object", func() (err error) {
		obj, info, contentMD5, err = copyObject(ctx, w, mc, bucket, prefix, listed.Key)
		return err
	})
	if err != nil {
		return obj, objectMetadata{}, false, err
	}
	if !w.Encrypted() { // nothing is copied from an encrypted backup
		recordVersion(&obj, listed, info, contentMD5)
	}
	meta := objectMetadata{ObjectMetadata: metadataOf(info)}
	meta.Tags, meta.TagsUnread, err = tags.read(ctx, listed.Key, info.UserTagCount)
	return obj, meta, false, err
}

// tagReader reads the objects' tags of a bucket for a capture, each again while its connection
// breaks off or the store answers that it is busy (SlowDown, InternalError, a 5xx), and remembers
// a store that refuses them (no permission): the capture goes on without those tags, records them
// as unread, and says so. In a bucket with object lock (locked) it reads the locks of objects
// an earlier backup holds too, which change without their bytes as tags do.
type tagReader struct {
	c       Copies
	mc      *minio.Client
	bucket  string
	locked  bool
	refused atomic.Pointer[string] // the store's error code
}

// lockRefusal asks the store for an object's retention and legal hold: a store gives an object's
// lock with its GET only to a caller allowed to read it, and nothing otherwise. It returns the
// store's error code when it refuses them, or "".
func lockRefusal(ctx context.Context, mc *minio.Client, bucket, key string) string {
	refused := func(err error) string {
		switch c := code(err); {
		case c == "" || busy(err) || c == "NoSuchObjectLockConfiguration" || c == "NoSuchKey":
			return "" // read, none, busy (not a refusal) or deleted since
		default:
			return c
		}
	}
	_, _, err := mc.GetObjectRetention(ctx, bucket, key, "")
	if c := refused(err); c != "" {
		return c
	}
	_, err = mc.GetObjectLegalHold(ctx, bucket, key, minio.GetObjectLegalHoldOptions{})
	return refused(err)
}

// lock returns the retention and legal hold of an object an earlier backup holds (as old): read
// again in a locked bucket, old's elsewhere.
func (t *tagReader) lock(ctx context.Context, key string, old objectMetadata) (*snapshot.ObjectRetention, bool, error) {
	if !t.locked {
		return old.Retention, old.LegalHold, nil
	}
	var info minio.ObjectInfo
	err := t.ask(ctx, key, "the object's lock", func() (err error) {
		info, err = t.mc.StatObject(ctx, t.bucket, key, minio.StatObjectOptions{})
		return err
	})
	if code(err) == "NoSuchKey" {
		return old.Retention, old.LegalHold, nil // deleted since it was listed: held as it was read
	}
	if err != nil {
		return nil, false, fmt.Errorf("read the lock of %s: %w", key, err)
	}
	m := metadataOf(info)
	return m.Retention, m.LegalHold, nil
}

// ask runs f, reading what of object key, again while its connection breaks off or the store is
// busy.
func (t *tagReader) ask(ctx context.Context, key, what string, f func() error) error {
	object := t.bucket + "/" + key
	return retryBusy(ctx, func() error {
		return t.c.retryBroken(ctx, object, "reading "+what, f)
	}, func(attempt int, err error) {
		t.c.warn("the store is busy; reading "+what+" again", "object", object, "attempt", attempt, "code", code(err))
	})
}

// read returns an object's tags, or unread when the store refuses to give them.
func (t *tagReader) read(ctx context.Context, key string, count int) (tags map[string]string, unread bool, err error) {
	err = t.ask(ctx, key, "the object's tags", func() (err error) {
		tags, err = objectTags(ctx, t.mc, t.bucket, key, count)
		return err
	})
	if refusal := code(err); refusal != "" && !busy(err) && ctx.Err() == nil {
		t.refused.CompareAndSwap(nil, &refusal)
		return nil, true, nil
	}
	return tags, false, err
}

// errDeletedSinceListed is the error of an object the store listed and then no longer had.
var errDeletedSinceListed = errors.New("deleted since the bucket was listed")

// copyObject stores the bucket's object key in the backup under prefix, and returns its entry
// and what the store says of it.
// The MD5 of its bytes comes back too: it tells whether the store's ETag is of the content.
func copyObject(ctx context.Context, w *snapshot.Writer, mc *minio.Client, bucket, prefix, key string) (snapshot.BucketObject, minio.ObjectInfo, string, error) {
	o, err := mc.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return snapshot.BucketObject{}, minio.ObjectInfo{}, "", fmt.Errorf("get %s: %w", key, err)
	}
	defer o.Close()
	info, err := o.Stat()
	if minio.ToErrorResponse(err).Code == "NoSuchKey" {
		return snapshot.BucketObject{}, info, "", fmt.Errorf("get %s: %w", key, errDeletedSinceListed)
	}
	if err != nil {
		return snapshot.BucketObject{}, info, "", fmt.Errorf("get %s: %w", key, err)
	}
	h, sum := sha256.New(), md5.New()
	var n countWriter
	stored, hashed := StoredName(key)
	if _, err := w.Put(ctx, prefix+stored, io.TeeReader(o, io.MultiWriter(h, sum, &n))); err != nil {
		return snapshot.BucketObject{}, info, "", fmt.Errorf("copy %s: %w", key, err)
	}
	obj := snapshot.BucketObject{Key: key, Size: n.n, SHA256: hex.EncodeToString(h.Sum(nil))}
	if hashed {
		obj.Stored = stored
	}
	return obj, info, hex.EncodeToString(sum.Sum(nil)), nil
}

// EscapeKey turns an S3 key, which may hold any characters, into a clean relative path for the
// backup: each segment path-escaped, and empty, "." and ".." segments encoded.
func EscapeKey(key string) string {
	parts := strings.Split(key, "/")
	for i, p := range parts {
		switch p {
		case "":
			parts[i] = "%00"
		case ".", "..":
			parts[i] = strings.ReplaceAll(p, ".", "%2E")
		default:
			parts[i] = strings.ReplaceAll(url.PathEscape(p), ".ferry-tmp-", "%2Eferry-tmp-")
		}
	}
	return strings.Join(parts, "/")
}

// hashedPrefix starts the stored name of a key too long once escaped. EscapeKey never makes it: a
// "%" it writes is always followed by two hex digits.
const hashedPrefix = "%hashed/"

// StoredName is the name under a bucket's prefix that a backup stores the object of key under:
// its escaped key (EscapeKey), or, when that would be longer than a file name or a storage key
// may be (an escaped key can triple in length), the SHA-256 of the key, with hashed true; the
// manifest then records the name beside the original key.
func StoredName(key string) (name string, hashed bool) {
	escaped := EscapeKey(key)
	long := len(escaped) > snapshot.MaxStoredName
	for _, seg := range strings.Split(escaped, "/") {
		long = long || len(seg) > snapshot.MaxStoredSegment
	}
	if !long {
		return escaped, false
	}
	sum := sha256.Sum256([]byte(key))
	return hashedPrefix + hex.EncodeToString(sum[:]), true
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }
