package snapshot

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/ferrykube/ferry/plans"
)

type counts struct{ bytes, objects atomic.Int64 }

func (c *counts) AddBytes(n int64) { c.bytes.Add(n) }
func (c *counts) AddObjects(n int) { c.objects.Add(int64(n)) }

func TestWriterReportsProgress(t *testing.T) {
	ctx := context.Background()
	w, err := Create(ctx, newStore(t), "b1", plans.Cluster{}, &plans.Plan{}, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var c counts
	w.SetProgress(&c)
	if _, err := w.Put(ctx, "b1.tar.gz", strings.NewReader("archive")); err != nil {
		t.Fatal(err)
	}
	w.Record(Stream{Key: "volumes/a/b.tar.zst", Bytes: 100})
	w.AddObjects([]Object{{Kind: "ConfigMap", Name: "a"}, {Kind: "ConfigMap", Name: "b"}}, 20)
	m, err := w.Commit(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// Progress counts what the manifest records as stored, the manifest itself aside.
	if c.bytes.Load() != m.Totals.StoredBytes || c.bytes.Load() != 107 || c.objects.Load() != 2 {
		t.Fatalf("progress saw %d bytes and %d objects; the manifest %d bytes", c.bytes.Load(), c.objects.Load(), m.Totals.StoredBytes)
	}
}

// TestProgressCountsAStreamRunAgainOnce: a stream cut off and put again, or put again whole,
// counts once, as the manifest records it; a stream copied from an earlier backup counts too.
func TestProgressCountsAStreamRunAgainOnce(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	first, err := Create(ctx, store, "b0", plans.Cluster{}, &plans.Plan{}, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Put(ctx, "buckets/b/k", strings.NewReader("kept")); err != nil {
		t.Fatal(err)
	}
	m0, err := first.Commit(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	w, err := Create(ctx, store, "b1", plans.Cluster{}, &plans.Plan{}, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var c counts
	w.SetProgress(&c)
	cut := io.MultiReader(strings.NewReader("the first try"), iotest.ErrReader(errors.New("connection reset by peer")))
	if _, err := w.Put(ctx, "volumes/a/b.tree.jsonl.zst", cut); err == nil {
		t.Fatal("a cut stream was stored")
	}
	for range 2 {
		if _, err := w.Put(ctx, "volumes/a/b.tree.jsonl.zst", strings.NewReader("the stream")); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.CopyStream(ctx, "b0", m0.Streams[0]); err != nil {
		t.Fatal(err)
	}
	m, err := w.Commit(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if c.bytes.Load() != m.Totals.StoredBytes || m.Totals.StoredBytes != int64(len("the stream")+len("kept")) {
		t.Fatalf("progress saw %d bytes; the manifest %d", c.bytes.Load(), m.Totals.StoredBytes)
	}
}
