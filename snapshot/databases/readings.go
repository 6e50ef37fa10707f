package databases

import (
	"github.com/ferrykube/ferry/snapshot"
)

// A dump is one consistent snapshot, taken by the engine's dump client in a session of its own;
// the counts and checksums are read in other sessions, one before the dump and one after. When
// the database's writers are stopped (a migration quiesces them), both readings are the dump's.
// When they run (a scheduled backup), a table written to in between is held by the dump as one
// moment between the readings: the backup keeps both, and the target is checked against either
// (the dump's moment may be one of them), or the table is named as one that cannot be checked.

// readingsAround are the tables and large objects as read after the dump, each with the reading
// before it where the two differ. A table or database first seen after the dump has no reading
// before it and is kept as read after: the dump may or may not hold it.
func readingsAround(tablesBefore, tablesAfter []snapshot.Table, largeBefore, largeAfter []snapshot.LargeObjects) ([]snapshot.Table, []snapshot.LargeObjects) {
	tableKeyOf := func(t snapshot.Table) string { return tableKey(t.Schema, t.Name) }
	tableReading := func(t snapshot.Table) snapshot.Reading { return snapshot.Reading{Count: t.Rows, Checksum: t.Checksum} }
	tables := withBefore(tablesBefore, tablesAfter, tableKeyOf, tableReading, func(t *snapshot.Table, b *snapshot.Reading) { t.BeforeDump = b })
	largeKeyOf := func(lo snapshot.LargeObjects) string { return lo.Database }
	largeReading := func(lo snapshot.LargeObjects) snapshot.Reading {
		return snapshot.Reading{Count: lo.Count, Checksum: lo.Checksum}
	}
	var large []snapshot.LargeObjects // none read: not recorded
	if largeAfter != nil {
		large = withBefore(largeBefore, largeAfter, largeKeyOf, largeReading, func(lo *snapshot.LargeObjects, b *snapshot.Reading) { lo.BeforeDump = b })
	}
	return tables, large
}

// withBefore is after, each item given (set) its reading in before where that differs from its own.
func withBefore[T any](before, after []T, key func(T) string, reading func(T) snapshot.Reading, set func(*T, *snapshot.Reading)) []T {
	read := make(map[string]snapshot.Reading, len(before))
	for _, b := range before {
		read[key(b)] = reading(b)
	}
	out := make([]T, len(after))
	for i, a := range after {
		if b, ok := read[key(a)]; ok && b != reading(a) {
			set(&a, &b)
		}
		out[i] = a
	}
	return out
}

// asRead says whether got is the reading after the dump, or the one before it when that differs.
func asRead(got, after snapshot.Reading, before *snapshot.Reading) bool {
	return got == after || before != nil && got == *before
}
