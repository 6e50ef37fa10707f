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
	before := make(map[string]snapshot.Reading, len(tablesBefore))
	for _, t := range tablesBefore {
		before[tableKey(t.Schema, t.Name)] = snapshot.Reading{Count: t.Rows, Checksum: t.Checksum}
	}
	tables := make([]snapshot.Table, len(tablesAfter))
	for i, t := range tablesAfter {
		if b, ok := before[tableKey(t.Schema, t.Name)]; ok && b != (snapshot.Reading{Count: t.Rows, Checksum: t.Checksum}) {
			t.BeforeDump = &b
		}
		tables[i] = t
	}
	var large []snapshot.LargeObjects
	if largeAfter != nil {
		beforeLarge := make(map[string]snapshot.Reading, len(largeBefore))
		for _, lo := range largeBefore {
			beforeLarge[lo.Database] = snapshot.Reading{Count: lo.Count, Checksum: lo.Checksum}
		}
		large = make([]snapshot.LargeObjects, len(largeAfter))
		for i, lo := range largeAfter {
			if b, ok := beforeLarge[lo.Database]; ok && b != (snapshot.Reading{Count: lo.Count, Checksum: lo.Checksum}) {
				lo.BeforeDump = &b
			}
			large[i] = lo
		}
	}
	return tables, large
}

// asRead says whether got is the reading after the dump, or the one before it when that differs.
func asRead(got, after snapshot.Reading, before *snapshot.Reading) bool {
	return got == after || before != nil && got == *before
}
