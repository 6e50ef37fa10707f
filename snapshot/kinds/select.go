package kinds

import (
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/snapshot"
)

// Selected is r with only the data the selection keeps (plans.Filter.DataReason): a restore or a
// verify of some namespaces neither loads nor checks the databases, buckets and claims of others.
// Objects are selected one by one as they are restored (RestoreOptions.Select). A database or a
// bucket the backup's configuration does not place is kept.
func Selected(r *snapshot.Reader, f *plans.Filter) *snapshot.Reader {
	if f == nil || r.Manifest == nil {
		return r
	}
	m := *r.Manifest
	var cfg plans.Config
	if m.Plan != nil {
		cfg = m.Plan.Config
	}
	m.Volumes = nil
	for _, v := range r.Manifest.Volumes {
		if f.DataReason(v.Namespace, true) == "" {
			m.Volumes = append(m.Volumes, v)
		}
	}
	m.Databases = nil
	for _, d := range r.Manifest.Databases {
		if c, ok := cfg.DatabaseNamed(d.Name); !ok || f.DataReason(c.Namespace, false) == "" {
			m.Databases = append(m.Databases, d)
		}
	}
	m.Buckets = nil
	for _, b := range r.Manifest.Buckets {
		if c, ok := cfg.BucketNamed(b.Name); !ok || f.DataReason(c.Namespace, false) == "" {
			m.Buckets = append(m.Buckets, b)
		}
	}
	out := *r
	out.Manifest = &m
	return &out
}
