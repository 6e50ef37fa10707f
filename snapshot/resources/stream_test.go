package resources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func manyConfigMaps(n, size int) []*unstructured.Unstructured {
	payload := strings.Repeat("x", size)
	out := make([]*unstructured.Unstructured, n)
	for i := range out {
		out[i] = &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": fmt.Sprintf("cm-%05d", i), "namespace": "team-a"},
			"data":     map[string]any{"payload": payload},
		}}
	}
	return out
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// A checked archive keeps only small keys of its objects in memory: what restore and verify hold
// does not grow with the objects' contents. The objects, spooled, restore as they were backed up.
func TestArchiveIsNotHeldInMemory(t *testing.T) {
	ctx := context.Background()
	store, err := storage.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const n, size = 2000, 8 << 10 // 16 MiB of payload
	source := fakeCluster()
	for _, cm := range manyConfigMaps(n, size) {
		if _, err := source.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("team-a").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	backUpObjects(t, ctx, store, "b", source, nil)
	r, err := snapshot.Open(ctx, store, "b", nil)
	if err != nil {
		t.Fatal(err)
	}
	before := heapInUse()
	a, err := ReadArchive(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	held := int64(heapInUse()) - int64(before)
	if a.Count != n {
		t.Fatalf("%d objects read, want %d", a.Count, n)
	}
	if held > 4<<20 {
		t.Errorf("the read archive holds %d KiB of heap for %d KiB of objects; want only their keys", held>>10, n*size>>10)
	}
	runtime.KeepAlive(a)
	a.Close()

	target := fakeCluster()
	var report snapshot.Report
	if err := (Objects{Dynamic: target, WaitTimeout: time.Second}).Restore(ctx, r, &report); err != nil {
		t.Fatal(err)
	}
	if got := report.Counts["objects"][snapshot.StatusRestored]; got != n {
		t.Fatalf("restored %d, want %d: %v", got, n, report.Counts)
	}
	live, err := target.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("team-a").Get(ctx, "cm-01999", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p, _, _ := unstructured.NestedString(live.Object, "data", "payload"); len(p) != size {
		t.Errorf("restored payload of %d bytes, want %d", len(p), size)
	}
}

// Nothing is applied before the whole archive is checked: an object recorded otherwise, or a
// stream changed, late in the archive leaves the target untouched.
func TestLateTamperingAppliesNothing(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, store storage.Backend, m *snapshot.Manifest)
	}{
		{"last object recorded otherwise", func(t *testing.T, store storage.Backend, m *snapshot.Manifest) {
			last := len(m.Objects) - 1
			m.Objects[last].SHA256 = strings.Repeat("0", 64)
			rewriteManifest(t, ctx, store, m)
		}},
		{"stream changed at its end", func(t *testing.T, store storage.Backend, m *snapshot.Manifest) {
			file := snapshot.Prefix("b") + "b.tar.gz"
			rc, err := store.Get(ctx, file)
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			data[len(data)-3] ^= 0xff // the gzip trailer: every object decodes, the stream does not check
			if err := store.Delete(ctx, file); err != nil {
				t.Fatal(err)
			}
			if err := store.Create(ctx, file, strings.NewReader(string(data))); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, err := storage.NewFile(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			m := backUpObjects(t, ctx, store, "b", fakeCluster(append(unstructuredObjects(manyConfigMaps(50, 100)), secretObj("aHVudGVyMg=="))...), nil)
			tc.tamper(t, store, m)
			r, err := snapshot.Open(ctx, store, "b", nil)
			if err != nil {
				t.Fatal(err)
			}
			target := fakeCluster()
			var report snapshot.Report
			err = (Objects{Dynamic: target, WaitTimeout: time.Second}).Restore(ctx, r, &report)
			if !errors.Is(err, snapshot.ErrCorrupt) {
				t.Fatalf("Restore: %v; want ErrCorrupt", err)
			}
			for _, a := range target.Actions() {
				if a.GetVerb() != "get" && a.GetVerb() != "list" {
					t.Errorf("applied before the archive was checked: %s %s", a.GetVerb(), a.GetResource().Resource)
				}
			}
		})
	}
}

func unstructuredObjects(in []*unstructured.Unstructured) []k8sruntime.Object {
	out := make([]k8sruntime.Object, len(in))
	for i, u := range in {
		out[i] = u
	}
	return out
}

func rewriteManifest(t *testing.T, ctx context.Context, store storage.Backend, m *snapshot.Manifest) {
	t.Helper()
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	file := snapshot.Prefix("b") + snapshot.ManifestFile
	if err := store.Delete(ctx, file); err != nil {
		t.Fatal(err)
	}
	if err := store.Create(ctx, file, strings.NewReader(string(data))); err != nil {
		t.Fatal(err)
	}
}
