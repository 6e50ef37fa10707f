package repo

import (
	"bytes"
	"iter"
	"slices"
)

// slotMap maps chunk IDs to values (slots; of a write-only repository, packs) in the ID's and
// the value's bytes and about 8 % more. A Go map of a million slots took 134 bytes a slot, most
// of the 300 MiB a backup of a million small files may use: its table holds 8-slot groups and
// doubles. Chunk IDs are hashes, so their first bits spread them evenly over the buckets; each
// bucket keeps its entries sorted by ID, but for the newest few, which it merges in once there
// are mergeEvery of them. Not safe for concurrent use (the Repo's lock guards it).
type slotMap[V any] struct {
	buckets [slotBuckets]slotBucket[V]
	n       int
}

const (
	slotBuckets = 1 << 10
	mergeEvery  = 32
)

type slotBucket[V any] struct {
	// entries are sorted by ID up to sorted; those after it are the newest, in no order.
	entries []slotEntry[V]
	sorted  int
}

type slotEntry[V any] struct {
	id ID
	v  V
}

func (m *slotMap[V]) bucket(id ID) *slotBucket[V] {
	return &m.buckets[(int(id[0])<<8|int(id[1]))&(slotBuckets-1)]
}

// find is where id is in b, or -1.
func (b *slotBucket[V]) find(id ID) int {
	for i := len(b.entries) - 1; i >= b.sorted; i-- {
		if b.entries[i].id == id {
			return i
		}
	}
	i, ok := slices.BinarySearchFunc(b.entries[:b.sorted], id, func(e slotEntry[V], id ID) int { return compareIDs(e.id, id) })
	if !ok {
		return -1
	}
	return i
}

func (m *slotMap[V]) get(id ID) (V, bool) {
	b := m.bucket(id)
	if i := b.find(id); i >= 0 {
		return b.entries[i].v, true
	}
	var zero V
	return zero, false
}

func (m *slotMap[V]) set(id ID, v V) {
	b := m.bucket(id)
	if i := b.find(id); i >= 0 {
		b.entries[i].v = v
		return
	}
	if len(b.entries) == cap(b.entries) {
		// Grown by a sixteenth, not doubled as append would: the slack is what the map's was.
		grown := make([]slotEntry[V], len(b.entries), len(b.entries)+len(b.entries)/16+mergeEvery)
		copy(grown, b.entries)
		b.entries = grown
	}
	b.entries = append(b.entries, slotEntry[V]{id, v})
	m.n++
	if len(b.entries)-b.sorted >= mergeEvery {
		b.merge()
	}
}

// merge sorts the newest entries into the sorted ones, from the back, in place.
func (b *slotBucket[V]) merge() {
	var tail [mergeEvery]slotEntry[V]
	newest := tail[:copy(tail[:], b.entries[b.sorted:])]
	slices.SortFunc(newest, func(x, y slotEntry[V]) int { return compareIDs(x.id, y.id) })
	i, j, k := b.sorted-1, len(newest)-1, len(b.entries)-1
	for j >= 0 {
		if i >= 0 && compareIDs(b.entries[i].id, newest[j].id) > 0 {
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

func (m *slotMap[V]) len() int { return m.n }

// compareIDs orders chunk IDs as their bytes do: the order of a bucket's sorted entries.
func compareIDs(a, b ID) int { return bytes.Compare(a[:], b[:]) }

// all yields every entry, in no order.
func (m *slotMap[V]) all() iter.Seq2[ID, V] {
	return func(yield func(ID, V) bool) {
		for i := range m.buckets {
			for _, e := range m.buckets[i].entries {
				if !yield(e.id, e.v) {
					return
				}
			}
		}
	}
}
