package repo

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"runtime"
	"testing"
)

// TestSlotMapIsAMap: a slotMap holds what a Go map given the same sets does, new IDs and
// overwritten ones, through every size at which its buckets merge.
func TestSlotMapIsAMap(t *testing.T) {
	for _, n := range []int{0, 1, 31, 32, 33, 5000, 100000} {
		var m slotMap[slot]
		want := map[ID]slot{}
		rng := rand.New(rand.NewPCG(uint64(n), 1))
		idOf := func(i int) ID { return sha256.Sum256(binary.LittleEndian.AppendUint64(nil, uint64(i))) }
		for i := range n {
			// One set in four overwrites an earlier ID.
			k := i
			if i > 0 && rng.IntN(4) == 0 {
				k = rng.IntN(i)
			}
			s := slot{off: int64(i), pack: uint32(rng.IntN(100)), length: uint32(i), size: uint32(k), key: uint16(i)}
			m.set(idOf(k), s)
			want[idOf(k)] = s
		}
		if m.len() != len(want) {
			t.Errorf("n=%d: len %d, want %d", n, m.len(), len(want))
		}
		for id, s := range want {
			if got, ok := m.get(id); !ok || got != s {
				t.Fatalf("n=%d: get %x: %+v, %v; want %+v", n, id[:4], got, ok, s)
			}
		}
		if _, ok := m.get(idOf(-1)); ok {
			t.Errorf("n=%d: an ID never set was found", n)
		}
		seen := 0
		for id, s := range m.all() {
			if want[id] != s {
				t.Fatalf("n=%d: all yields %x: %+v, want %+v", n, id[:4], s, want[id])
			}
			seen++
		}
		if seen != len(want) {
			t.Errorf("n=%d: all yields %d entries, want %d", n, seen, len(want))
		}
	}
}

// TestSlotMapMemory: a million slots hold at most 72 bytes each (56 of them the ID and slot), and
// of a write-only repository at most 48 (36 the ID and pack), beside a Go map's of the same slots
// (134: its table had just doubled).
func TestSlotMapMemory(t *testing.T) {
	n := 1000000
	if testing.Short() {
		n = 200000
	}
	idOf := func(i int) ID { return sha256.Sum256(binary.LittleEndian.AppendUint64(nil, uint64(i))) }
	var m slotMap[slot]
	ours := liveBytes(func() {
		for i := range n {
			m.set(idOf(i), slot{off: int64(i)})
		}
	})
	var packs slotMap[uint32]
	writeOnly := liveBytes(func() {
		for i := range n {
			packs.set(idOf(i), uint32(i))
		}
	})
	goMap := map[ID]slot{}
	theirs := liveBytes(func() {
		for i := range n {
			goMap[idOf(i)] = slot{off: int64(i)}
		}
	})
	per := float64(ours) / float64(n)
	perPack := float64(writeOnly) / float64(n)
	t.Logf("%d slots: %.0f bytes each, write-only %.0f; a Go map's %.0f", n, per, perPack, float64(theirs)/float64(n))
	if per > 72 || perPack > 48 {
		t.Errorf("%d slots: %.0f bytes each, write-only %.0f", n, per, perPack)
	}
	runtime.KeepAlive(goMap)
	runtime.KeepAlive(&m)
	runtime.KeepAlive(&packs)
}

// liveBytes is the heap that fn leaves in use, after a collection.
func liveBytes(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return after.HeapAlloc - min(after.HeapAlloc, before.HeapAlloc)
}

// TestIndexJSONIsMarshals: an index object written a blob at a time is json.Marshal's, but for
// whitespace.
func TestIndexJSONIsMarshals(t *testing.T) {
	blob := func(i int) indexBlob {
		return indexBlob{ID: sha256.Sum256([]byte{byte(i)}), Offset: int64(i) << 20, Length: i + 7, Size: i * 3}
	}
	for _, f := range []indexFile{
		{Version: 1},
		{Version: 1, Packs: []indexPack{{Pack: "a"}}},
		{Version: 1, Packs: []indexPack{{Pack: "a", Blobs: []indexBlob{blob(1)}}, {Pack: "b", Blobs: []indexBlob{blob(2), blob(3), blob(4)}}}},
	} {
		var streamed bytes.Buffer
		if err := writeIndexJSON(&streamed, f); err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := json.Compact(&got, streamed.Bytes()); err != nil {
			t.Fatalf("%s: %v", streamed.String(), err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Errorf("streamed %s\nwant %s", got.String(), want)
		}
	}
}
