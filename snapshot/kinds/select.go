package kinds

import (
	"slices"
	"strings"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/volumes"
)

// Selected is r with only the data the selection keeps (plans.Filter.DataReason): a restore or a
// verify of some namespaces neither loads nor checks nor names the databases, buckets and claims
// of others, nor what the backup skipped of them. Objects are selected one by one as they are
// restored (RestoreOptions.Select). A database or a bucket the backup's configuration does not
// place is kept, as is a Velero backup's volume data of no namespace (a persistent volume's
// snapshot).
func Selected(r *snapshot.Reader, f *plans.Filter) *snapshot.Reader {
	if f == nil || r.Manifest == nil {
		return r
	}
	var cfg config.Planning
	if r.Manifest.Plan != nil {
		cfg = r.Manifest.Plan.Config
	}
	out := Without(r, func(kind, name string) bool {
		switch kind {
		case "volume", volumes.SkippedFileKind: // namespace/claim, or namespace/claim:path
			ns, _, _ := strings.Cut(name, "/")
			return f.DataReason(ns, true) != ""
		case "database":
			c, ok := cfg.DatabaseNamed(name)
			return ok && f.DataReason(c.Namespace, false) != ""
		case "bucket":
			// A bucket, or what the backup left out of one: "<bucket> object tags", "<bucket>
			// earlier versions" (no bucket's name has a space).
			bucket, _, _ := strings.Cut(name, " ")
			c, ok := cfg.BucketNamed(bucket)
			return ok && f.DataReason(c.Namespace, false) != ""
		}
		return false
	})
	out.VeleroVolumes = slices.DeleteFunc(slices.Clone(r.VeleroVolumes), func(s snapshot.Skipped) bool {
		return s.Namespace != "" && f.DataReason(s.Namespace, true) != ""
	})
	return out
}

// Without is r without the data that left says to leave out, by kind (volume, database, bucket,
// or a kind of what the backup skipped) and name (a volume's namespace/claim): a restore or a
// verify of it neither loads nor checks nor names them. Objects stay.
func Without(r *snapshot.Reader, left func(kind, name string) bool) *snapshot.Reader {
	m := *r.Manifest
	m.Volumes = slices.DeleteFunc(slices.Clone(m.Volumes), func(v snapshot.Volume) bool { return left("volume", v.Namespace+"/"+v.Name) })
	m.Databases = slices.DeleteFunc(slices.Clone(m.Databases), func(d snapshot.Database) bool { return left("database", d.Name) })
	m.Buckets = slices.DeleteFunc(slices.Clone(m.Buckets), func(b snapshot.Bucket) bool { return left("bucket", b.Name) })
	m.Skipped = slices.DeleteFunc(slices.Clone(m.Skipped), func(s snapshot.Skipped) bool { return left(s.Kind, s.Name) })
	m.NoData = slices.DeleteFunc(slices.Clone(m.NoData), func(s snapshot.Skipped) bool { return left(s.Kind, s.Name) })
	// The files of what is left out are neither read nor checked.
	m.Streams = slices.DeleteFunc(slices.Clone(m.Streams), func(s snapshot.Stream) bool {
		switch kind, name := r.Manifest.ItemOf(s.Key); kind {
		case "volumes", "databases", "buckets":
			return left(strings.TrimSuffix(kind, "s"), name)
		}
		return false // the objects and the backup's own files
	})
	out := *r
	out.Manifest = &m
	return &out
}
