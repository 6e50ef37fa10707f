package buckets

import (
	"context"
	"regexp"
	"time"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"github.com/minio/minio-go/v7"
)

// earlier is a bucket as an earlier backup copied it: what of it a capture may copy in the
// storage instead of reading the store again.
type earlier struct {
	backup  string
	objects map[string]earlierObject
}

type earlierObject struct {
	object snapshot.BucketObject
	stream snapshot.Stream
	meta   objectMetadata
}

// earlierCopy finds the newest of previous that copied item from the same store (the same
// cluster, by its kube-system namespace's UID, and the same workload or endpoint) and recorded
// its objects' ETags and how they are encrypted; nil when none did, or when its objects' metadata
// cannot be read.
func (c Copies) earlierCopy(ctx context.Context, store storage.Backend, previous []snapshot.Previous, item plans.DataItem) *earlier {
backups:
	for _, p := range previous {
		m := p.Manifest
		if !c.Plan.Source.Same(m.Source) || m.Plan == nil || !sameStore(m.Plan.Buckets, item) {
			continue
		}
		for _, b := range m.Buckets {
			if b.Name != item.Name || b.Prefix != bucketPrefix(item.Name) {
				continue
			}
			if !b.EncryptionRead {
				continue backups // an older ferry's, which did not read how its objects are encrypted
			}
			streams := map[string]snapshot.Stream{}
			for _, s := range m.Streams {
				streams[s.Key] = s
			}
			var meta map[string]objectMetadata
			if b.Metadata != "" {
				r, err := snapshot.Open(ctx, store, p.Name, nil)
				if err == nil {
					meta, err = readMetadata(ctx, r, b)
				}
				if err != nil {
					c.warn("the bucket's earlier backup cannot be read: copying every object", "bucket", item.Name, "backup", p.Name, "error", err)
					return nil
				}
			}
			e := &earlier{backup: p.Name, objects: map[string]earlierObject{}}
			for _, o := range b.Objects {
				stored, _ := StoredName(o.Key)
				s, ok := streams[b.Prefix+stored]
				// Only what the manifest holds consistently: a stored file of the object's
				// bytes (buckets' objects are stored as they are), with the store's ETag.
				if !ok || o.ETag == "" || o.Modified.IsZero() || s.Bytes != o.Size || s.SHA256 != o.SHA256 {
					continue
				}
				e.objects[o.Key] = earlierObject{object: o, stream: s, meta: meta[o.Key]}
			}
			return e
		}
	}
	return nil
}

// sameStore says whether an earlier plan's bucket of item's name was reached as item is.
func sameStore(buckets []plans.DataItem, item plans.DataItem) bool {
	for _, b := range buckets {
		if b.Name == item.Name {
			return b.Namespace == item.Namespace && b.Workload == item.Workload && b.Endpoint == item.Endpoint
		}
	}
	return false
}

// unchanged is the earlier copy of the listed object when the store lists it as that copy
// recorded it: the same size, ETag and time.
func (e *earlier) unchanged(obj minio.ObjectInfo) (earlierObject, bool) {
	if e == nil {
		return earlierObject{}, false
	}
	o, ok := e.objects[obj.Key]
	if !ok || o.object.Size != obj.Size || o.object.ETag != obj.ETag || !o.object.Modified.Equal(obj.LastModified) {
		return earlierObject{}, false
	}
	return o, true
}

// recordVersion notes in obj the listed object's ETag and time, when the object read is that one
// and its ETag is of its content: the MD5 of the bytes read (contentMD5), or a multipart upload's
// (the MD5 of its parts' MD5s, then "-" and their number), as S3 and MinIO make them. A later
// backup then copies it while the store lists it so. A store whose ETags are something else (of
// the time, of an encryption) has its objects read every time. The time of a read is whole
// seconds (an HTTP date); the listing's may be finer.
func recordVersion(obj *snapshot.BucketObject, listed, read minio.ObjectInfo, contentMD5 string) {
	if listed.ETag == "" || read.ETag != listed.ETag || !read.LastModified.Equal(listed.LastModified.Truncate(time.Second)) {
		return
	}
	if listed.ETag != contentMD5 && !multipartETag.MatchString(listed.ETag) {
		return
	}
	obj.ETag, obj.Modified = listed.ETag, listed.LastModified.UTC()
}

// multipartETag is the form of a multipart upload's ETag.
var multipartETag = regexp.MustCompile(`^[0-9a-f]{32}-[0-9]+$`)
