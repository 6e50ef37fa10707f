package snapshot

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"
)

// Damaged is a stored file of a backup that cannot be read or does not match the manifest, and
// the item it holds, named as restore reports it.
type Damaged struct {
	Kind string // objects, volumes, databases or buckets; files for others
	Name string // the claim (namespace/name), the database, the bucket or the file
	Err  error  // names the file; matches ErrCorrupt when the file differs from the manifest
}

// What says what the file holds: "volume ns/name", "database kfp-mysql".
func (d Damaged) What() string {
	return map[string]string{"objects": "objects", "volumes": "volume", "databases": "database", "buckets": "bucket", "files": "file"}[d.Kind] + " " + d.Name
}

// Check reads every file the backup stores, parallel files at a time, and compares its size and
// SHA-256 with the manifest, decrypting nothing. A restore runs it before any kind applies
// anything: a damaged volume stream then stops the objects and databases of the same restore too,
// not only its own claim. It returns every damaged file, by item; the error is ctx's only. A
// backup Velero wrote has nothing to check.
func (r *Reader) Check(ctx context.Context, parallel int) ([]Damaged, error) {
	if r.Velero {
		return nil, nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(parallel, 1))
	var mu sync.Mutex
	var damaged []Damaged
	for _, s := range r.Manifest.Streams {
		g.Go(func() error {
			err := r.checkStream(gctx, s)
			if gctx.Err() != nil {
				return gctx.Err()
			}
			if err != nil {
				d := r.itemOf(s.Key)
				d.Err = err
				mu.Lock()
				damaged = append(damaged, d)
				mu.Unlock()
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	slices.SortFunc(damaged, func(a, b Damaged) int { return strings.Compare(a.What(), b.What()) })
	return damaged, nil
}

// CheckFile reads the stored file whole and compares its size and SHA-256 with the manifest, as
// Check does for every file, decrypting and decoding nothing.
func (r *Reader) CheckFile(ctx context.Context, file string) error {
	s, ok := r.Stream(file)
	if !ok {
		return fmt.Errorf("backup %s: %s: %w (not recorded)", r.name, file, ErrCorrupt)
	}
	return r.checkStream(ctx, s)
}

func (r *Reader) checkStream(ctx context.Context, s Stream) error {
	rc, err := r.store.Get(ctx, r.StorageKey(s.Key))
	if err != nil {
		return fmt.Errorf("backup %s: %w", r.name, err)
	}
	checked := &checkedReader{rc: rc, file: r.name + "/" + s.Key, want: &s, h: sha256.New()}
	_, err = io.Copy(io.Discard, checked)
	if cerr := rc.Close(); err == nil {
		err = cerr
	}
	return err
}

// itemOf is the item a stored file holds.
func (r *Reader) itemOf(key string) Damaged {
	kind, name := r.Manifest.ItemOf(key)
	return Damaged{Kind: kind, Name: name}
}

// ItemOf names the item a stored file of the backup holds, as restore reports it: its kind
// (objects, volumes, databases, buckets; files for the others) and its name.
func (m *Manifest) ItemOf(key string) (kind, name string) {
	plain := strings.TrimSuffix(key, EncryptedSuffix)
	for _, v := range m.Volumes {
		if v.Key == plain || v.Key == key || v.List != nil && v.List.Key == key {
			return "volumes", v.Namespace + "/" + v.Name
		}
	}
	for _, d := range m.Databases {
		if d.Key == plain || d.Key == key {
			return "databases", d.Name
		}
	}
	for _, b := range m.Buckets {
		if b.Prefix != "" && strings.HasPrefix(key, b.Prefix) || b.Metadata != "" && (b.Metadata == key || b.Metadata == plain) ||
			b.Settings != "" && (b.Settings == key || b.Settings == plain) {
			return "buckets", b.Name
		}
	}
	if plain == m.Name+".tar.gz" { // the objects, in Velero's layout
		return "objects", key
	}
	return "files", key
}

// HoldsObject says whether the backup holds the object of that group, kind, namespace ("" for
// cluster-scoped) and name.
func (m *Manifest) HoldsObject(group, kind, namespace, name string) bool {
	return slices.ContainsFunc(m.Objects, func(o Object) bool {
		return o.Group == group && o.Kind == kind && o.Namespace == namespace && o.Name == name
	})
}
