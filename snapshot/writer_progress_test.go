package snapshot

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
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
