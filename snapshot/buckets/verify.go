package buckets

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ferrykube/ferry/snapshot"
	"github.com/minio/minio-go/v7"
	"golang.org/x/sync/errgroup"
)

// Verify reads every backed-up object back from the target's store and compares its size and
// SHA-256, hashed from its bytes (ETags and stored metadata are not trusted), and its metadata
// (content type and the like, user metadata) with the backup (implements snapshot.Kind). Missing and different objects are listed as "bucket/key", and so
// are the target's objects the backup does not hold; identical objects are counted.
func (c Copies) Verify(ctx context.Context, r *snapshot.Reader, report *snapshot.Report) error {
	if c.Parallel <= 0 {
		c.Parallel = 8
	}
	for _, b := range r.Manifest.Buckets {
		err := c.verifyBucket(ctx, r, b, report)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			report.Add(kind, snapshot.StatusFailed, b.Name, fmt.Sprintf("cannot verify its %d objects: %v", len(b.Objects), err))
		}
	}
	return nil
}

func (c Copies) verifyBucket(ctx context.Context, r *snapshot.Reader, b snapshot.Bucket, report *snapshot.Report) error {
	mc, stop, exists, err := c.openBucket(ctx, r, b)
	if err != nil {
		return err
	}
	defer stop()
	if !exists {
		report.Add(kind, snapshot.StatusMissing, b.Name, fmt.Sprintf("the bucket is not on the target (the backup holds %d objects)", len(b.Objects)))
		return nil
	}
	meta, err := readMetadata(ctx, r, b)
	if err != nil {
		return err
	}
	if err := c.verifySettings(ctx, r, mc, b, report); err != nil {
		return err
	}
	var have map[string]int64
	err = c.retryBroken(ctx, b.Name, "listing the bucket", func() (err error) {
		have, err = listSizes(ctx, mc, b.Name)
		return err
	})
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.Parallel)
	for _, o := range b.Objects {
		name := b.Name + "/" + o.Key
		if _, ok := have[o.Key]; !ok {
			report.Add(kind, snapshot.StatusMissing, name, fmt.Sprintf("not on the target (backup: %d bytes)", o.Size))
			continue
		}
		delete(have, o.Key)
		g.Go(func() error {
			// Reading an object back is safe to do twice: one whose connection broke off (a
			// port-forward's tunnel dropped) is read again.
			var size int64
			var sum string
			err := c.retryBroken(gctx, name, "reading the object", func() (err error) {
				size, sum, err = hashObject(gctx, mc, b.Name, o.Key)
				return err
			})
			switch {
			case gctx.Err() != nil:
				return gctx.Err()
			case err != nil:
				report.Add(kind, snapshot.StatusFailed, name, err.Error())
			default:
				status, detail := compareObject(o, size, sum)
				if status == snapshot.StatusIdentical && meta != nil {
					err = c.retryBroken(gctx, name, "reading the object", func() (err error) {
						status, detail, err = compareMetadata(gctx, mc, b, o.Key, meta[o.Key])
						return err
					})
					if err != nil {
						if gctx.Err() != nil {
							return gctx.Err()
						}
						status, detail = snapshot.StatusFailed, err.Error()
					}
				}
				if status != snapshot.StatusIdentical {
					report.Add(kind, status, name, detail)
				} else {
					report.Count(kind, status)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for key, size := range have {
		report.Add(kind, snapshot.StatusDifferent, b.Name+"/"+key, fmt.Sprintf("not in the backup (target: %d bytes)", size))
	}
	return nil
}

// compareObject compares a target's object, by its size and SHA-256, with the backup's.
func compareObject(want snapshot.BucketObject, size int64, sum string) (status, detail string) {
	switch {
	case size != want.Size:
		return snapshot.StatusDifferent, fmt.Sprintf("size: backup %d, target %d", want.Size, size)
	case sum != want.SHA256:
		return snapshot.StatusDifferent, fmt.Sprintf("SHA-256: backup %s, target %s", want.SHA256, sum)
	}
	return snapshot.StatusIdentical, ""
}

// compareMetadata compares a target's object's metadata with the backup's; not its tags when the
// backup could not read them.
func compareMetadata(ctx context.Context, mc *minio.Client, b snapshot.Bucket, key string, want objectMetadata) (status, detail string, err error) {
	bucket := b.Name
	info, err := mc.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return "", "", fmt.Errorf("look at the target's object: %w", err)
	}
	got, err := targetMetadata(ctx, mc, b, key, info, want)
	if err != nil {
		return "", "", err
	}
	if diffs := metadataDifferences(key, want.ObjectMetadata, want.forComparing(b, got)); len(diffs) > 0 {
		return snapshot.StatusDifferent, strings.Join(diffs, "; "), nil
	}
	return snapshot.StatusIdentical, "", nil
}

// verifySettings compares the target's bucket's settings with the backup's, when it kept them,
// and lists the differences on the bucket's item.
func (c Copies) verifySettings(ctx context.Context, r *snapshot.Reader, mc *minio.Client, b snapshot.Bucket, report *snapshot.Report) error {
	want, err := readSettingsFile(ctx, r, b)
	if err != nil || want == nil {
		return err
	}
	got, unread, err := c.readSettings(ctx, mc, b.Name, compared(*want))
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(unread)) {
		if !slices.Contains(want.Unread, name) {
			report.Add(kind, snapshot.StatusFailed, b.Name, fmt.Sprintf("cannot compare its %s: the target's cannot be read: %v", name, unread[name]))
			want.Unread = append(want.Unread, name)
		}
	}
	if diffs := settingsDifferences(*want, got); len(diffs) > 0 {
		report.Add(kind, snapshot.StatusDifferent, b.Name, "its settings differ: "+strings.Join(diffs, "; "))
	}
	return nil
}
