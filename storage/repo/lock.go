package repo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ferrykube/ferry/storage"
)

// lockRecord is a lock object. A writer's (locks/<random>.json) says since when it may reference
// chunks of the index it loaded; the prune's (locks/prune.json) that one prune runs.
type lockRecord struct {
	Kind      string    `json:"kind"` // "write" or "prune"
	Start     time.Time `json:"start"`
	Refreshed time.Time `json:"refreshed"`
	// Holder is random, one per prune: a prune renews and removes only the lock it wrote.
	Holder string `json:"holder,omitempty"`
}

const pruneLock = "prune.json"

func (r *Repo) putLock(ctx context.Context, key string, rec lockRecord) error {
	data, _ := json.Marshal(rec)
	if err := r.store.Put(ctx, key, bytes.NewReader(data)); err != nil {
		return fmt.Errorf("lock %s: %w", key, err)
	}
	return nil
}

// freshWriterLocks returns the start times of writers whose locks are not stale, oldest first.
func (r *Repo) freshWriterLocks(ctx context.Context) ([]time.Time, error) {
	var keys []string
	if err := r.store.List(ctx, r.opts.Prefix+locksDir, func(o storage.ObjectInfo) error {
		if !strings.HasSuffix(o.Key, "/"+pruneLock) {
			keys = append(keys, o.Key)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("list locks: %w", err)
	}
	now := r.opts.Now()
	var starts []time.Time
	for _, k := range keys {
		data, err := r.getAll(ctx, k)
		if errors.Is(err, storage.ErrNotExist) {
			continue // released meanwhile
		}
		if err != nil {
			return nil, err
		}
		var rec lockRecord
		if json.Unmarshal(data, &rec) != nil {
			// An unreadable lock still says someone may be writing: treat it as fresh and old.
			starts = append(starts, time.Time{})
			continue
		}
		if now.Sub(rec.Refreshed) > r.opts.StaleAfter {
			continue // its writer stopped renewing it, so it stopped writing (see Writer)
		}
		starts = append(starts, rec.Start)
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	return starts, nil
}

// pruneHold is the prune lock a prune holds. It is renewed every Options.RefreshEvery, as a
// writer's lock is, so that a long prune is not taken for a dead one; every write of it is a
// compare-and-swap against the version this prune wrote last (on a store without conditional
// writes: after reading that the holder is still this prune), so a lock another prune took over
// is never written again. A prune that lost its lock learns it at its next renewal or check, and
// its context is cancelled (as restic's monitorLockRefresh does).
type pruneHold struct {
	r   *Repo
	key string
	sw  storage.Swapper // nil: the store has no conditional writes

	mu      sync.Mutex
	rec     lockRecord // as last written
	version string     // of the lock as last written, with sw
	renewed time.Time  // when it was last written, by Options.Now
	lost    error

	cancel context.CancelCauseFunc
	stop   chan struct{}
	done   sync.WaitGroup
}

// takePruneLock creates the prune's lock; a stale one (a prune that died, or that stopped
// renewing it) is taken over. Call hold next.
func (r *Repo) takePruneLock(ctx context.Context) (*pruneHold, error) {
	h := &pruneHold{r: r, key: r.opts.Prefix + locksDir + pruneLock}
	h.sw, _ = r.store.(storage.Swapper)
	now := r.opts.Now()
	h.rec = lockRecord{Kind: "prune", Start: now, Refreshed: now, Holder: randomHex(16)}
	data, _ := json.Marshal(h.rec)
	held := func(old []byte) error {
		var rec lockRecord
		if json.Unmarshal(old, &rec) != nil || now.Sub(rec.Refreshed) <= r.opts.StaleAfter {
			return fmt.Errorf("%s since %s: %w", h.key, rec.Start.Format(time.RFC3339), ErrLocked)
		}
		return nil
	}
	if h.sw != nil {
		// Of prunes that find the lock absent or stale at once, one Swap wins.
		old, version, err := h.sw.ReadVersion(ctx, h.key)
		switch {
		case errors.Is(err, storage.ErrNotExist):
			version = ""
		case err != nil:
			return nil, fmt.Errorf("read %s: %w", h.key, err)
		default:
			if err := held(old); err != nil {
				return nil, err
			}
		}
		v, err := h.sw.Swap(ctx, h.key, version, data)
		if errors.Is(err, storage.ErrChanged) {
			return nil, fmt.Errorf("take %s: another prune took it first: %w", h.key, ErrLocked)
		}
		if err != nil {
			return nil, fmt.Errorf("take %s: %w", h.key, err)
		}
		h.version, h.renewed = v, now
		return h, nil
	}
	for attempt := 0; ; attempt++ {
		err := r.store.Create(ctx, h.key, bytes.NewReader(data))
		if err == nil {
			h.renewed = now
			return h, nil
		}
		if !errors.Is(err, storage.ErrExists) || attempt > 0 {
			return nil, fmt.Errorf("take %s: %w", h.key, errors.Join(err, ErrLocked))
		}
		old, gerr := r.getAll(ctx, h.key)
		if gerr != nil {
			return nil, fmt.Errorf("%s: %v: %w", h.key, gerr, ErrLocked)
		}
		if err := held(old); err != nil {
			return nil, err
		}
		if err := r.store.Delete(ctx, h.key); err != nil {
			return nil, fmt.Errorf("remove stale %s: %w", h.key, err)
		}
	}
}

// hold starts the renewals and returns a context that is cancelled, with the loss as its cause,
// when the lock is lost. Call release when done.
func (h *pruneHold) hold(ctx context.Context) context.Context {
	ctx, h.cancel = context.WithCancelCause(ctx)
	h.stop = make(chan struct{})
	h.done.Add(1)
	go h.renewals(ctx)
	return ctx
}

func (h *pruneHold) renewals(ctx context.Context) {
	defer h.done.Done()
	t := time.NewTicker(h.r.opts.RefreshEvery)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := h.renew(ctx)
		if err == nil {
			continue
		}
		h.mu.Lock()
		if h.lost == nil && h.r.opts.Now().Sub(h.renewed)+h.r.opts.RefreshEvery > h.r.opts.StaleAfter {
			// The next try would come after another prune may take the lock for stale.
			h.loseLocked(fmt.Errorf("%s was last renewed at %s and renewing it fails: %v: %w", h.key,
				h.renewed.Format(time.RFC3339), err, ErrLocked))
		}
		lost := h.lost != nil
		h.mu.Unlock()
		if lost {
			return
		}
	}
}

// loseLocked records the loss of the lock and cancels the prune's context; h.mu is held.
func (h *pruneHold) loseLocked(err error) error {
	if h.lost == nil {
		h.lost = err
		if h.cancel != nil {
			h.cancel(err)
		}
	}
	return h.lost
}

// renew writes the lock again with a new Refreshed, only over the lock this prune wrote last. A
// lock found changed or gone is lost; other errors are returned as they are.
func (h *pruneHold) renew(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost != nil {
		return h.lost
	}
	now := h.r.opts.Now()
	rec := h.rec
	if now.After(rec.Refreshed) {
		rec.Refreshed = now
	}
	data, _ := json.Marshal(rec)
	if h.sw != nil {
		v, err := h.sw.Swap(ctx, h.key, h.version, data)
		if errors.Is(err, storage.ErrChanged) {
			return h.loseLocked(fmt.Errorf("%s was taken over by another prune, or removed: %w", h.key, ErrLocked))
		}
		if err != nil {
			return fmt.Errorf("renew %s: %w", h.key, err)
		}
		h.version = v
	} else {
		if err := h.oursLocked(ctx); err != nil {
			return err
		}
		if err := h.r.store.Put(ctx, h.key, bytes.NewReader(data)); err != nil {
			return fmt.Errorf("renew %s: %w", h.key, err)
		}
	}
	h.rec, h.renewed = rec, now
	return nil
}

// oursLocked reads the lock and loses it when another prune's record is there, or none; h.mu is
// held.
func (h *pruneHold) oursLocked(ctx context.Context) error {
	data, err := h.r.getAll(ctx, h.key)
	if errors.Is(err, storage.ErrNotExist) {
		return h.loseLocked(fmt.Errorf("%s was removed: %w", h.key, ErrLocked))
	}
	if err != nil {
		return err
	}
	var rec lockRecord
	if json.Unmarshal(data, &rec) != nil || rec.Holder != h.rec.Holder {
		return h.loseLocked(fmt.Errorf("%s was taken over by another prune: %w", h.key, ErrLocked))
	}
	return nil
}

// check renews the lock now: a prune calls it before it deletes or rewrites anything, and stops on
// its error.
func (h *pruneHold) check(ctx context.Context) error {
	if err := h.renew(ctx); err != nil {
		return fmt.Errorf("prune: %w", err)
	}
	return nil
}

// err is the loss of the lock, if the renewals found it lost.
func (h *pruneHold) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost
}

// release stops the renewals and deletes the lock if it is still this prune's. It returns the loss
// of the lock, if it was lost.
func (h *pruneHold) release(ctx context.Context) error {
	if h.stop != nil {
		close(h.stop)
		h.done.Wait()
		h.cancel(nil)
	}
	ctx = context.WithoutCancel(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost != nil {
		return h.lost
	}
	if err := h.oursLocked(ctx); err != nil {
		return h.lost // another prune's lock stays; an unreadable one too
	}
	h.r.store.Delete(ctx, h.key)
	return nil
}
