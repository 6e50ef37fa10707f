package repo

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/ferrykube/ferry/storage"
	"github.com/restic/chunker"
)

// Stats counts what a writer did.
type Stats struct {
	Chunks      int   // chunks written, new or not
	Bytes       int64 // their plain bytes
	NewChunks   int   // chunks the repository lacked
	NewBytes    int64 // their plain bytes
	StoredBytes int64 // bytes of the packs uploaded
	Packs       int
}

// Writer adds data to the repository. Write from one goroutine; packs are built and uploaded by
// Options.Uploads workers. The writer holds a lock object from NewWriter to Close: a prune does not
// delete a pack while a writer that might reference it holds its lock. So write the backup that
// records the refs (its manifest) after Flush and before Close.
type Writer struct {
	r       *Repo
	key     *nsKey
	lockKey string // "" for a prune's repack writer
	start   time.Time

	batches chan []job // runs of consecutive new chunks, about a pack's worth each
	batch   []job
	batchN  int // plain bytes in batch
	wg      sync.WaitGroup
	ctx     context.Context
	cancel  context.CancelCauseFunc
	stop    chan struct{}
	stopped sync.WaitGroup

	mu      sync.Mutex
	renewed time.Time   // when the lock was last written, by Options.Now
	lockErr error       // why the lock is no longer held
	pending map[ID]bool // new chunks taken and not indexed yet
	packs   []indexPack // uploaded and not indexed yet
	blobs   int         // in packs
	stats   Stats
	flushed bool
	closed  bool
	buf     []byte
	chunker *chunker.Chunker // kept across Writes: each new one allocates a 512 KiB buffer
}

type job struct {
	id   ID
	data []byte
}

// NewWriter takes a writer's lock, then reloads the condemned packs and the index (in this order,
// see Prune), and starts the upload workers.
func (r *Repo) NewWriter(ctx context.Context) (*Writer, error) {
	k, err := r.ensureWriteKey(ctx)
	if err != nil {
		return nil, err
	}
	return r.newWriterKey(ctx, k, true)
}

// newWriterKey starts a writer in k's namespace; without lock for a prune's repack, which holds
// the prune's lock and indexes its packs before it condemns the old ones.
func (r *Repo) newWriterKey(ctx context.Context, k *nsKey, lock bool) (*Writer, error) {
	w := &Writer{r: r, key: k, pending: map[ID]bool{}, batches: make(chan []job), stop: make(chan struct{}),
		buf: make([]byte, r.cfg.MaxSize)}
	w.ctx, w.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	if lock {
		w.start = r.opts.Now()
		w.renewed = w.start
		w.lockKey = r.opts.Prefix + locksDir + randomHex(16) + ".json"
		if err := r.putLock(ctx, w.lockKey, lockRecord{Kind: "write", Start: w.start, Refreshed: w.start}); err != nil {
			return nil, err
		}
		if err := r.reload(ctx); err != nil {
			r.store.Delete(context.WithoutCancel(ctx), w.lockKey)
			return nil, err
		}
		w.stopped.Add(1)
		go w.refresh()
	}
	for range r.opts.Uploads {
		w.wg.Add(1)
		go w.worker()
	}
	return w, nil
}

// refresh renews the lock, trying again sooner after a failure; a writer whose lock a prune may
// take for dead (Held) fails.
func (w *Writer) refresh() {
	defer w.stopped.Done()
	t := time.NewTimer(w.r.opts.RefreshEvery)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		// Not w.ctx: a writer whose upload failed (a backup that streams the volume again with
		// a new writer) still holds its lock until Close.
		now := w.r.opts.Now()
		err := w.r.putLock(context.WithoutCancel(w.ctx), w.lockKey, lockRecord{Kind: "write", Start: w.start, Refreshed: now})
		if err == nil {
			w.mu.Lock()
			w.renewed = now
			w.mu.Unlock()
			t.Reset(w.r.opts.RefreshEvery)
			continue
		}
		if herr := w.Held(); herr != nil {
			herr = fmt.Errorf("%w (renewing it: %v)", herr, err)
			w.mu.Lock()
			w.lockErr = herr
			w.mu.Unlock()
			w.cancel(herr)
			return
		}
		t.Reset(min(w.r.opts.RefreshEvery, 30*time.Second))
	}
}

// Held says whether the writer still holds its lock as a prune sees it: renewed within
// Options.StaleAfter, less the skew margin (a writer whose upload failed still holds it). A backup checks it before it records
// the refs (its manifest): a prune may have deleted packs it references once the lock went stale.
func (w *Writer) Held() error {
	if w.lockKey == "" {
		return nil
	}
	w.mu.Lock()
	renewed, lost := w.renewed, w.lockErr
	w.mu.Unlock()
	if lost != nil {
		return lost
	}
	if since := w.r.opts.Now().Sub(renewed); since > w.r.opts.StaleAfter-w.r.opts.SkewMargin {
		return fmt.Errorf("writer lock %s was last renewed %s ago: a prune may have taken it for a dead writer's", w.lockKey, since.Round(time.Second))
	}
	return nil
}

func (w *Writer) worker() {
	defer w.wg.Done()
	var p *packer
	var scratch [2][]byte
	for batch := range w.batches {
		for i, j := range batch {
			// The batch lets go of each chunk as it is packed: 4 workers' batches of a pack's worth
			// of plain bytes each would otherwise stay whole until their last chunk.
			batch[i] = job{}
			if w.ctx.Err() != nil {
				break // drain after a failure
			}
			if p == nil {
				var err error
				if p, err = w.r.newPacker(); err != nil {
					w.cancel(err)
					break
				}
			}
			w.r.add(p, j.id, j.data, &scratch)
			if p.buf.Len() >= w.r.opts.PackSize || len(p.blobs) >= w.r.opts.PackChunks {
				w.upload(p)
				p = nil
			}
		}
	}
	if p != nil && w.ctx.Err() == nil && len(p.blobs) > 0 {
		w.upload(p)
	}
}

func (w *Writer) upload(p *packer) {
	// A pack's name is the SHA-256 of its bytes, and an unencrypted pack's bytes follow from its
	// chunks: the same chunks packed again get the name of a pack a prune condemned, or of one a
	// writer that died left unindexed, which a prune deletes. A pack is never stored over another:
	// an unindexed blob of random bytes at its end gives it a name of its own.
	name, data := p.finish()
	for {
		if !w.r.isCondemned(name) {
			err := w.r.store.Create(storage.WithSHA256(w.ctx, name), w.r.packKey(name), bytes.NewReader(data))
			if err == nil {
				break
			}
			if !errors.Is(err, storage.ErrExists) {
				w.cancel(fmt.Errorf("upload pack %s: %w", name, err))
				return
			}
		}
		p.buf.Write(binary.LittleEndian.AppendUint32(nil, fillerSize))
		p.buf.Write(randomBytes(fillerSize))
		name, data = p.finish()
	}
	defer func() {
		p.buf.Reset()
		w.r.packBufs.Put(p.buf)
	}()
	ip := indexPack{Pack: name, Blobs: p.blobs}
	var full []indexPack
	w.mu.Lock()
	w.packs = append(w.packs, ip)
	w.blobs += len(ip.Blobs)
	w.stats.Packs++
	w.stats.StoredBytes += int64(len(data))
	if w.blobs >= w.r.opts.IndexEvery {
		full, w.packs, w.blobs = w.packs, nil, 0
	}
	w.mu.Unlock()
	if full != nil {
		if err := w.index(w.ctx, full); err != nil {
			w.cancel(err)
		}
	}
}

// index writes an index object of packs, adds them to the loaded index, and forgets their chunks
// as pending: they dedupe through the index from now on.
func (w *Writer) index(ctx context.Context, packs []indexPack) error {
	if _, err := w.r.writeIndex(ctx, w.key, packs); err != nil {
		return err
	}
	for _, p := range packs {
		if err := w.r.addEntries(w.r.keyName(w.key), p); err != nil {
			return err
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range packs {
		for _, b := range p.Blobs {
			delete(w.pending, b.ID)
		}
	}
	return nil
}

func (w *Writer) err() error {
	if w.ctx.Err() != nil {
		return context.Cause(w.ctx)
	}
	return nil
}

// Write cuts r into chunks and returns their refs in order. Chunks the index holds (in a pack no
// prune condemned) or that this writer already took are not uploaded again.
func (w *Writer) Write(ctx context.Context, rd io.Reader) ([]ChunkRef, error) {
	if w.flushed {
		return nil, errors.New("write after flush")
	}
	c := w.chunker
	if c == nil {
		c = chunker.NewWithBoundaries(rd, w.r.cfg.Polynomial, w.r.cfg.MinSize, w.r.cfg.MaxSize)
		w.chunker = c
	} else {
		c.ResetWithBoundaries(rd, w.r.cfg.Polynomial, w.r.cfg.MinSize, w.r.cfg.MaxSize)
	}
	c.SetAverageBits(w.r.cfg.AverageBits)
	var refs []ChunkRef
	for {
		if err := w.err(); err != nil {
			return nil, err
		}
		ch, err := c.Next(w.buf)
		if err == io.EOF {
			return refs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read data to chunk: %w", err)
		}
		id := chunkID(w.key, ch.Data)
		refs = append(refs, ChunkRef{ID: id, Size: len(ch.Data)})
		w.mu.Lock()
		w.stats.Chunks++
		w.stats.Bytes += int64(len(ch.Data))
		isNew := !w.pending[id] && !w.r.dedupable(id)
		if isNew {
			w.pending[id] = true
			w.stats.NewChunks++
			w.stats.NewBytes += int64(len(ch.Data))
		}
		w.mu.Unlock()
		if !isNew {
			continue
		}
		if err := w.queue(ctx, job{id: id, data: bytes.Clone(ch.Data)}); err != nil {
			return nil, err
		}
	}
}

// queue adds a new chunk to the batch, and hands the batch to a worker once it holds a pack's
// worth: a pack then holds consecutive chunks of a stream, which Read reads in one pass.
func (w *Writer) queue(ctx context.Context, j job) error {
	w.batch = append(w.batch, j)
	w.batchN += len(j.data)
	if w.batchN < w.r.opts.PackSize {
		return nil
	}
	return w.send(ctx)
}

func (w *Writer) send(ctx context.Context) error {
	if len(w.batch) == 0 {
		return nil
	}
	select {
	case w.batches <- w.batch:
		w.batch, w.batchN = nil, 0
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-w.ctx.Done():
		return w.err()
	}
}

// add stores a chunk whose ID is known (a prune's repack).
func (w *Writer) add(ctx context.Context, id ID, data []byte) error {
	w.mu.Lock()
	dup := w.pending[id]
	w.pending[id] = true
	w.mu.Unlock()
	if dup {
		return nil
	}
	return w.queue(ctx, job{id: id, data: data})
}

// Flush uploads the packs still being built and writes an index object of the packs this writer
// uploaded that are not indexed yet (every Options.IndexEvery chunks, upload indexes them as it
// goes). Nothing can be written after it; the refs returned by Write are readable once
// it returns nil.
func (w *Writer) Flush(ctx context.Context) error {
	if w.flushed {
		return w.err()
	}
	w.flushed = true
	serr := w.send(ctx)
	close(w.batches)
	w.wg.Wait()
	if serr != nil {
		return serr
	}
	if err := w.err(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(w.packs) == 0 {
		return nil
	}
	packs := w.packs
	w.packs, w.blobs = nil, 0
	return w.index(ctx, packs)
}

// Close flushes when Flush was not called, then releases the writer's lock. Call it after the
// backup that references the written chunks is recorded.
func (w *Writer) Close(ctx context.Context) error {
	if w.closed {
		return nil
	}
	w.closed = true
	err := w.Flush(ctx)
	close(w.stop)
	w.stopped.Wait()
	w.cancel(errors.New("writer closed"))
	if w.lockKey != "" {
		if derr := w.r.store.Delete(context.WithoutCancel(ctx), w.lockKey); derr != nil {
			err = errors.Join(err, fmt.Errorf("release writer lock: %w", derr))
		}
	}
	return err
}

// Stats returns what the writer did so far.
func (w *Writer) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

// Reusable reports whether every one of refs, chunks an earlier writer stored, may be referenced
// again without writing their data (an unchanged file of an incremental backup): whether each is
// in the index and in no condemned pack, as a deduplicated chunk must be. Call it after
// NewWriter, which loads the condemned packs, so that a prune keeps them.
func (w *Writer) Reusable(refs []ChunkRef) bool {
	for _, ref := range refs {
		if !w.r.dedupable(ref.ID) {
			return false
		}
	}
	return true
}

// Reuse is Reusable, counting the chunks in the writer's Stats when they are.
func (w *Writer) Reuse(refs []ChunkRef) bool {
	if !w.Reusable(refs) {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ref := range refs {
		w.stats.Chunks++
		w.stats.Bytes += int64(ref.Size)
	}
	return true
}
