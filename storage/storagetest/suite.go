// Package storagetest is the one conformance suite every storage backend passes. A backend's test
// supplies only a factory; the suite checks the behaviour callers rely on.
package storagetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/ferrykube/ferry/storage"
)

// Factory returns an empty backend for one subtest.
type Factory func(t *testing.T) storage.Backend

// Run runs the conformance suite. The 1 GiB round trip is left out with -short.
func Run(t *testing.T, newBackend Factory) {
	t.Run("RoundTrip", func(t *testing.T) { testRoundTrip(t, newBackend(t)) })
	t.Run("Big", func(t *testing.T) {
		if testing.Short() {
			t.Skip("1 GiB round trip runs without -short")
		}
		testBig(t, newBackend(t))
	})
	t.Run("Replace", func(t *testing.T) { testReplace(t, newBackend(t)) })
	t.Run("NotExist", func(t *testing.T) { testNotExist(t, newBackend(t)) })
	t.Run("BadKeys", func(t *testing.T) { testBadKeys(t, newBackend(t)) })
	t.Run("ListMany", func(t *testing.T) { testListMany(t, newBackend(t)) })
	t.Run("CreateRace", func(t *testing.T) { testCreateRace(t, newBackend(t)) })
	t.Run("PutRace", func(t *testing.T) { testPutRace(t, newBackend(t)) })
	t.Run("CanceledPut", func(t *testing.T) { testCanceledPut(t, newBackend(t)) })
	t.Run("Swap", func(t *testing.T) { testSwap(t, swapper(t, newBackend(t))) })
	t.Run("SwapRace", func(t *testing.T) { testSwapRace(t, swapper(t, newBackend(t))) })
	t.Run("Copy", func(t *testing.T) { testCopy(t, newBackend(t)) })
}

// testCopy: a copy holds the source's bytes under keys of any characters, replaces what the
// target held, outlives the source's delete and replace, and a missing source says so.
func testCopy(t *testing.T, b storage.Backend) {
	c, ok := b.(storage.Copier)
	if !ok {
		t.Fatalf("%s does not implement storage.Copier: a bucket's unchanged objects would move again", b)
	}
	ctx := context.Background()
	src, dst := "copy/from/a b+c%20ü.bin", "copy/to/a b+c%20ü.bin"
	put(t, b, src, []byte("the source"))
	put(t, b, dst, []byte("what the target held before"))
	if err := c.Copy(ctx, src, dst, int64(len("the source"))); err != nil {
		t.Fatalf("Copy(%s, %s): %v", src, dst, err)
	}
	put(t, b, src, []byte("the source, replaced"))
	if got := string(get(t, b, dst)); got != "the source" {
		t.Fatalf("the copy holds %q after the source was replaced, want %q", got, "the source")
	}
	if err := b.Delete(ctx, src); err != nil {
		t.Fatal(err)
	}
	if got := string(get(t, b, dst)); got != "the source" {
		t.Fatalf("the copy holds %q after the source was deleted, want %q", got, "the source")
	}
	if info, err := b.Stat(ctx, dst); err != nil || info.Size != int64(len("the source")) {
		t.Fatalf("Stat(%s) = %+v, %v", dst, info, err)
	}
	if err := c.Copy(ctx, "missing/key", dst, 1); !errors.Is(err, storage.ErrNotExist) {
		t.Fatalf("Copy of a missing key: got %v, want an error matching storage.ErrNotExist", err)
	}
	if got := string(get(t, b, dst)); got != "the source" {
		t.Fatalf("a failed copy changed the target: %q", got)
	}
}

// swapper is the backend's compare-and-swap: every backend has one, since a run's lease needs it.
func swapper(t *testing.T, b storage.Backend) swapBackend {
	t.Helper()
	s, ok := b.(storage.Swapper)
	if !ok {
		t.Fatalf("%s does not implement storage.Swapper: a run's lease cannot exclude other runs there", b)
	}
	return swapBackend{b, s}
}

type swapBackend struct {
	storage.Backend
	storage.Swapper
}

func testSwap(t *testing.T, b swapBackend) {
	ctx := context.Background()
	changed := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, storage.ErrChanged) {
			t.Fatalf("%s: %v, want an error matching storage.ErrChanged", what, err)
		}
	}
	content := func(want string) {
		t.Helper()
		data, _, err := b.ReadVersion(ctx, "swap/k")
		if err != nil || string(data) != want {
			t.Fatalf("ReadVersion(swap/k) = %q, %v; want %q", data, err, want)
		}
	}
	if _, _, err := b.ReadVersion(ctx, "swap/k"); !errors.Is(err, storage.ErrNotExist) {
		t.Fatalf("ReadVersion of a missing key: %v, want storage.ErrNotExist", err)
	}
	_, err := b.Swap(ctx, "swap/k", `"some-version"`, []byte("x"))
	changed("Swap of a missing key from a version", err)

	v1, err := b.Swap(ctx, "swap/k", "", []byte("first"))
	if err != nil || v1 == "" {
		t.Fatalf("Swap from no version (create) = %q, %v", v1, err)
	}
	data, v, err := b.ReadVersion(ctx, "swap/k")
	if err != nil || string(data) != "first" || v != v1 {
		t.Fatalf("ReadVersion = %q, %q, %v; want %q at the version Swap returned, %q", data, v, err, "first", v1)
	}
	_, err = b.Swap(ctx, "swap/k", "", []byte("again"))
	changed("a second Swap from no version", err)
	content("first")

	v2, err := b.Swap(ctx, "swap/k", v1, []byte("second"))
	if err != nil || v2 == "" || v2 == v1 {
		t.Fatalf("Swap from the current version = %q, %v; want a new version", v2, err)
	}
	_, err = b.Swap(ctx, "swap/k", v1, []byte("stale"))
	changed("Swap from a version that was replaced", err)
	content("second")

	// A Put replaces the version too: a Swap from the one before fails.
	put(t, b, "swap/k", []byte("put"))
	_, err = b.Swap(ctx, "swap/k", v2, []byte("stale"))
	changed("Swap after a Put", err)
	content("put")
	if string(get(t, b, "swap/k")) != "put" {
		t.Fatal("Get and ReadVersion disagree")
	}
}

func testSwapRace(t *testing.T, b swapBackend) {
	ctx := context.Background()
	const racers = 8
	race := func(version string) (winner int, winnerVersion string) {
		t.Helper()
		errs, versions := make([]error, racers), make([]string, racers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range racers {
			wg.Go(func() {
				<-start
				versions[i], errs[i] = b.Swap(ctx, "swaprace/k", version, []byte(fmt.Sprintf("writer %d from %q", i, version)))
			})
		}
		close(start)
		wg.Wait()
		winner = -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("from version %q writers %d and %d both swapped", version, winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, storage.ErrChanged):
				t.Fatalf("writer %d: %v, want nil or an error matching storage.ErrChanged", i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("from version %q no writer swapped: %v", version, errs)
		}
		data, v, err := b.ReadVersion(ctx, "swaprace/k")
		if want := fmt.Sprintf("writer %d from %q", winner, version); err != nil || string(data) != want || v != versions[winner] {
			t.Fatalf("after the race the record is %q at %q (%v), want the winner's %q at %q", data, v, err, want, versions[winner])
		}
		return winner, versions[winner]
	}
	_, v := race("") // all create
	race(v)          // all replace the same version
}

// Stream returns n deterministic pseudo-random bytes for seed, generated as they are read.
func Stream(seed uint64, n int64) io.Reader {
	var s [32]byte
	for i := range 4 {
		s[i*8] = byte(seed >> (8 * i))
	}
	return io.LimitReader(rand.NewChaCha8(s), n)
}

func sum(t *testing.T, r io.Reader) ([32]byte, int64) {
	t.Helper()
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return [32]byte(h.Sum(nil)), n
}

func put(t *testing.T, b storage.Backend, key string, data []byte) {
	t.Helper()
	if err := b.Put(context.Background(), key, bytes.NewReader(data)); err != nil {
		t.Fatalf("Put(%s): %v", key, err)
	}
}

func get(t *testing.T, b storage.Backend, key string) []byte {
	t.Helper()
	rc, err := b.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("Get(%s): read: %v", key, err)
	}
	return data
}

// onlyReader hides every interface but io.Reader, so backends see a stream of unknown size.
type onlyReader struct{ io.Reader }

func roundTrip(t *testing.T, b storage.Backend, key string, seed uint64, size int64) {
	t.Helper()
	ctx := context.Background()
	h := sha256.New()
	if err := b.Put(ctx, key, onlyReader{io.TeeReader(Stream(seed, size), h)}); err != nil {
		t.Fatalf("Put(%s, %d bytes): %v", key, size, err)
	}
	want := [32]byte(h.Sum(nil))
	info, err := b.Stat(ctx, key)
	if err != nil {
		t.Fatalf("Stat(%s): %v", key, err)
	}
	if info.Size != size || info.Key != key {
		t.Fatalf("Stat(%s) = key %q size %d, want key %q size %d", key, info.Key, info.Size, key, size)
	}
	rc, err := b.Get(ctx, key)
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	defer rc.Close()
	got, n := sum(t, rc)
	if n != size || got != want {
		t.Fatalf("Get(%s) read %d bytes sha256 %x, want %d bytes sha256 %x", key, n, got, size, want)
	}
}

func testRoundTrip(t *testing.T, b storage.Backend) {
	for _, tc := range []struct {
		name string
		size int64
	}{
		{"empty", 0},
		{"small", 1000},
		{"multipart", 3*storage.DefaultPartSize/2 + 17}, // more than one part, last one short
	} {
		t.Run(tc.name, func(t *testing.T) { roundTrip(t, b, "rt/"+tc.name+".bin", uint64(tc.size), tc.size) })
	}
}

func testBig(t *testing.T, b storage.Backend) {
	roundTrip(t, b, "big/1GiB.bin", 42, 1<<30)
}

func testReplace(t *testing.T, b storage.Backend) {
	put(t, b, "replace/k", []byte("first version, longer"))
	put(t, b, "replace/k", []byte("second"))
	if got := string(get(t, b, "replace/k")); got != "second" {
		t.Fatalf("after two Puts got %q, want %q", got, "second")
	}
}

func testNotExist(t *testing.T, b storage.Backend) {
	ctx := context.Background()
	check := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, storage.ErrNotExist) {
			t.Fatalf("%s of a missing key: got %v, want an error matching storage.ErrNotExist", op, err)
		}
		var ne *storage.NotExistError
		if !errors.As(err, &ne) || ne.Key != "missing/key" {
			t.Fatalf("%s of a missing key: got %#v, want *storage.NotExistError naming missing/key", op, err)
		}
	}
	_, err := b.Get(ctx, "missing/key")
	check("Get", err)
	_, err = b.Stat(ctx, "missing/key")
	check("Stat", err)
	if err := b.Delete(ctx, "missing/key"); err != nil {
		t.Fatalf("Delete of a missing key: %v, want nil", err)
	}
	put(t, b, "missing/key", []byte("x"))
	if err := b.Delete(ctx, "missing/key"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err = b.Stat(ctx, "missing/key")
	check("Stat after Delete", err)
	// A "folder" is not an object.
	put(t, b, "missing/key/below", []byte("x"))
	_, err = b.Get(ctx, "missing/key")
	check("Get of a key that is only a prefix", err)
}

func testBadKeys(t *testing.T, b storage.Backend) {
	ctx := context.Background()
	for _, key := range []string{"", "/abs", "../escape", "a/../../b", "trailing/", "a//b", "./a"} {
		if err := b.Put(ctx, key, strings.NewReader("x")); err == nil {
			t.Errorf("Put(%q) succeeded, want an error", key)
		}
		if _, err := b.Get(ctx, key); err == nil || errors.Is(err, storage.ErrNotExist) {
			t.Errorf("Get(%q) = %v, want a bad-key error", key, err)
		}
	}
}

func testListMany(t *testing.T, b storage.Backend) {
	ctx := context.Background()
	const n = 1100 // more than one S3 list page of 1000
	var want []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		key := fmt.Sprintf("many/%02d/obj-%05d", i%7, i)
		want = append(want, key)
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := b.Put(ctx, key, strings.NewReader(key)); err != nil {
				mu.Lock()
				defer mu.Unlock()
				t.Errorf("Put(%s): %v", key, err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, outside := range []string{"many-not/x", "manyz"} {
		put(t, b, outside, []byte(outside))
	}
	sort.Strings(want)

	list := func(prefix string) []string {
		t.Helper()
		var keys []string
		err := b.List(ctx, prefix, func(o storage.ObjectInfo) error {
			if o.Size != int64(len(o.Key)) {
				t.Errorf("List(%q): %s has size %d, want %d", prefix, o.Key, o.Size, len(o.Key))
			}
			keys = append(keys, o.Key)
			return nil
		})
		if err != nil {
			t.Fatalf("List(%q): %v", prefix, err)
		}
		return keys
	}
	got := list("many/")
	if !slices.Equal(got, want) {
		t.Fatalf("List(many/) gave %d keys (first %v), want %d in lexical order", len(got), head(got), len(want))
	}
	var wantPartial []string // a prefix that ends inside a name
	for _, k := range want {
		if strings.HasPrefix(k, "many/03/obj-001") {
			wantPartial = append(wantPartial, k)
		}
	}
	if got := list("many/03/obj-001"); len(wantPartial) == 0 || !slices.Equal(got, wantPartial) {
		t.Fatalf("List(many/03/obj-001) = %v, want %v", got, wantPartial)
	}
	if got := list("many"); len(got) != n+2 || !sort.StringsAreSorted(got) {
		t.Fatalf("List(many) gave %d keys, sorted=%v; want %d sorted", len(got), sort.StringsAreSorted(got), n+2)
	}
	if got := list("nothing/here/"); len(got) != 0 {
		t.Fatalf("List(nothing/here/) = %v, want none", got)
	}
	stop := errors.New("stop")
	calls := 0
	err := b.List(ctx, "many/", func(storage.ObjectInfo) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("List with a failing callback: err %v after %d calls, want the callback's error after 1", err, calls)
	}
}

func testCreateRace(t *testing.T, b storage.Backend) {
	ctx := context.Background()
	const racers = 8
	errs := make([]error, racers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range racers {
		wg.Go(func() {
			<-start
			errs[i] = b.Create(ctx, "race/marker", strings.NewReader(fmt.Sprintf("writer %d", i)))
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("writers %d and %d both created race/marker", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, storage.ErrExists):
			t.Fatalf("writer %d: %v, want nil or an error matching storage.ErrExists", i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no writer created race/marker: %v", errs)
	}
	if got, want := string(get(t, b, "race/marker")), fmt.Sprintf("writer %d", winner); got != want {
		t.Fatalf("race/marker holds %q, want the winner's %q", got, want)
	}
	err := b.Create(ctx, "race/marker", strings.NewReader("late"))
	if !errors.Is(err, storage.ErrExists) {
		t.Fatalf("Create of an existing key: %v, want storage.ErrExists", err)
	}
	if got := string(get(t, b, "race/marker")); got == "late" {
		t.Fatal("a failed Create replaced the object")
	}
}

func testPutRace(t *testing.T, b storage.Backend) {
	ctx := context.Background()
	const writers, size = 6, 1 << 20
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			if err := b.Put(ctx, "putrace/k", onlyReader{bytes.NewReader(bytes.Repeat([]byte{byte('a' + i)}, size))}); err != nil {
				t.Errorf("writer %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	got := get(t, b, "putrace/k")
	if len(got) != size || bytes.Count(got, got[:1]) != size {
		t.Fatalf("after concurrent Puts the object has %d bytes, not one writer's %d identical bytes", len(got), size)
	}
}

// failingReader returns some data, then fails, as a broken source stream would.
type failingReader struct{ n int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("source broke")
	}
	n := min(len(p), f.n)
	clear(p[:n])
	f.n -= n
	return n, nil
}

func testCanceledPut(t *testing.T, b storage.Backend) {
	ctx := context.Background()
	if err := b.Put(ctx, "broken/k", &failingReader{n: 1 << 20}); err == nil {
		t.Fatal("Put from a failing reader succeeded")
	}
	if _, err := b.Stat(ctx, "broken/k"); !errors.Is(err, storage.ErrNotExist) {
		t.Fatalf("after a failed Put, Stat = %v, want not-exist", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := b.Put(cctx, "broken/c", strings.NewReader("x")); err == nil {
		t.Fatal("Put with a canceled context succeeded")
	}
	var keys []string
	if err := b.List(ctx, "broken/", func(o storage.ObjectInfo) error { keys = append(keys, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Fatalf("failed Puts left objects: %v", keys)
	}
}

func head(s []string) []string { return s[:min(len(s), 5)] }
