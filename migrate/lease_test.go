package migrate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/storage"
	clocktesting "k8s.io/utils/clock/testing"
)

const testTTL = 30 * time.Second

var (
	discard = slog.New(slog.DiscardHandler)
	pairA   = Run{ID: "run-a", Blue: plans.Cluster{UID: "b"}, Green: plans.Cluster{UID: "g"}}
)

func onPair(id string) Run {
	return Run{ID: id, Blue: plans.Cluster{UID: "g"}, Green: plans.Cluster{UID: "b"}} // pairA's clusters, either way round
}

// within waits for a channel with a deadline (no test sleeps for time to pass: the clock is fake).
func within(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not happen", what)
	}
}

// die ends a holder's renewals without releasing: a killed ferry.
func die(l *Lease) {
	l.renewals.Stop()
}

func TestLeaseKeepsASecondRunOff(t *testing.T) {
	ctx := context.Background()
	store := fileStore(t)
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	la, err := acquireLease(ctx, store, pairA, testTTL, clk, discard)
	if err != nil {
		t.Fatal(err)
	}
	_, err = acquireLease(ctx, store, onPair("run-b"), testTTL, clk, discard)
	if !errors.Is(err, ErrLeaseHeld) || !strings.Contains(err.Error(), "run run-a (ferry pid ") {
		t.Fatalf("a second run on the same clusters: %v, want ErrLeaseHeld naming run-a and its process", err)
	}
	die(la)
	clk.Step(testTTL + time.Second)
	lb, err := acquireLease(ctx, store, onPair("run-b"), testTTL, clk, discard)
	if err != nil {
		t.Fatalf("an expired lease must be taken over: %v", err)
	}
	if lb.info.Generation != la.info.Generation+1 {
		t.Errorf("the new holder's generation is %d, want %d", lb.info.Generation, la.info.Generation+1)
	}
	// The old holder, alive after all, cannot write under its lease: the fence refuses it.
	if _, err := la.fence(ctx); !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), "run run-b") {
		t.Fatalf("the old holder's fence: %v, want ErrLeaseLost naming run-b", err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := acquireLease(ctx, store, onPair("run-c"), testTTL, clk, discard); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("the old holder's release must leave the new holder's lease: %v", err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lc, err := acquireLease(ctx, store, onPair("run-c"), testTTL, clk, discard)
	if err != nil {
		t.Fatalf("a released lease is free at once: %v", err)
	}
	lc.Release(ctx)
	ld, err := acquireLease(ctx, store, Run{ID: "run-d", Blue: plans.Cluster{UID: "x"}, Green: plans.Cluster{UID: "y"}}, testTTL, clk, discard)
	if err != nil {
		t.Fatalf("other clusters are free: %v", err)
	}
	ld.Release(ctx)
}

// Runs that take over one expired lease at once: exactly one wins, the others are told who holds it.
func TestLeaseTakeoverRace(t *testing.T) {
	for _, expired := range []bool{false, true} {
		t.Run(fmt.Sprintf("expired=%v", expired), func(t *testing.T) {
			ctx := context.Background()
			store := fileStore(t)
			clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			if expired {
				dead, err := acquireLease(ctx, store, pairA, testTTL, clk, discard)
				if err != nil {
					t.Fatal(err)
				}
				die(dead)
				clk.Step(testTTL + time.Second)
			}
			const racers = 8
			leases, errs := make([]*Lease, racers), make([]error, racers)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range racers {
				wg.Go(func() {
					<-start
					leases[i], errs[i] = acquireLease(ctx, store, onPair(fmt.Sprintf("run-%d", i)), testTTL, clk, discard)
				})
			}
			close(start)
			wg.Wait()
			winner := -1
			for i, err := range errs {
				switch {
				case err == nil && winner >= 0:
					t.Fatalf("runs %d and %d both hold the lease", winner, i)
				case err == nil:
					winner = i
				case !errors.Is(err, ErrLeaseHeld):
					t.Fatalf("run %d: %v, want ErrLeaseHeld", i, err)
				}
			}
			if winner < 0 {
				t.Fatalf("nobody took the lease: %v", errs)
			}
			for i, err := range errs {
				if i != winner && !strings.Contains(err.Error(), fmt.Sprintf("run run-%d (ferry pid", winner)) {
					t.Errorf("run %d: %v, want the holder run-%d named", i, err, winner)
				}
			}
			if _, err := leases[winner].fence(ctx); err != nil {
				t.Errorf("the winner's fence: %v", err)
			}
			leases[winner].Release(ctx)
		})
	}
}

// A holder whose lease another process rewrote stops at its next renewal: its run's context is
// cancelled naming the new holder, and its journal refuses every append from then on.
func TestLeaseTakenOverStopsTheRun(t *testing.T) {
	ctx := context.Background()
	store := fileStore(t)
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l, err := acquireLease(ctx, store, pairA, testTTL, clk, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	j, err := CreateJournal(ctx, store, pairA)
	if err != nil {
		t.Fatal(err)
	}
	j.lease = l
	e, err := j.Append(ctx, Event{State: Planned, Phase: Begin})
	if err != nil || e.Lease != 1 {
		t.Fatalf("an append under the lease: %+v, %v; want it to carry generation 1", e, err)
	}
	runCtx, stop := l.bind(ctx)
	defer stop()

	clk.Step(testTTL / 3) // a renewal that finds its own lease
	intruder, _ := json.Marshal(LeaseInfo{Run: "run-intruder", Holder: "other", Who: "pid 1 on elsewhere", Generation: 2, Expires: clk.Now().Add(time.Hour)})
	if err := store.Put(ctx, l.key, bytes.NewReader(intruder)); err != nil {
		t.Fatal(err)
	}
	clk.Step(testTTL / 3)
	within(t, "the run's context ending", runCtx.Done())
	if cause := context.Cause(runCtx); !errors.Is(cause, ErrLeaseLost) || !strings.Contains(cause.Error(), "run run-intruder (ferry pid 1 on elsewhere)") {
		t.Fatalf("the run's context ended with %v, want ErrLeaseLost naming the intruder", cause)
	}
	if _, err := j.Append(context.WithoutCancel(runCtx), Event{State: Planned, Phase: Failed}); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("an append after the lease was lost: %v, want it refused with ErrLeaseLost", err)
	}
	reopened, err := OpenJournal(ctx, store, pairA.ID)
	if err != nil || len(reopened.Events()) != 1 {
		t.Fatalf("the journal holds %d events (%v), want only the one written under the lease", len(reopened.Events()), err)
	}
	if data, _, _ := store.(storage.Swapper).ReadVersion(ctx, l.key); !bytes.Equal(data, intruder) {
		t.Errorf("the old holder wrote the lease after losing it: %s", data)
	}
}

// failingSwaps is file storage whose Swaps fail while fail is set, reporting each call.
type failingSwaps struct {
	*storage.File
	mu    sync.Mutex
	fail  bool
	calls chan struct{}
}

func (f *failingSwaps) Swap(ctx context.Context, key, version string, data []byte) (string, error) {
	f.mu.Lock()
	fail := f.fail
	f.mu.Unlock()
	if fail {
		f.calls <- struct{}{}
		return "", errors.New("storage unreachable")
	}
	return f.File.Swap(ctx, key, version, data)
}

// A holder that cannot renew stops its run before the lease could expire, so no other run can take
// it over while this one still acts.
func TestLeaseUnrenewableStopsTheRunBeforeItExpires(t *testing.T) {
	ctx := context.Background()
	file, err := storage.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	store := &failingSwaps{File: file, calls: make(chan struct{}, 10)}
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l, err := acquireLease(ctx, store, pairA, testTTL, clk, discard)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := l.bind(ctx)
	defer stop()
	store.mu.Lock()
	store.fail = true
	store.mu.Unlock()

	clk.Step(testTTL / 3)
	within(t, "a first renewal", store.calls)
	if runCtx.Err() != nil {
		t.Fatal("one failed renewal must not stop the run: the lease still has two thirds of its time")
	}
	clk.Step(testTTL / 3)
	within(t, "a second renewal", store.calls)
	within(t, "the run's context ending", runCtx.Done())
	if cause := context.Cause(runCtx); !errors.Is(cause, ErrLeaseLost) || !strings.Contains(cause.Error(), "storage unreachable") {
		t.Fatalf("the run's context ended with %v, want ErrLeaseLost with the renewal's error", cause)
	}
	l.Release(ctx)
	if clk.Since(l.renewed) >= testTTL {
		t.Fatalf("the run stopped %s after the last renewal, not before the lease expired", clk.Since(l.renewed))
	}
}

// lostAnswers is file storage whose next Swap is written but answered with an error, as a write
// whose reply timed out.
type lostAnswers struct {
	*storage.File
	mu   sync.Mutex
	lose int
}

func (f *lostAnswers) Swap(ctx context.Context, key, version string, data []byte) (string, error) {
	v, err := f.File.Swap(ctx, key, version, data)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil && f.lose > 0 {
		f.lose--
		return "", context.DeadlineExceeded
	}
	return v, err
}

// A renewal whose answer was lost leaves the holder with an old version; releasing after it must
// still release (a run that ended must not keep the next command off until the TTL runs out).
func TestLeaseReleasedAfterARenewalsAnswerWasLost(t *testing.T) {
	ctx := context.Background()
	file, err := storage.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	store := &lostAnswers{File: file}
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l, err := acquireLease(ctx, store, pairA, testTTL, clk, discard)
	if err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	store.lose = 1
	store.mu.Unlock()
	clk.Step(time.Second) // a renewal writes a later expiry
	if err := l.refresh(ctx); err == nil {
		t.Fatal("the renewal whose answer was lost reported success")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := acquireLease(ctx, store, onPair("run-b"), testTTL, clk, discard); err != nil {
		t.Fatalf("a run right after the release: %v, want the lease", err)
	}
}
