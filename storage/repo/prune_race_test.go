package repo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrykube/ferry/storage"
)

// hookStore is storage that runs before once, ahead of the first Put of a key under prefix:
// something another process does at that moment of a prune.
type hookStore struct {
	storage.Backend
	prefix string
	fired  atomic.Bool
	before func()
}

func (s *hookStore) Put(ctx context.Context, key string, r io.Reader) error {
	if strings.HasPrefix(key, s.prefix) && s.before != nil && s.fired.CompareAndSwap(false, true) {
		s.before()
	}
	return s.Backend.Put(ctx, key, r)
}

// swapHookStore is a hookStore with the conditional writes of the storage under it.
type swapHookStore struct {
	*hookStore
	sw storage.Swapper
}

func (s swapHookStore) ReadVersion(ctx context.Context, key string) ([]byte, string, error) {
	return s.sw.ReadVersion(ctx, key)
}

func (s swapHookStore) Swap(ctx context.Context, key, version string, data []byte) (string, error) {
	return s.sw.Swap(ctx, key, version, data)
}

// hook makes the fixture's storage run before ahead of the first Put under the repository's dir;
// with swap, the storage keeps its conditional writes (storage.Swapper), which the prune lock uses
// when it can.
func (f *fixture) hook(dir string, swap bool) *hookStore {
	hs := &hookStore{Backend: f.store, prefix: DefaultPrefix + dir}
	f.store = hs
	if swap {
		f.store = swapHookStore{hs, hs.Backend.(storage.Swapper)}
	}
	return hs
}

// withAndWithoutSwap runs test on storage with conditional writes and on storage without.
func withAndWithoutSwap(t *testing.T, test func(t *testing.T, swap bool)) {
	for _, swap := range []bool{true, false} {
		t.Run(fmt.Sprintf("swap=%v", swap), func(t *testing.T) { test(t, swap) })
	}
}

// backupDuring is a KeepFunc that hands keep the chunks of the backups listed first, then runs a
// whole backup of data, as a backup that starts after the prune listed the writers' locks and
// records its manifest and releases its lock before the prune marks. refs gets that backup's refs.
func backupDuring(t *testing.T, f *fixture, listed []ChunkRef, data []byte, refs *[]ChunkRef) KeepFunc {
	return func(ctx context.Context, keep func([]ChunkRef)) error {
		keep(listed)
		w, err := f.open(t, f.opts(true)).NewWriter(ctx)
		if err != nil {
			return err
		}
		if *refs, err = w.Write(ctx, bytes.NewReader(data)); err != nil {
			return err
		}
		if err := w.Flush(ctx); err != nil {
			return err
		}
		t.Logf("backup during the prune: %+v", w.Stats())
		return w.Close(ctx)
	}
}

// TestPruneBackupDuringKeep: a backup that runs whole while the prune reads the kept backups, and
// dedupes against packs only a deleted backup used, still reads after that prune and after the
// next one (which finds it among the kept backups).
func TestPruneBackupDuringKeep(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, false)
	r := f.init(t)
	old := randomData(10, 3<<20)
	write(t, r, old) // a backup that retention deleted just before the prune

	var refsW []ChunkRef
	res, err := f.open(t, f.opts(true)).Prune(ctx, backupDuring(t, f, nil, old, &refsW))
	t.Logf("prune: %+v %v", res, err)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.open(t, f.opts(true)).Verify(ctx, refsW); err != nil {
		t.Fatalf("the backup written during the prune no longer reads: %v", err)
	}
	res, err = f.open(t, f.opts(true)).Prune(ctx, keepRefs(refsW))
	t.Logf("next prune: %+v %v", res, err)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, f.open(t, f.opts(true)), refsW); !bytes.Equal(got, old) {
		t.Error("the backup written during the first prune does not read back after the next")
	}
}

// TestPruneNewPacksDuringKeep: the same with data nobody stored before: the backup's own packs,
// newer than the prune, are not condemned, with the default skew margin or none.
func TestPruneNewPacksDuringKeep(t *testing.T) {
	for _, margin := range []time.Duration{0, -1} {
		t.Run("margin="+margin.String(), func(t *testing.T) {
			ctx := context.Background()
			f := newFixture(t, false)
			r := f.init(t)
			kept := randomData(1, 1<<20)
			refsKept, _ := write(t, r, kept)
			data := randomData(20, 3<<20)
			o := f.opts(true)
			o.SkewMargin = margin // 0: the default 10 minutes; -1: none

			var refsW []ChunkRef
			res, err := f.open(t, o).Prune(ctx, backupDuring(t, f, refsKept, data, &refsW))
			t.Logf("prune: %+v %v", res, err)
			if err != nil {
				t.Fatal(err)
			}
			if res.Condemned != 0 {
				t.Errorf("prune: %d packs condemned, want none: the only unused ones are newer than the prune", res.Condemned)
			}
			if err := f.open(t, f.opts(true)).Verify(ctx, refsW); err != nil {
				t.Fatalf("the backup written during the prune no longer reads: %v", err)
			}
			res, err = f.open(t, o).Prune(ctx, keepRefs(refsKept, refsW))
			t.Logf("next prune: %+v %v", res, err)
			if err != nil {
				t.Fatal(err)
			}
			rd := f.open(t, f.opts(true))
			if got := readAll(t, rd, refsW); !bytes.Equal(got, data) {
				t.Error("the backup written during the first prune does not read back after the next")
			}
			if got := readAll(t, rd, refsKept); !bytes.Equal(got, kept) {
				t.Error("the kept backup does not read back")
			}
		})
	}
}

// condemnedInUse leaves a condemned record of packs that a complete backup uses: the backup's
// writer deduped against them while a prune that kept nothing condemned them. It returns the
// backup's refs.
func condemnedInUse(t *testing.T, f *fixture, data []byte) []ChunkRef {
	t.Helper()
	ctx := context.Background()
	write(t, f.open(t, f.opts(true)), data) // deleted by retention before the prune
	w, err := f.open(t, f.opts(true)).NewWriter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	refs, err := w.Write(ctx, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := f.open(t, f.opts(true)).Prune(ctx, keepRefs())
	if err != nil || res.Condemned == 0 || res.Deleted != 0 {
		t.Fatalf("prune while the writer runs: %v %+v, want its packs condemned and none deleted", err, res)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return refs
}

// TestPruneLockTakenOver: a prune A stalls longer than StaleAfter after it loaded the index; a
// second prune B takes the lock over and deletes packs of a backup retention deleted meanwhile,
// which A had read as kept. A stops before it rewrites the index or deletes anything, so that no
// index names a deleted pack and a later backup of the same data reads.
func TestPruneLockTakenOver(t *testing.T) { withAndWithoutSwap(t, testPruneLockTakenOver) }

func testPruneLockTakenOver(t *testing.T, swap bool) {
	ctx := context.Background()
	f := newFixture(t, false)
	hs := f.hook(condemnedDir, swap) // A marks: B runs meanwhile
	f.init(t)
	x := randomData(30, 2<<20)
	// Backup X, deleted while A runs, and one nobody keeps: A has something to condemn.
	refsX := condemnedInUse(t, f, x)
	write(t, f.open(t, f.opts(true)), randomData(31, 1<<20))

	now := time.Now()
	oa := f.opts(true)
	oa.Now = func() time.Time { return now }
	ob := f.opts(true)
	ob.Now = func() time.Time { return now.Add(31 * time.Minute) }
	hs.before = func() {
		res, err := f.open(t, ob).Prune(ctx, keepRefs())
		t.Logf("prune B: %+v %v", res, err)
		if err != nil {
			t.Errorf("prune B: %v", err)
		}
	}
	res, err := f.open(t, oa).Prune(ctx, keepRefs(refsX))
	t.Logf("prune A: %+v %v", res, err)
	if !hs.fired.Load() {
		t.Fatal("prune A condemned nothing: B never ran")
	}
	if !errors.Is(err, ErrLocked) {
		t.Errorf("prune A: %v, want ErrLocked: its lock was taken over", err)
	}
	// A later backup of the same data dedupes against the index.
	refsW, st := write(t, f.open(t, f.opts(true)), x)
	t.Logf("backup W: %+v", st)
	if err := f.open(t, f.opts(true)).Verify(ctx, refsW); err != nil {
		t.Errorf("backup W, recorded as complete, does not read: %v", err)
	}
}

// TestPruneLockHeldByOther: a prune whose lock another prune took over while it marked deletes
// no pack, writes no index, and leaves the other's lock in place.
func TestPruneLockHeldByOther(t *testing.T) { withAndWithoutSwap(t, testPruneLockHeldByOther) }

func testPruneLockHeldByOther(t *testing.T, swap bool) {
	ctx := context.Background()
	f := newFixture(t, false)
	hs := f.hook(condemnedDir, swap)
	f.init(t)
	refsX := condemnedInUse(t, f, randomData(32, 2<<20)) // a condemned record A sweeps
	write(t, f.open(t, f.opts(true)), randomData(33, 1<<20))
	lockKey := DefaultPrefix + locksDir + pruneLock
	indexBefore := listKeys(t, f, DefaultPrefix+indexDir)
	packsBefore, _ := packsOf(t, f, f.open(t, f.opts(true)), nil)

	now := time.Now()
	oa := f.opts(true)
	oa.Now = func() time.Time { return now }
	ob := f.opts(true)
	ob.Now = func() time.Time { return now.Add(31 * time.Minute) }
	var theirs []byte
	hs.before = func() {
		if _, err := f.open(t, ob).takePruneLock(ctx); err != nil {
			t.Errorf("take the stale lock over: %v", err)
		}
		theirs = getKey(t, f, lockKey)
	}
	res, err := f.open(t, oa).Prune(ctx, keepRefs(refsX[:1]))
	t.Logf("prune A: %+v %v", res, err)
	if !hs.fired.Load() {
		t.Fatal("prune A condemned nothing: the lock was never taken over")
	}
	if !errors.Is(err, ErrLocked) || res.Deleted != 0 {
		t.Errorf("prune A: %v %+v: want ErrLocked and nothing deleted", err, res)
	}
	if got := getKey(t, f, lockKey); !bytes.Equal(got, theirs) {
		t.Errorf("the other prune's lock is %q, want it as it wrote it: %q", got, theirs)
	}
	packsAfter, _ := packsOf(t, f, f.open(t, f.opts(true)), nil)
	for p := range packsBefore {
		if !packsAfter[p] {
			t.Errorf("pack %s deleted by the prune that lost its lock", p)
		}
	}
	indexAfter := listKeys(t, f, DefaultPrefix+indexDir)
	if strings.Join(indexAfter, " ") != strings.Join(indexBefore, " ") {
		t.Errorf("index objects %v, want them untouched: %v", indexAfter, indexBefore)
	}
}

// TestPruneRenewsLock: a prune renews its lock while it runs, as writers do theirs, so that a
// long prune is not taken for a dead one.
func TestPruneRenewsLock(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, false)
	write(t, f.init(t), randomData(34, 1<<20))
	var ticks atomic.Int64
	start := time.Now()
	o := f.opts(true)
	o.Now = func() time.Time { return start.Add(time.Duration(ticks.Add(1)) * time.Minute) }
	o.RefreshEvery = time.Millisecond
	lockKey := DefaultPrefix + locksDir + pruneLock
	_, err := f.open(t, o).Prune(ctx, func(ctx context.Context, keep func([]ChunkRef)) error {
		// A slow listing of the kept backups: the lock must be renewed meanwhile.
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			var rec lockRecord
			if err := json.Unmarshal(getKey(t, f, lockKey), &rec); err != nil {
				return err
			}
			if rec.Refreshed.After(rec.Start) {
				return nil
			}
			time.Sleep(time.Millisecond)
		}
		return errors.New("the prune lock was never renewed")
	})
	if err != nil {
		t.Fatal(err)
	}
	if keys := listKeys(t, f, DefaultPrefix+locksDir); len(keys) != 0 {
		t.Errorf("locks left after the prune: %v", keys)
	}
}

func listKeys(t *testing.T, f *fixture, prefix string) []string {
	t.Helper()
	var keys []string
	if err := f.store.List(context.Background(), prefix, func(o storage.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

func getKey(t *testing.T, f *fixture, key string) []byte {
	t.Helper()
	rc, err := f.store.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestPruneReuploadedCondemnedPack: in an unencrypted repository a pack's bytes, and so its name,
// follow from its chunks. A writer that starts after a prune condemned a backup's packs uploads
// that data again (it never dedupes against condemned packs); the next prune, while the writer
// still runs, deletes the condemned packs, and must not delete the writer's.
func TestPruneReuploadedCondemnedPack(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, false)
	data := randomData(35, 3<<20)
	write(t, f.init(t), data) // deleted by retention
	res, err := f.open(t, f.opts(true)).Prune(ctx, keepRefs())
	if err != nil || res.Condemned == 0 {
		t.Fatalf("prune: %v %+v, want the packs condemned", err, res)
	}
	w, err := f.open(t, f.opts(true)).NewWriter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	refs, err := w.Write(ctx, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.NewBytes != int64(len(data)) {
		t.Fatalf("writer: %+v, want every byte uploaded again", st)
	}
	// The writer's backup is not recorded yet.
	res, err = f.open(t, f.opts(true)).Prune(ctx, keepRefs())
	t.Logf("prune while the writer runs: %+v %v", res, err)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.open(t, f.opts(true)).Verify(ctx, refs); err != nil {
		t.Errorf("the writer's backup does not read: %v", err)
	}
}

// TestPruneReuploadedUnindexedPack: a writer died after uploading pack U, before indexing it; a
// retry of the same backup packs the same bytes while a prune runs (after the prune listed the
// packs). An unencrypted pack's name follows from its bytes: stored over U, the prune would delete
// it as an old unindexed pack though the retry's index names it. A pack is never stored over
// another: one whose name is taken gets a name of its own.
func TestPruneReuploadedUnindexedPack(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, false)
	hs := f.hook(condemnedDir, true)
	f.init(t)
	write(t, f.open(t, f.opts(true)), randomData(40, 512<<10)) // unused: something to condemn

	data := randomData(41, 512<<10) // less than a pack: one pack, same bytes each time
	d, err := f.open(t, f.opts(true)).NewWriter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Write(ctx, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	d.send(ctx)
	close(d.batches)
	d.wg.Wait()
	d.flushed = true
	close(d.stop)
	d.stopped.Wait()
	f.store.Delete(ctx, d.lockKey) // it died; its lock went stale long ago

	o := f.opts(true)
	later := time.Now().Add(time.Hour)
	o.Now = func() time.Time { return later }
	var refs []ChunkRef
	hs.before = func() {
		w, err := f.open(t, f.opts(true)).NewWriter(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		refs, err = w.Write(ctx, bytes.NewReader(data))
		if err != nil {
			t.Error(err)
		}
		if err := w.Flush(ctx); err != nil {
			t.Error(err)
		}
		t.Logf("retry: %+v", w.Stats())
		w.Close(ctx)
	}
	res, err := f.open(t, o).Prune(ctx, keepRefs())
	t.Logf("prune: %+v %v", res, err)
	if !hs.fired.Load() {
		t.Fatal("hook never fired")
	}
	if err := f.open(t, f.opts(true)).Verify(ctx, refs); err != nil {
		t.Errorf("the retried backup does not read: %v", err)
	}
}

// lockFailStore fails the Puts of writer locks while failing is set.
type lockFailStore struct {
	storage.Backend
	failing atomic.Bool
}

func (s *lockFailStore) Put(ctx context.Context, key string, r io.Reader) error {
	if strings.HasPrefix(key, DefaultPrefix+locksDir) && s.failing.Load() {
		return errors.New("503 Service Unavailable")
	}
	return s.Backend.Put(ctx, key, r)
}

// TestWriterHoldsItsLock: a writer whose lock renewal fails tries again, and goes on holding it;
// one whose lock a prune may have taken for a dead writer's (not renewed for longer than the
// staleness less the skew margin) says so, and fails: the backup must not be recorded, as a prune
// may have deleted packs it references.
func TestWriterHoldsItsLock(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, false)
	f.init(t)
	store := &lockFailStore{Backend: f.store}
	f.store = store
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	o := f.opts(true)
	o.RefreshEvery, o.SkewMargin = 20*time.Millisecond, time.Minute
	o.Now = func() time.Time { return time.Unix(0, now.Load()) }
	w, err := f.open(t, o).NewWriter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	store.failing.Store(true)
	time.Sleep(100 * time.Millisecond) // renewals fail
	now.Add(int64(5 * time.Minute))
	store.failing.Store(false)
	time.Sleep(100 * time.Millisecond) // and succeed again
	if err := w.Held(); err != nil {
		t.Fatalf("a writer whose renewals failed for a while: %v, want it holding its lock", err)
	}
	// A writer whose upload failed (the backup streams the volume again with another) keeps
	// renewing its lock until Close: the backup's other writers are what it records.
	failed, err := f.open(t, o).NewWriter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer failed.Close(ctx)
	failed.cancel(errors.New("upload pack x: connection reset by peer"))
	time.Sleep(100 * time.Millisecond)
	if err := failed.Held(); err != nil {
		t.Fatalf("a writer whose upload failed: %v, want its lock held", err)
	}
	if _, err := w.Write(ctx, bytes.NewReader(randomData(50, 256<<10))); err != nil {
		t.Fatalf("a writer whose renewals failed for a while: %v", err)
	}
	store.failing.Store(true)
	now.Add(int64(30*time.Minute - time.Minute + time.Second))
	time.Sleep(100 * time.Millisecond)
	if err := w.Held(); err == nil || !strings.Contains(err.Error(), "prune may have taken it") {
		t.Errorf("a writer whose lock was not renewed for 29 minutes: %v, want it no longer held", err)
	}
}
