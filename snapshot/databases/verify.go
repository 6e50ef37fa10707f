package databases

import (
	"context"
	"fmt"

	"github.com/ferrykube/ferry/snapshot"
	"k8s.io/client-go/dynamic"
)

// Verify counts and checksums every table of every backed-up database on the target and compares
// them with the backup (implements snapshot.Kind): a table missing, with other row counts or
// checksums, or on the target in a backed-up schema but not in the backup is listed, named
// "database/schema.table"; identical tables are counted. With Upgrade, backups with row digests
// are held to the rule of a schema upgrade instead (verifyUpgrade).
func (c Dumps) Verify(ctx context.Context, r *snapshot.Reader, report *snapshot.Report) error {
	if len(r.Manifest.Databases) == 0 {
		return nil
	}
	dyn, err := c.dynamicClient()
	if err != nil {
		return err
	}
	for _, d := range r.Manifest.Databases {
		if len(d.Schemas) == 0 {
			continue
		}
		if c.Upgrade && d.RowDigests != "" {
			// Verify only reads the target; what a run that broke off added to the report is
			// dropped with it.
			var found *snapshot.Report
			err := c.runAgainIfBroken(ctx, d.Name, "verify", func() error {
				found = &snapshot.Report{}
				return c.verifyUpgrade(ctx, dyn, r, d, found)
			})
			report.Merge(found)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				report.Add(kind, snapshot.StatusFailed, d.Name, fmt.Sprintf("cannot verify its %d tables: %v", len(d.Tables), err))
			}
			continue
		}
		var got []snapshot.Table
		var gotBeyond beyondTables
		err := c.runAgainIfBroken(ctx, d.Name, "verify", func() (err error) {
			got, gotBeyond, err = c.targetStats(ctx, dyn, r, d)
			return err
		})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			report.Add(kind, snapshot.StatusFailed, d.Name, fmt.Sprintf("cannot verify its %d tables: %v", len(d.Tables), err))
			continue
		}
		differ := 0
		for _, diff := range compareTables(d, got) {
			report.Add(kind, diff.status, diff.name, diff.detail)
			if !diff.extra {
				differ++
			}
		}
		report.CountN(kind, snapshot.StatusIdentical, len(d.Tables)-differ)
		for _, diff := range compareBeyondTables(d, gotBeyond, false) {
			report.Add(kind, diff.status, diff.name, diff.detail)
		}
	}
	return nil
}

// targetStats counts and checksums the tables of d on the target, and what it holds beyond them
// when the backup recorded that.
func (c Dumps) targetStats(ctx context.Context, dyn dynamic.Interface, r *snapshot.Reader, d snapshot.Database) ([]snapshot.Table, beyondTables, error) {
	t, err := c.locate(ctx, dyn, r, d)
	if err != nil {
		return nil, beyondTables{}, err
	}
	return c.statsOf(ctx, t, d)
}

// statsOf counts and checksums the tables of d on t's server, and reads what it holds beyond
// them when the backup recorded that.
func (c Dumps) statsOf(ctx context.Context, t target, d snapshot.Database) ([]snapshot.Table, beyondTables, error) {
	tables, err := t.eng.stats(ctx, c, t, d.Schemas)
	if err != nil {
		return nil, beyondTables{}, err
	}
	beyond, err := c.beyondTablesOf(ctx, t, d)
	return tables, beyond, err
}

// beyondTablesOf reads what d's databases hold beyond their tables on t's server, when the
// backup recorded that.
func (c Dumps) beyondTablesOf(ctx context.Context, t target, d snapshot.Database) (beyondTables, error) {
	if d.LargeObjects == nil && d.Sequences == nil {
		return beyondTables{}, nil
	}
	return t.eng.beyondTables(ctx, c, t, d.Schemas)
}

// difference is a table that is not as the backup holds it.
type difference struct {
	status, name, detail string
	// extra marks a table of the target that the backup does not hold.
	extra bool
	// unchecked marks a table (or large objects) written to while it was dumped, and not on the
	// target as either reading around the dump has it: what the dump holds of it is not known.
	unchecked bool
}

// uncheckedDetail says why a table or large objects written to while they were dumped are not
// compared, with the two readings around the dump and the target's.
func uncheckedDetail(what string, before, after, target int64) string {
	return fmt.Sprintf("not compared: written to while it was dumped (%d %s before the dump, %d after; the target has %d), and the dump holds it as it was at a moment between; a backup of the database with its writers stopped can be checked",
		before, what, after, target)
}

// compareTables compares the backup's tables of d with the target's, in the backup's order and
// then the target's extra tables in theirs.
func compareTables(d snapshot.Database, target []snapshot.Table) []difference {
	key := func(t snapshot.Table) string { return t.Schema + "\x00" + t.Name }
	name := func(t snapshot.Table) string { return d.Name + "/" + t.Schema + "." + t.Name }
	have := make(map[string]snapshot.Table, len(target))
	for _, t := range target {
		have[key(t)] = t
	}
	var out []difference
	backed := make(map[string]bool, len(d.Tables))
	for _, want := range d.Tables {
		backed[key(want)] = true
		got, ok := have[key(want)]
		switch {
		case !ok:
			out = append(out, difference{status: snapshot.StatusMissing, name: name(want), detail: fmt.Sprintf("not on the target (backup: %d rows)", want.Rows)})
		case asRead(snapshot.Reading{Count: got.Rows, Checksum: got.Checksum}, snapshot.Reading{Count: want.Rows, Checksum: want.Checksum}, want.BeforeDump):
		case want.BeforeDump != nil:
			out = append(out, difference{status: snapshot.StatusSkipped, name: name(want), detail: uncheckedDetail("rows", want.BeforeDump.Count, want.Rows, got.Rows), unchecked: true})
		case got.Rows != want.Rows:
			out = append(out, difference{status: snapshot.StatusDifferent, name: name(want), detail: fmt.Sprintf("rows: backup %d, target %d", want.Rows, got.Rows)})
		case got.Checksum != want.Checksum:
			out = append(out, difference{status: snapshot.StatusDifferent, name: name(want), detail: fmt.Sprintf("checksum: backup %s, target %s", want.Checksum, got.Checksum)})
		}
	}
	for _, t := range target {
		if !backed[key(t)] {
			out = append(out, difference{status: snapshot.StatusDifferent, name: name(t), detail: fmt.Sprintf("not in the backup (target: %d rows)", t.Rows), extra: true})
		}
	}
	return out
}

// compareBeyondTables compares what the backup's databases of d hold beyond their tables with
// the target's: the large objects, named as the catalog that holds them, and the sequences. A
// database the target lacks is named only when it had large objects (its tables are named either
// way). A sequence may be ahead of the backup's, not behind; in a schema upgrade (upgrade) a
// release may drop one.
func compareBeyondTables(d snapshot.Database, target beyondTables, upgrade bool) []difference {
	have := make(map[string]snapshot.LargeObjects, len(target.largeObjects))
	for _, lo := range target.largeObjects {
		have[lo.Database] = lo
	}
	var out []difference
	for _, want := range d.LargeObjects {
		name := d.Name + "/" + want.Database + ".pg_catalog.pg_largeobject"
		got, ok := have[want.Database]
		switch {
		case !ok && want.Count > 0:
			out = append(out, difference{status: snapshot.StatusMissing, name: name, detail: fmt.Sprintf("not on the target (backup: %d large objects)", want.Count)})
		case !ok:
		case asRead(snapshot.Reading{Count: got.Count, Checksum: got.Checksum}, snapshot.Reading{Count: want.Count, Checksum: want.Checksum}, want.BeforeDump):
		case want.BeforeDump != nil:
			out = append(out, difference{status: snapshot.StatusSkipped, name: name, detail: uncheckedDetail("large objects", want.BeforeDump.Count, want.Count, got.Count), unchecked: true})
		case got.Count != want.Count:
			out = append(out, difference{status: snapshot.StatusDifferent, name: name, detail: fmt.Sprintf("large objects: backup %d, target %d", want.Count, got.Count)})
		case got.Checksum != want.Checksum:
			out = append(out, difference{status: snapshot.StatusDifferent, name: name, detail: fmt.Sprintf("checksum: backup %s, target %s", want.Checksum, got.Checksum)})
		}
	}
	next := make(map[string]int64, len(target.sequences))
	for _, s := range target.sequences {
		next[tableKey(s.Schema, s.Name)] = s.Next
	}
	for _, want := range d.Sequences {
		name := d.Name + "/" + want.Schema + "." + want.Name
		got, ok := next[tableKey(want.Schema, want.Name)]
		switch {
		case !ok && !upgrade:
			out = append(out, difference{status: snapshot.StatusMissing, name: name, detail: fmt.Sprintf("sequence not on the target, or never used there (backup: next value %d)", want.Next)})
		case ok && got < want.Next:
			out = append(out, difference{status: snapshot.StatusDifferent, name: name, detail: fmt.Sprintf("sequence behind the backup's: next value backup %d, target %d; the next inserts would take numbers the rows hold", want.Next, got)})
		}
	}
	return out
}
