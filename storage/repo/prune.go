package repo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"time"

	"github.com/ferrykube/ferry/storage"
)

// condemnedRecord lists packs a prune found unused at Marked. A later prune (never the one that
// wrote it) deletes them once no writer that started before Marked holds its lock (such a writer
// may have deduped against them and not recorded its backup yet), and only those still unused by
// the backups that prune keeps: a writer that finished before that prune listed the locks has its
// backup among them, whenever it started.
type condemnedRecord struct {
	key    string
	Marked time.Time `json:"marked"`
	Packs  []string  `json:"packs"`
}

func (r *Repo) readCondemned(ctx context.Context) ([]condemnedRecord, error) {
	var keys []string
	if err := r.store.List(ctx, r.opts.Prefix+condemnedDir, func(o storage.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("list condemned packs: %w", err)
	}
	var out []condemnedRecord
	for _, k := range keys {
		data, err := r.getAll(ctx, k)
		if errors.Is(err, storage.ErrNotExist) {
			continue // a prune swept it meanwhile
		}
		if err != nil {
			return nil, err
		}
		rec := condemnedRecord{key: k}
		if err := json.Unmarshal(data, &rec); err != nil {
			return nil, fmt.Errorf("%s: %v: %w", k, err, ErrCorrupt)
		}
		out = append(out, rec)
	}
	return out, nil
}

// KeepFunc hands keep the chunks of every backup that is kept, a stream's at a time (a chunk
// may come more than once): Prune holds each distinct chunk once, never every backup's list. Prune
// calls it after it listed the writers' locks, so that every backup written by a writer that had
// released its lock by then is in it. A backup recorded while it runs may be missing from it: such
// a backup's packs are newer than the prune or condemned by it, and this prune deletes neither.
type KeepFunc func(ctx context.Context, keep func([]ChunkRef)) error

// PruneResult is what Prune found and did.
type PruneResult struct {
	Packs            int   `json:"packs"`            // indexed packs found
	KeptChunks       int   `json:"keptChunks"`       // distinct chunks kept backups reference
	Repacked         int   `json:"repacked"`         // mostly unused packs whose kept chunks were rewritten
	Condemned        int   `json:"condemned"`        // packs newly found unused: a later prune deletes those still unused
	Waiting          int   `json:"waiting"`          // packs an earlier prune condemned, left for a later one: a writer older than their condemnation still runs
	Deleted          int   `json:"deleted"`          // packs deleted
	DeletedBytes     int64 `json:"deletedBytes"`     // their bytes
	DeletedUnindexed int   `json:"deletedUnindexed"` // of them, packs no index named, left by writers that died
}

// Prune deletes the packs no kept backup references, and repacks packs of which less than
// Options.RepackBelow of the bytes is still used. It is a mark and sweep that is safe against
// writers running at the same time (docs/format.md, "Prune"):
//   - writers hold a lock object while they may reference chunks they did not upload, and load
//     the condemned packs after taking it, never deduping against them;
//   - a prune records the packs it finds unused as condemned (never a pack stored since it
//     started), and deletes no pack it condemned itself: it deletes the packs an earlier prune
//     condemned, once no writer that started before their condemnation (plus Options.SkewMargin)
//     holds a lock, and only those still unused by the keep set, which it takes after listing
//     the locks. A backup recorded while the earlier prune ran is in this one's keep set;
//   - packs no index names are deleted only when older than every running writer's start.
//
// So a pack found unused is deleted by the second prune that finds it so, not the first. One prune
// runs at a time (locks/prune.json, renewed while it runs); a prune that finds its lock taken over
// stops, with an error matching ErrLocked, before it deletes anything more or writes the index.
// An encrypted repository needs the identity: every namespace's index must be read. A kept chunk
// the index lacks fails the prune before anything is deleted.
func (r *Repo) Prune(ctx context.Context, keep KeepFunc) (PruneResult, error) {
	var res PruneResult
	if r.opts.WriteOnly {
		return res, fmt.Errorf("prune: %w", ErrWriteOnly)
	}
	if r.cfg.Encrypted && len(r.opts.Identities) == 0 {
		return res, fmt.Errorf("prune: %w", ErrNoIdentity)
	}
	h, err := r.takePruneLock(ctx)
	if err != nil {
		return res, err
	}
	res, err = r.prune(h.hold(ctx), h, keep)
	if lost := h.release(ctx); lost != nil && err != nil && !errors.Is(err, ErrLocked) {
		// The lock was lost first: store calls failed on the context it cancelled.
		err = fmt.Errorf("prune: %w (then: %v)", lost, err)
	}
	return res, err
}

// prune is Prune, holding the prune lock h; ctx ends when h is lost.
func (r *Repo) prune(ctx context.Context, h *pruneHold, keep KeepFunc) (PruneResult, error) {
	var res PruneResult
	start := r.opts.Now()
	locks, err := r.freshWriterLocks(ctx)
	if err != nil {
		return res, err
	}
	kept := map[ID]bool{}
	if err := keep(ctx, func(refs []ChunkRef) {
		for _, ref := range refs {
			kept[ref.ID] = true
		}
	}); err != nil {
		return res, fmt.Errorf("prune: the kept backups' chunks: %w", err)
	}
	if r.cfg.Encrypted {
		if err := r.loadKeys(ctx); err != nil {
			return res, err
		}
	}
	l, err := r.load(ctx, true)
	if err != nil {
		return res, err
	}
	if l.unreadable > 0 {
		return res, fmt.Errorf("prune: %d index objects of a key stored after the keys were read: run it again", l.unreadable)
	}
	stored := map[string]storage.ObjectInfo{}
	if err := r.store.List(ctx, r.opts.Prefix+packsDir, func(o storage.ObjectInfo) error {
		stored[path.Base(o.Key)] = o
		return nil
	}); err != nil {
		return res, fmt.Errorf("list packs: %w", err)
	}
	conds, err := r.readCondemned(ctx)
	if err != nil {
		return res, err
	}
	condemned := map[string]bool{}
	for _, c := range conds {
		for _, p := range c.Packs {
			condemned[p] = true
		}
	}

	missing := 0
	for id := range kept {
		if e, ok := r.lookup(id); !ok || stored[e.pack].Key == "" {
			missing++
		}
	}
	res.KeptChunks, res.Packs = len(kept), len(l.packs)
	if missing > 0 {
		return res, fmt.Errorf("prune: %d chunks of kept backups are not stored (run check): nothing deleted: %w", missing, ErrUnknownChunk)
	}
	// usedBytes counts a pack's blobs that are the index's copy of a kept chunk.
	usedBytes := func(pack string) (used, total int) {
		for _, b := range l.packs[pack] {
			total += b.e.length
			if e, ok := r.lookup(b.id); ok && kept[b.id] && e.pack == pack {
				used += b.e.length
			}
		}
		return used, total
	}

	// Repack mostly unused packs, each namespace by a writer of its own key.
	if err := h.check(ctx); err != nil {
		return res, err
	}
	var repacked []string
	writers := map[string]*Writer{}
	for pack := range l.packs {
		used, total := usedBytes(pack)
		if condemned[pack] || used == 0 || float64(used) >= r.opts.RepackBelow*float64(total) || stored[pack].Key == "" ||
			!stored[pack].ModTime.Before(start.Add(-r.opts.SkewMargin)) {
			continue
		}
		ns := l.packs[pack][0].e.key
		w := writers[ns]
		if w == nil {
			r.mu.RLock()
			k := r.keys[ns]
			r.mu.RUnlock()
			if w, err = r.newWriterKey(ctx, k, false); err != nil {
				return res, err
			}
			defer w.Close(ctx)
			writers[ns] = w
		}
		if err := r.repack(ctx, w, pack, l.packs[pack], kept); err != nil {
			return res, err
		}
		repacked = append(repacked, pack)
	}
	for _, w := range writers {
		if err := w.Flush(ctx); err != nil {
			return res, fmt.Errorf("repack: %w", err)
		}
	}
	res.Repacked = len(repacked)

	// Mark. A pack stored since the prune started may be a backup's that is not in the keep set
	// (it was recorded after keep listed the backups): it is left for a later prune.
	var newly []string
	for pack := range l.packs {
		if used, _ := usedBytes(pack); used == 0 && !condemned[pack] && !stored[pack].ModTime.After(start) {
			newly = append(newly, pack)
		}
	}
	slices.Sort(newly)
	if len(newly) > 0 {
		if err := h.check(ctx); err != nil {
			return res, err
		}
		rec := condemnedRecord{Marked: r.opts.Now(), Packs: newly}
		data, _ := json.Marshal(rec)
		rec.key = r.opts.Prefix + condemnedDir + strconv.FormatInt(rec.Marked.UnixNano(), 10) + "-" + randomHex(8) + ".json"
		if err := r.store.Put(ctx, rec.key, bytes.NewReader(data)); err != nil {
			return res, fmt.Errorf("record condemned packs: %w", err)
		}
		res.Condemned = len(newly)
	}

	// Sweep the records of earlier prunes, never the one just written: a backup that finished
	// after keep listed the backups may use its packs, and only the next prune's keep set has it.
	// Writers that took their lock after a record was written loaded it and never reference its
	// packs; so list the locks again now.
	later, err := r.freshWriterLocks(ctx)
	if err != nil {
		return res, err
	}
	locks = append(locks, later...)
	eligible := func(c condemnedRecord) bool {
		for _, s := range locks {
			if !s.After(c.Marked.Add(r.opts.SkewMargin)) {
				return false
			}
		}
		return true
	}
	del := map[string]bool{}
	var swept []string
	for _, c := range conds {
		if !eligible(c) {
			res.Waiting += len(c.Packs)
			continue
		}
		swept = append(swept, c.key)
		for _, p := range c.Packs {
			if used, _ := usedBytes(p); used == 0 {
				del[p] = true
			}
		}
	}
	cutoff := start
	if len(locks) > 0 {
		cutoff = slices.MinFunc(locks, func(a, b time.Time) int { return a.Compare(b) })
	}
	cutoff = cutoff.Add(-r.opts.SkewMargin)
	for name, o := range stored {
		if l.packs[name] == nil && o.ModTime.Before(cutoff) {
			del[name] = true
			res.DeletedUnindexed++
		}
	}
	if len(del) == 0 && len(swept) == 0 {
		return res, nil
	}

	// The index first (so that no index names a deleted pack), then the packs, then the records;
	// each only while this prune still holds its lock.
	if err := h.check(ctx); err != nil {
		return res, err
	}
	if err := r.rewriteIndex(ctx, l, del); err != nil {
		return res, err
	}
	for p := range del {
		if err := h.err(); err != nil {
			return res, fmt.Errorf("prune: %w", err)
		}
		if err := r.store.Delete(ctx, r.packKey(p)); err != nil {
			return res, fmt.Errorf("delete pack %s: %w", p, err)
		}
		res.Deleted++
		res.DeletedBytes += stored[p].Size
	}
	if err := h.check(ctx); err != nil {
		return res, err
	}
	for _, k := range swept {
		if err := r.store.Delete(ctx, k); err != nil {
			return res, fmt.Errorf("delete %s: %w", k, err)
		}
	}
	return res, r.reload(ctx)
}

// repack rewrites a pack's kept chunks through w.
func (r *Repo) repack(ctx context.Context, w *Writer, pack string, blobs []packBlob, kept map[ID]bool) error {
	blobs = slices.Clone(blobs)
	slices.SortFunc(blobs, func(a, b packBlob) int { return int(a.e.off - b.e.off) })
	pr, err := r.openPack(ctx, pack)
	if err != nil {
		return fmt.Errorf("repack: %w", err)
	}
	defer pr.rc.Close()
	for _, b := range blobs {
		if !kept[b.id] {
			continue
		}
		data, err := r.blob(pr, b.id, b.e)
		if err != nil {
			return fmt.Errorf("repack: %w", err)
		}
		if err := w.add(ctx, b.id, bytes.Clone(data)); err != nil {
			return fmt.Errorf("repack pack %s: %w", pack, err)
		}
	}
	return nil
}

// rewriteIndex writes, per namespace, one index object of every pack read but those deleted and
// those the store no longer lists, and then deletes the index objects it read. Index objects
// written since (by writers) stay.
func (r *Repo) rewriteIndex(ctx context.Context, l *loaded, del map[string]bool) error {
	// Listed now, not when the prune began: no index object this writes names a pack gone
	// meanwhile, which writers would dedupe against.
	stored := map[string]bool{}
	if err := r.store.List(ctx, r.opts.Prefix+packsDir, func(o storage.ObjectInfo) error {
		stored[path.Base(o.Key)] = true
		return nil
	}); err != nil {
		return fmt.Errorf("rewrite index: list packs: %w", err)
	}
	byNS := map[string][]indexPack{}
	for pack, blobs := range l.packs {
		if del[pack] || !stored[pack] {
			continue
		}
		ip := indexPack{Pack: pack}
		seen := map[ID]bool{}
		for _, b := range blobs {
			if seen[b.id] {
				continue // the pack was in two index objects (a prune died between writing and deleting)
			}
			seen[b.id] = true
			ip.Blobs = append(ip.Blobs, indexBlob{ID: b.id, Offset: b.e.off, Length: b.e.length, Size: b.e.size})
		}
		byNS[blobs[0].e.key] = append(byNS[blobs[0].e.key], ip)
	}
	for ns, packs := range byNS {
		r.mu.RLock()
		k := r.keys[ns]
		r.mu.RUnlock()
		if r.cfg.Encrypted && k == nil {
			return fmt.Errorf("rewrite index: key %s not held", ns)
		}
		if _, err := r.writeIndex(ctx, k, packs); err != nil {
			return err
		}
	}
	for _, objs := range l.objects {
		for _, o := range objs {
			if err := r.store.Delete(ctx, o); err != nil {
				return fmt.Errorf("delete index %s: %w", o, err)
			}
		}
	}
	return nil
}
