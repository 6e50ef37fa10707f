package migrate

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/storage"
)

// LeasesPrefix holds one lease per pair of clusters being driven.
const LeasesPrefix = "metadata/ferry/leases/"

// DefaultLeaseTTL is how long a lease lasts without renewal: a killed ferry's run can be resumed
// that long after it died.
const DefaultLeaseTTL = 30 * time.Second

// LeaseInfo is what a lease file holds.
type LeaseInfo struct {
	Run     string    `json:"run"`
	Holder  string    `json:"holder"` // random, one per process
	Expires time.Time `json:"expires"`
}

// Lease keeps other runs off two clusters while a run drives them.
type Lease struct {
	store  storage.Backend
	key    string
	info   LeaseInfo
	ttl    time.Duration
	cancel context.CancelFunc
	done   chan struct{}
}

// leaseKey names the lease of a pair of clusters by their identities (either order).
func leaseKey(a, b plans.Cluster) string {
	ids := []string{clusterIdentity(a), clusterIdentity(b)}
	sort.Strings(ids)
	sum := sha256.Sum256([]byte(ids[0] + "\n" + ids[1]))
	return LeasesPrefix + hex.EncodeToString(sum[:8]) + ".json"
}

func clusterIdentity(c plans.Cluster) string {
	if c.UID != "" {
		return c.UID
	}
	return c.Server
}

// ErrLeaseHeld matches the error of a lease held by another live run.
var ErrLeaseHeld = errors.New("another ferry drives these clusters")

// AcquireLease takes the lease of the run's clusters, or fails with ErrLeaseHeld while another
// holder's lease is live; an expired lease (its ferry died) is taken over. The lease is renewed
// in the background until Release.
func AcquireLease(ctx context.Context, store storage.Backend, run Run, ttl time.Duration, log *slog.Logger) (*Lease, error) {
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	holder := make([]byte, 8)
	if _, err := rand.Read(holder); err != nil {
		return nil, err
	}
	l := &Lease{store: store, key: leaseKey(run.Blue, run.Green), ttl: ttl,
		info: LeaseInfo{Run: run.ID, Holder: hex.EncodeToString(holder)}}
	for attempt := 0; ; attempt++ {
		l.info.Expires = time.Now().Add(ttl).UTC()
		data, _ := json.Marshal(l.info)
		err := store.Create(ctx, l.key, bytes.NewReader(data))
		if err == nil {
			break
		}
		if !errors.Is(err, storage.ErrExists) || attempt > 2 {
			return nil, fmt.Errorf("lease %s: %w", l.key, err)
		}
		var held LeaseInfo
		if err := readJSON(ctx, store, l.key, &held); err != nil && !errors.Is(err, storage.ErrNotExist) {
			return nil, err
		}
		if time.Now().Before(held.Expires) {
			return nil, fmt.Errorf("run %s holds the lease until %s: %w", held.Run, held.Expires.Format(time.RFC3339), ErrLeaseHeld)
		}
		log.Warn("taking over an expired lease", "run", held.Run, "expired", held.Expires)
		if err := store.Delete(ctx, l.key); err != nil && !errors.Is(err, storage.ErrNotExist) {
			return nil, err
		}
	}
	renewCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.cancel, l.done = cancel, make(chan struct{})
	go l.renew(renewCtx, log)
	return l, nil
}

func (l *Lease) renew(ctx context.Context, log *slog.Logger) {
	defer close(l.done)
	tick := time.NewTicker(l.ttl / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			l.info.Expires = time.Now().Add(l.ttl).UTC()
			data, _ := json.Marshal(l.info)
			if err := l.store.Put(ctx, l.key, bytes.NewReader(data)); err != nil && ctx.Err() == nil {
				log.Warn("renewing the run's lease", "error", err)
			}
		}
	}
}

// Release gives the lease up.
func (l *Lease) Release(ctx context.Context) error {
	l.cancel()
	<-l.done
	var held LeaseInfo
	if err := readJSON(ctx, l.store, l.key, &held); err == nil && held.Holder != l.info.Holder {
		return nil // taken over after it expired: not ours to delete
	}
	return l.store.Delete(ctx, l.key)
}
