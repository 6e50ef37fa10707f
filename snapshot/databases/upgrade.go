package databases

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/snapshot"
	"k8s.io/client-go/dynamic"
)

// After an upgrade the target's release has migrated the schemas the dumps were loaded into:
// tables and columns may have been added, types widened, rows added. Verify in upgrade mode
// (Dumps.Upgrade) holds the target to this rule instead of equality:
//
//   - every table of the dump is on the target;
//   - every column of the dump is on the target (by name); one the target lacks is a difference
//     naming it;
//   - every row of the dump is on the target, found by its primary key's values (by all its
//     values for a table without a primary key), with the same values in every column both
//     have, compared as text; a column whose type changed is compared so too, and when its
//     values' text differs the difference names both types (not comparable as text);
//   - tables, columns and rows only on the target are not differences.
//
// Backups made before row digests (Database.RowDigests) are verified as before, for equality.

// tablePlan is how one table of the dump is compared with the target's after an upgrade.
type tablePlan struct {
	table snapshot.Table
	// missing: the target has no such table.
	missing bool
	// problems are the differences the columns alone show.
	problems []string
	// query asks the target for the digests of the dump's key and shared columns; nil when the
	// rows cannot be compared (a key column is gone).
	query *digestQuery
	// shared are the indexes in table.Columns of query's columns, in order.
	shared []int
	// changed says, by index in table.Columns, how a shared column's type changed.
	changed map[int]string
}

// planUpgradeCompare compares a dumped table's columns with the target's table (nil: none).
// carriedBack is a carry-back's verify (blue, the older release, against a backup of green):
// green's tables and columns that blue lacks are what the carry-back left, and it listed them.
func planUpgradeCompare(t snapshot.Table, target *shape, carriedBack bool) tablePlan {
	p := tablePlan{table: t, changed: map[int]string{}}
	if target == nil {
		p.missing = true
		return p
	}
	q := digestQuery{schema: t.Schema, name: t.Name, key: t.Key}
	have := map[string]bool{}
	for i, col := range t.Columns {
		got, ok := target.column(col.Name)
		if !ok {
			if !carriedBack {
				p.problems = append(p.problems, fmt.Sprintf("column %s (%s): not on the target", col.Name, col.Type))
			}
			continue
		}
		have[col.Name] = true
		p.shared = append(p.shared, i)
		q.columns = append(q.columns, col.Name)
		if !strings.EqualFold(got.Type, col.Type) {
			p.changed[i] = fmt.Sprintf("type %s in the backup, %s on the target", col.Type, got.Type)
		}
	}
	identity := "primary key"
	if len(q.key) == 0 {
		q.key, identity = allColumns(t), "values (the table has no primary key)"
	}
	var gone []string
	for _, k := range q.key {
		if !have[k] {
			gone = append(gone, k)
		}
	}
	if len(gone) > 0 {
		p.problems = append(p.problems, fmt.Sprintf("rows not compared: their %s column(s) %s are not on the target", identity, strings.Join(gone, ", ")))
		return p
	}
	p.query = &q
	return p
}

func allColumns(t snapshot.Table) []string {
	names := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		names[i] = c.Name
	}
	return names
}

// rowsCompared is what the merge of a table's two digest streams found.
type rowsCompared struct {
	rows, missing int64
	// differ counts, by index in tablePlan.shared, the dump's rows found with another value.
	differ []int64
}

// compareRows merges the dump's and the target's digests of one table, both ascending by key
// digest. Rows of one key digest (a table without a primary key holding equal rows, or a
// collision) are matched as multisets: each dump row takes a target row equal in every shared
// column if there is one, else the next unmatched one, whose differing columns are counted;
// dump rows left without one are missing.
func compareRows(p tablePlan, dump, target *digestReader) (rowsCompared, error) {
	res := rowsCompared{differ: make([]int64, len(p.shared))}
	name := p.table.Schema + "." + p.table.Name
	next := func(r *digestReader, width int, last *string, side string) (digestRow, bool, error) {
		row, ok := r.row()
		if !ok {
			return row, false, nil
		}
		if len(row.values) != width {
			return row, false, fmt.Errorf("table %s: a row of the %s's digests has %d values, want %d", name, side, len(row.values), width)
		}
		if row.key < *last {
			return row, false, fmt.Errorf("table %s: the %s's digests are not in key order", name, side)
		}
		*last = row.key
		return row, true, nil
	}
	var lastD, lastT string
	d, dok, err := next(dump, len(p.table.Columns), &lastD, "backup")
	if err != nil {
		return res, err
	}
	t, tok, err := next(target, len(p.shared), &lastT, "target")
	if err != nil {
		return res, err
	}
	for dok {
		key := d.key
		var dg, tg []digestRow
		for dok && d.key == key {
			dg = append(dg, d)
			if d, dok, err = next(dump, len(p.table.Columns), &lastD, "backup"); err != nil {
				return res, err
			}
		}
		for tok && t.key <= key {
			if t.key == key {
				tg = append(tg, t)
			}
			if t, tok, err = next(target, len(p.shared), &lastT, "target"); err != nil {
				return res, err
			}
		}
		res.rows += int64(len(dg))
		matchGroup(p, dg, tg, &res)
	}
	for tok { // the target's rows after the dump's last key: new rows
		if t, tok, err = next(target, len(p.shared), &lastT, "target"); err != nil {
			return res, err
		}
	}
	return res, nil
}

func matchGroup(p tablePlan, dg, tg []digestRow, res *rowsCompared) {
	used := make([]bool, len(tg))
	var unmatched []digestRow
	for _, d := range dg {
		found := false
		for j, t := range tg {
			if !used[j] && sameShared(p, d, t) {
				used[j], found = true, true
				break
			}
		}
		if !found {
			unmatched = append(unmatched, d)
		}
	}
	j := 0
	for _, d := range unmatched {
		for j < len(tg) && used[j] {
			j++
		}
		if j == len(tg) {
			res.missing++
			continue
		}
		used[j] = true
		for k, i := range p.shared {
			if d.values[i] != tg[j].values[k] {
				res.differ[k]++
			}
		}
	}
}

func sameShared(p tablePlan, d, t digestRow) bool {
	for k, i := range p.shared {
		if d.values[i] != t.values[k] {
			return false
		}
	}
	return true
}

// rowProblems words what the merge found.
func rowProblems(p tablePlan, res rowsCompared) []string {
	var out []string
	if res.missing > 0 {
		by := "primary key (" + strings.Join(p.table.Key, ", ") + ")"
		if len(p.table.Key) == 0 {
			by = "all their values (the table has no primary key)"
		}
		out = append(out, fmt.Sprintf("%d of the backup's %d rows are not on the target (rows matched by %s)", res.missing, res.rows, by))
	}
	for k, i := range p.shared {
		if res.differ[k] == 0 {
			continue
		}
		col := p.table.Columns[i]
		detail := fmt.Sprintf("column %s: %d of the backup's rows have another value on the target", col.Name, res.differ[k])
		if change, ok := p.changed[i]; ok {
			detail = fmt.Sprintf("column %s (%s): %d of the backup's rows have another value as text: not comparable across the type change", col.Name, change, res.differ[k])
		}
		out = append(out, detail)
	}
	return out
}

// verifyUpgrade verifies one database whose backup has row digests by the rule above.
func (c Dumps) verifyUpgrade(ctx context.Context, dyn dynamic.Interface, r *snapshot.Reader, d snapshot.Database, report *snapshot.Report) error {
	t, err := c.locate(ctx, dyn, r, d)
	if err != nil {
		return err
	}
	shapes, err := t.eng.shapes(ctx, c, t, d.Schemas)
	if err != nil {
		return err
	}
	tablePlans := make([]tablePlan, len(d.Tables))
	var qs []digestQuery
	for i, tbl := range d.Tables {
		tablePlans[i] = planUpgradeCompare(tbl, shapes[tableKey(tbl.Schema, tbl.Name)], c.IntoExistingSchema)
		if q := tablePlans[i].query; q != nil {
			qs = append(qs, *q)
		}
	}
	found := make([][]string, len(tablePlans))
	if len(qs) > 0 {
		if found, err = c.compareDigests(ctx, r, d, t, tablePlans, qs); err != nil {
			return err
		}
	}
	name := func(tbl snapshot.Table) string { return d.Name + "/" + tbl.Schema + "." + tbl.Name }
	identical := 0
	for i, p := range tablePlans {
		switch problems := append(p.problems, found[i]...); {
		case p.missing && c.IntoExistingSchema:
			report.Count(kind, snapshot.StatusLeft) // only green's: the carry-back listed it
		case p.missing:
			report.Add(kind, snapshot.StatusMissing, name(p.table), fmt.Sprintf("not on the target (backup: %d rows)", p.table.Rows))
		case len(problems) > 0:
			for _, pr := range problems {
				report.Add(kind, snapshot.StatusDifferent, name(p.table), pr)
			}
		default:
			identical++
		}
	}
	report.CountN(kind, snapshot.StatusIdentical, identical)
	// No release migrates large objects: they are held to equality; sequences must not be behind.
	beyond, err := c.beyondTablesOf(ctx, t, d)
	if err != nil {
		return err
	}
	for _, diff := range compareBeyondTables(d, beyond, true) {
		report.Add(kind, diff.status, diff.name, diff.detail)
	}
	return nil
}

// digestOutputMemory is the most of a target's row digests held in memory while the comparison
// lags behind them (about 70 bytes a row); the rest waits in a temporary file.
const digestOutputMemory = 8 << 20

// compareDigests merges the backup's row digests with the target's, table by table, and returns
// the problems found by table plan. The stored digests are read to their end, so a damaged file
// fails the database rather than report differences.
func (c Dumps) compareDigests(ctx context.Context, r *snapshot.Reader, d snapshot.Database, t target, tablePlans []tablePlan, qs []digestQuery) ([][]string, error) {
	stored, err := storedDigests(ctx, r, d)
	if err != nil {
		return nil, err
	}
	defer stored.Close()
	// The target's digests are taken as they come: an exec whose output is read slower than it
	// comes can lose its end (kube.ReadOutput).
	found := make([][]string, len(tablePlans))
	dump := newDigestReader(stored)
	cmpErr, execErr := kube.ReadOutput(digestOutputMemory, func(stdout io.Writer) error {
		return t.eng.digests(ctx, c, t, qs, stdout)
	}, func(out io.Reader) error {
		target := newDigestReader(out)
		for i, p := range tablePlans {
			if p.query == nil {
				continue
			}
			if err := dump.table(p.table.Schema, p.table.Name); err != nil {
				return fmt.Errorf("the backup's row digests: %w", err)
			}
			if err := target.table(p.table.Schema, p.table.Name); err != nil {
				return fmt.Errorf("the target's row digests: %w", err)
			}
			res, err := compareRows(p, dump, target)
			if err == nil {
				err = errors.Join(dump.err, target.err)
			}
			if err != nil {
				return err
			}
			found[i] = rowProblems(p, res)
		}
		return nil
	})
	if cmpErr != nil {
		return nil, cmpErr
	}
	if execErr != nil {
		return nil, execErr
	}
	if _, err := io.Copy(io.Discard, stored); err != nil {
		return nil, fmt.Errorf("the backup's row digests: %w", err)
	}
	return found, nil
}
