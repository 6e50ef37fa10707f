package migrate

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/ferrykube/ferry/internal/ticker"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/storage"
	"k8s.io/utils/clock"
)

// LeasesPrefix holds one lease per pair of clusters being driven.
const LeasesPrefix = "metadata/ferry/leases/"

// DefaultLeaseTTL is how long a lease lasts without renewal: a killed ferry's run can be resumed
// that long after it died.
const DefaultLeaseTTL = 30 * time.Second

// LeaseInfo is what a lease file holds.
type LeaseInfo struct {
	Run    string `json:"run"`
	Holder string `json:"holder"` // random, one per process
	// Who names the holding process for people: its pid and host.
	Who string `json:"who,omitempty"`
	// Generation is the fencing token: each new holder writes one more than the last, and every
	// journal event carries the generation it was written under.
	Generation int64     `json:"generation"`
	Expires    time.Time `json:"expires"`
	// Released is set by a holder that gave the lease up: the next run takes it without a warning.
	Released bool `json:"released,omitempty"`
}

func (i LeaseInfo) String() string {
	if i.Who == "" {
		return "run " + i.Run
	}
	return fmt.Sprintf("run %s (ferry %s)", i.Run, i.Who)
}

// Lease keeps other runs off two clusters while a run drives them. Every write of the lease is a
// compare-and-swap against the version this holder last wrote, so a lease taken over is never
// written again by its old holder; the old holder learns it at its next renewal or journal
// append, whichever comes first, and its run's context is cancelled (as restic's
// monitorLockRefresh does).
type Lease struct {
	store storage.Swapper
	where string
	key   string
	ttl   time.Duration
	clock clock.WithTicker
	log   *slog.Logger

	mu       sync.Mutex
	info     LeaseInfo
	version  string    // of the lease as this holder last wrote it
	renewed  time.Time // when it was last written
	released bool

	// lostCtx ends, with the reason as its cause, when the lease is lost.
	lostCtx  context.Context
	loseWith context.CancelCauseFunc

	renewals *ticker.Loop
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

// ErrLeaseLost matches the errors of a run whose lease was taken over or could not be renewed.
var ErrLeaseLost = errors.New("the run lost its lease on these clusters")

// AcquireLease takes the lease of the run's clusters, or fails with ErrLeaseHeld (naming the
// holder) while another holder's lease is live; an expired lease (its ferry died) is taken over.
// The lease is renewed in the background until Release.
func AcquireLease(ctx context.Context, store storage.Backend, run Run, ttl time.Duration, log *slog.Logger) (*Lease, error) {
	return acquireLease(ctx, store, run, ttl, clock.RealClock{}, log)
}

func acquireLease(ctx context.Context, store storage.Backend, run Run, ttl time.Duration, clk clock.WithTicker, log *slog.Logger) (*Lease, error) {
	sw, ok := store.(storage.Swapper)
	if !ok {
		return nil, fmt.Errorf("storage %s cannot hold a run's lease: it has no conditional writes", store)
	}
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	holder := make([]byte, 8)
	if _, err := rand.Read(holder); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	l := &Lease{store: sw, where: store.String(), key: leaseKey(run.Blue, run.Green), ttl: ttl, clock: clk, log: log,
		info: LeaseInfo{Run: run.ID, Holder: hex.EncodeToString(holder), Who: fmt.Sprintf("pid %d on %s", os.Getpid(), host)}}
	if err := l.take(ctx); err != nil {
		return nil, err
	}
	l.lostCtx, l.loseWith = context.WithCancelCause(context.Background())
	l.renewals = ticker.Start(context.WithoutCancel(ctx), clk, ttl/3, l.renew)
	return l, nil
}

// take writes the lease from the version read: absent, released or expired. Of several runs
// taking it at once, the store lets one write win; the others read it again and find it held.
func (l *Lease) take(ctx context.Context) error {
	for attempt := 0; attempt < 3; attempt++ {
		data, version, err := l.store.ReadVersion(ctx, l.key)
		var held LeaseInfo
		switch {
		case errors.Is(err, storage.ErrNotExist):
			version = ""
		case err != nil:
			return fmt.Errorf("lease %s: %w", l.key, err)
		default:
			if err := json.Unmarshal(data, &held); err != nil {
				return fmt.Errorf("lease %s in %s: %w", l.key, l.where, err)
			}
		}
		now := l.clock.Now()
		if version != "" && !held.Released && now.Before(held.Expires) {
			return fmt.Errorf("%s holds the lease of these clusters until %s: %w", held, held.Expires.Local().Format(time.RFC3339), ErrLeaseHeld)
		}
		l.info.Generation = held.Generation + 1
		l.info.Expires = now.Add(l.ttl).UTC()
		data, _ = json.Marshal(l.info)
		newVersion, err := l.store.Swap(ctx, l.key, version, data)
		if errors.Is(err, storage.ErrChanged) {
			continue // another run wrote it first: read what it wrote
		}
		if err != nil {
			return fmt.Errorf("lease %s: %w", l.key, err)
		}
		if version != "" && !held.Released {
			l.log.Warn("took over an expired lease", "run", held.Run, "holder", held.Who, "expired", held.Expires)
		}
		l.version, l.renewed = newVersion, now
		return nil
	}
	return fmt.Errorf("lease %s in %s: it changed at each of 3 attempts to take it: %w", l.key, l.where, ErrLeaseHeld)
}

// renew writes the lease again, every third of its TTL, and says whether to go on. A renewal that
// finds another holder loses the lease at once; renewals that fail lose it before it could
// expire, so that the run stops before another may take over.
func (l *Lease) renew(ctx context.Context) bool {
	// The next try comes a third of the TTL after this one began, not after it ended.
	began := l.clock.Now()
	err := l.refresh(ctx)
	switch {
	case err == nil:
		return true
	case ctx.Err() != nil, errors.Is(err, ErrLeaseLost):
		return false
	}
	l.log.Warn("renewing the run's lease", "error", err)
	l.mu.Lock()
	since := l.renewed
	l.mu.Unlock()
	if began.Sub(since)+l.ttl/3 >= l.ttl { // the next try would come too late
		l.lose(fmt.Errorf("the lease was last renewed at %s and renewing it fails: %v: %w", since.Local().Format(time.RFC3339), err, ErrLeaseLost))
		return false
	}
	return true
}

// refresh writes the lease with a new expiry, only over the version this holder wrote last.
func (l *Lease) refresh(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := context.Cause(l.lostCtx); err != nil {
		return err
	}
	if l.released {
		return fmt.Errorf("lease %s was released: %w", l.key, ErrLeaseLost)
	}
	now := l.clock.Now()
	info := l.info
	info.Expires = now.Add(l.ttl).UTC()
	data, _ := json.Marshal(info)
	// A write that hangs must not outlast the lease.
	wctx, cancel := context.WithTimeout(ctx, l.ttl/3)
	version, err := l.writeOwn(wctx, data)
	cancel()
	if err == nil {
		l.info, l.version, l.renewed = info, version, now
		return nil
	}
	if !errors.Is(err, storage.ErrChanged) {
		return err
	}
	who := "another process"
	if current, _, rerr := l.readHeld(ctx); rerr == nil {
		who = current.String()
	}
	l.loseLocked(fmt.Errorf("%s took the lease of these clusters over (%s): %w", who, l.key, ErrLeaseLost))
	return context.Cause(l.lostCtx)
}

// writeOwn writes the lease over the version this holder wrote last. An earlier write whose
// answer was lost (a timeout) may have landed all the same: a lease that is still this holder's
// own is written over from the version found.
func (l *Lease) writeOwn(ctx context.Context, data []byte) (string, error) {
	version, err := l.store.Swap(ctx, l.key, l.version, data)
	if !errors.Is(err, storage.ErrChanged) {
		return version, err
	}
	current, cversion, rerr := l.readHeld(ctx)
	if rerr != nil || current.Holder != l.info.Holder || current.Generation != l.info.Generation || current.Released {
		return "", err
	}
	l.version = cversion
	return l.store.Swap(ctx, l.key, cversion, data)
}

func (l *Lease) readHeld(ctx context.Context) (LeaseInfo, string, error) {
	var held LeaseInfo
	data, version, err := l.store.ReadVersion(ctx, l.key)
	if err == nil {
		err = json.Unmarshal(data, &held)
	}
	return held, version, err
}

func (l *Lease) lose(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.loseLocked(err)
}

func (l *Lease) loseLocked(err error) {
	if context.Cause(l.lostCtx) == nil {
		l.log.Error("stopping: the run lost its lease", "error", err)
		l.loseWith(err)
	}
}

// fence lets a journal append through only while this process holds the lease: it renews the
// lease over the version this holder wrote last (a conditional write, which fails once anyone
// else wrote it) and returns the generation the event carries. A run that renewed its lease
// holds it for a TTL from then, so the event written next is the holder's.
func (l *Lease) fence(ctx context.Context) (int64, error) {
	if err := l.refresh(ctx); err != nil {
		if !errors.Is(err, ErrLeaseLost) {
			err = fmt.Errorf("renew the lease %s: %w", l.key, err)
		}
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.info.Generation, nil
}

// Lost returns why the lease was lost, or nil while it is held.
func (l *Lease) Lost() error {
	if l == nil {
		return nil
	}
	return context.Cause(l.lostCtx)
}

// bind returns a context that ends, with the lease's loss as its cause, when the lease is lost.
func (l *Lease) bind(ctx context.Context) (context.Context, context.CancelFunc) {
	if l == nil {
		return context.WithCancel(ctx)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(l.lostCtx, func() { cancel(context.Cause(l.lostCtx)) })
	return ctx, func() { stop(); cancel(nil) }
}

// Release gives the lease up: it is marked released, unless another holder has it by now.
func (l *Lease) Release(ctx context.Context) error {
	l.renewals.Stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released || context.Cause(l.lostCtx) != nil {
		return nil
	}
	l.released = true
	info := l.info
	info.Released, info.Expires = true, l.clock.Now().UTC()
	data, _ := json.Marshal(info)
	if _, err := l.writeOwn(ctx, data); err != nil && !errors.Is(err, storage.ErrChanged) {
		return fmt.Errorf("release the lease %s: %w", l.key, err)
	}
	return nil // a changed lease was taken over after it expired: not ours to touch
}

// LeaseLost returns why the run lost its lease, or nil.
func (r *Runner) LeaseLost() error { return r.lease.Lost() }
