package buckets

import (
	"context"
	"fmt"

	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/minio/minio-go/v7"
)

// listing is how a capture lists a bucket: every key, and with versions every version of each
// and every delete marker too. The copy and the count of the bucket's history list alike, so
// that the count is of the objects the copy holds the current versions of.
func listing(versions bool) minio.ListObjectsOptions {
	return minio.ListObjectsOptions{Recursive: true, WithVersions: versions}
}

// history is what a bucket that keeps versions holds beside its objects' current versions, which
// are all a backup copies.
type history struct {
	earlier int // noncurrent versions of objects, a deleted object's bytes among them
	markers int // delete markers, current or not
}

// add counts one entry of a listing with versions.
func (h *history) add(o minio.ObjectInfo) {
	switch {
	case o.IsDeleteMarker:
		h.markers++
	case !o.IsLatest:
		h.earlier++
	}
}

func (h history) empty() bool { return h.earlier == 0 && h.markers == 0 }

// String names the counts: "2 earlier versions and 1 delete marker".
func (h history) String() string {
	switch {
	case h.markers == 0:
		return plural(h.earlier, "earlier version")
	case h.earlier == 0:
		return plural(h.markers, "delete marker")
	}
	return plural(h.earlier, "earlier version") + " and " + plural(h.markers, "delete marker")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// historyItem is the name of a bucket's skipped item for the history its backup does not hold.
func historyItem(bucket string) string { return bucket + " earlier versions" }

// historyReason says why a backup lists a bucket's history as skipped and what to do:
// versioning is the bucket's status ("" when the store would not tell), refused the store's
// error code when it would not list the versions (h is then unknown).
func historyReason(versioning, refused string, h history) string {
	keeps := fmt.Sprintf("the bucket keeps versions of its objects (versioning %s)", versioning)
	if versioning == "" {
		keeps = "the bucket may keep versions of its objects (its versioning could not be read)"
	}
	const todo = "keep them with the store's own replication of versions, or set versions: current on the bucket in ferry.yaml to back up the current versions alone"
	if refused != "" {
		return fmt.Sprintf("%s and the store does not let them be listed (%s): the backup holds each object's current version only, and none of the earlier versions or delete markers the bucket may hold; let ferry's credentials list them (s3:ListBucketVersions) to have them counted, %s",
			keeps, refused, todo)
	}
	return fmt.Sprintf("%s and holds %s: the backup holds each object's current version only, so a restore brings none of them back; %s", keeps, h, todo)
}

// countHistory lists the bucket's versions once and counts its history, listing again from the
// start while its connection breaks off.
func (c Copies) countHistory(ctx context.Context, mc *minio.Client, bucket string) (history, error) {
	var h history
	err := c.retryBroken(ctx, bucket, "listing its versions", func() error {
		h = history{}
		ctx, cancel := context.WithCancel(ctx) // ends the listing when it fails
		defer cancel()
		for o := range mc.ListObjects(ctx, bucket, listing(true)) {
			if o.Err != nil {
				return o.Err
			}
			h.add(o)
		}
		return nil
	})
	return h, err
}

// storeHistory counts the earlier versions and delete markers of a bucket that keeps versions
// (versioning is its status, "" when the store would not tell) and lists them as one skipped
// item: the backup holds each object's current version only. A bucket whose configuration says
// versions: current has them logged only.
func (c Copies) storeHistory(ctx context.Context, w *snapshot.Writer, mc *minio.Client, bucket, versioning string) error {
	h, err := c.countHistory(ctx, mc, bucket)
	refused := code(err)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil && refused == "":
		return fmt.Errorf("count its earlier versions: %w", err)
	case err == nil && h.empty():
		return nil
	}
	current := c.config(bucket).Versions == config.VersionsCurrent
	args := []any{"bucket", bucket, "versioning", or(versioning, "unread")}
	if err != nil {
		args = append(args, "code", refused)
	} else {
		args = append(args, "earlierVersions", h.earlier, "deleteMarkers", h.markers)
	}
	if current {
		args = append(args, "versions", config.VersionsCurrent)
	}
	if err != nil {
		c.warn("the bucket keeps versions of its objects, and the store does not let them be listed: the backup holds each object's current version, not its earlier versions or delete markers", args...)
	} else {
		c.warn("the bucket keeps versions of its objects: the backup holds each object's current version, not its earlier versions or delete markers", args...)
	}
	if !current {
		w.Skip("bucket", historyItem(bucket), historyReason(versioning, refused, h))
	}
	return nil
}
