package repo

import (
	"bytes"
	"iter"
	"slices"
)

// slotMap maps chunk IDs to slots in about 60 bytes an entry. A Go map of a million took about
// 100 MB of the 300 MiB a backup of a million small files may use: its table holds 8-slot groups
// and doubles. Chunk IDs are hashes, so their first bits spread them evenly over the buckets;
// each bucket keeps its entries sorted by ID, but for the newest few, which it merges in once
// there are mergeEvery of them. Not safe for concurrent use (the Repo's lock guards it).
type slotMap struct {
	buckets [slotBuckets]slotBucket
	n       int
}

const (
	slotBuckets = 1 << 10
	mergeEvery  = 32
)

type slotBucket struct {
	// entries are sorted by ID up to sorted; those after it are the newest, in no order.
	entries []slotEntry
	sorted  int
}

type slotEntry struct {
	id ID
	s  slot
}

func (m *slotMap) bucket(id ID) *slotBucket {
	return &m.buckets[(int(id[0])<<8|int(id[1]))&(slotBuckets-1)]
}

// find is where id is in b, or -1.
func (b *slotBucket) find(id ID) int {
	for i := len(b.entries) - 1; i >= b.sorted; i-- {
		if b.entries[i].id == id {
			return i
		}
	}
	i, ok := slices.BinarySearchFunc(b.entries[:b.sorted], id, func(e slotEntry, id ID) int { return bytes.Compare(e.id[:], id[:]) })
	if !ok {
		return -1
	}
	return i
}

func (m *slotMap) get(id ID) (slot, bool) {
	b := m.bucket(id)
	if i := b.find(id); i >= 0 {
		return b.entries[i].s, true
	}
	return slot{}, false
}

func (m *slotMap) set(id ID, s slot) {
	b := m.bucket(id)
	if i := b.find(id); i >= 0 {
		b.entries[i].s = s
		return
	}
	if len(b.entries) == cap(b.entries) {
		// Grown by a sixteenth, not doubled as append would: the slack is what the map's was.
		grown := make([]slotEntry, len(b.entries), len(b.entries)+len(b.entries)/16+mergeEvery)
		copy(grown, b.entries)
		b.entries = grown
	}
	b.entries = append(b.entries, slotEntry{id, s})
	m.n++
	if len(b.entries)-b.sorted >= mergeEvery {
		b.merge()
	}
}

// merge sorts the newest entries into the sorted ones, from the back, in place.
func (b *slotBucket) merge() {
	var tail [mergeEvery]slotEntry
	newest := tail[:copy(tail[:], b.entries[b.sorted:])]
	slices.SortFunc(newest, func(x, y slotEntry) int { return bytes.Compare(x.id[:], y.id[:]) })
	i, j, k := b.sorted-1, len(newest)-1, len(b.entries)-1
	for j >= 0 {
		if i >= 0 && bytes.Compare(b.entries[i].id[:], newest[j].id[:]) > 0 {
			b.entries[k] = b.entries[i]
			i--
		} else {
			b.entries[k] = newest[j]
			j--
		}
		k--
	}
	b.sorted = len(b.entries)
}

func (m *slotMap) len() int { return m.n }

// all yields every entry, in no order.
func (m *slotMap) all() iter.Seq2[ID, slot] {
	return func(yield func(ID, slot) bool) {
		for i := range m.buckets {
			for _, e := range m.buckets[i].entries {
				if !yield(e.id, e.s) {
					return
				}
			}
		}
	}
}
