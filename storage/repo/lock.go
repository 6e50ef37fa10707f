package repo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ferrykube/ferry/storage"
)

// lockRecord is a lock object. A writer's (locks/<random>.json) says since when it may reference
// chunks of the index it loaded; the prune's (locks/prune.json) that one prune runs.
type lockRecord struct {
	Kind      string    `json:"kind"` // "write" or "prune"
	Start     time.Time `json:"start"`
	Refreshed time.Time `json:"refreshed"`
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

// takePruneLock creates the prune's lock; a stale one (a prune that died) is replaced.
func (r *Repo) takePruneLock(ctx context.Context) (func(), error) {
	key := r.opts.Prefix + locksDir + pruneLock
	now := r.opts.Now()
	data, _ := json.Marshal(lockRecord{Kind: "prune", Start: now, Refreshed: now})
	for attempt := 0; ; attempt++ {
		err := r.store.Create(ctx, key, bytes.NewReader(data))
		if err == nil {
			return func() { r.store.Delete(context.WithoutCancel(ctx), key) }, nil
		}
		if !errors.Is(err, storage.ErrExists) || attempt > 0 {
			return nil, fmt.Errorf("take %s: %w", key, errors.Join(err, ErrLocked))
		}
		old, gerr := r.getAll(ctx, key)
		var rec lockRecord
		if gerr != nil || json.Unmarshal(old, &rec) != nil || now.Sub(rec.Refreshed) <= r.opts.StaleAfter {
			return nil, fmt.Errorf("%s since %s: %w", key, rec.Start.Format(time.RFC3339), ErrLocked)
		}
		if err := r.store.Delete(ctx, key); err != nil {
			return nil, fmt.Errorf("remove stale %s: %w", key, err)
		}
	}
}
