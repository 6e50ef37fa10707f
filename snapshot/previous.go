package snapshot

import (
	"context"
	"slices"
	"sort"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/storage"
)

// RecentBackups bounds the complete backups, newest first, a capture searches for what it may
// continue from (Recent).
const RecentBackups = 10

// Previous is a complete, unencrypted backup a capture may continue from: a claim's previous
// tree, a bucket's unchanged objects. Its Manifest holds no Objects: a capture needs its volumes,
// buckets, plan and streams, and ten manifests of a large cluster's objects would take hundreds
// of MiB.
type Previous struct {
	Name     string
	Manifest *Manifest
}

// Recent are the storage's newest complete unencrypted backups of the same cluster but this one,
// newest first (at most RecentBackups), read once per backup for every kind that continues from
// them. Only unencrypted ones: ferry writes without the identity, so it can read nothing of an
// encrypted one; an encrypted backup gets none. Only the same cluster's (plans.Cluster.Same):
// another's claim or bucket of the same name holds other data. A backup that cannot be read is
// only not a candidate.
func (w *Writer) Recent(ctx context.Context) []Previous {
	w.recentOnce.Do(func() {
		if !w.Encrypted() {
			w.recent = recent(ctx, w.store, w.name, w.manifest.Source)
		}
	})
	return w.recent
}

func recent(ctx context.Context, store storage.Backend, current string, source plans.Cluster) []Previous {
	infos, _ := List(ctx, store)
	infos = slices.DeleteFunc(infos, func(i Info) bool { return i.State != Complete || i.Name == current })
	sort.SliceStable(infos, func(i, j int) bool { return infos[i].CompletedAt.After(infos[j].CompletedAt) })
	var out []Previous
	// Other clusters' backups in between are passed over by their manifests' heads, up to a bound.
	for _, info := range infos[:min(len(infos), 4*RecentBackups)] {
		if head, err := readHead(ctx, store, info.Name); err != nil || !source.Same(head.Source) {
			continue
		}
		m, err := ReadManifest(ctx, store, info.Name)
		if err != nil || m.Encryption != nil {
			continue
		}
		m.Objects = nil
		out = append(out, Previous{Name: info.Name, Manifest: m})
		if len(out) == RecentBackups {
			break
		}
	}
	return out
}
