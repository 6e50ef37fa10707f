package databases

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ferrykube/ferry/snapshot"
	"k8s.io/client-go/dynamic"
)

// A carry-back after an upgrade (Dumps.IntoExistingSchema) loads a dump taken on green, whose
// release migrated the schemas, into blue, whose schemas are the old release's, without changing
// blue's schemas: no table or column of blue is dropped, created or altered.
//
//   - The dump is loaded into staging schemas beside blue's (stagingFilter: its tables and rows
//     only, none of its code), dropped again at the end.
//   - Tables both have: blue's rows are replaced by the backup's, in the columns both have
//     (blue's generated columns excepted), in one transaction for the whole database.
//   - Tables only in the backup are listed and left (on green); tables only on blue are listed
//     and left as they are; columns only in the backup are listed: their values stay on green.
//   - A row blue cannot hold refuses the database, naming the table and the column: a NOT NULL
//     column of blue without a default that the backup's table lacks (when it has rows), or a
//     value that does not fit (the server's strict mode refuses it, and the transaction is rolled
//     back). Nothing of the database is changed then.
//
// PostgreSQL dumps need no staging (see postgres_carryback.go); MySQL's is in mysql.go and
// stage.go. In MySQL the transaction covers transactional tables (InnoDB); blue's triggers on the replaced
// tables are off for it (mysql_triggers.go), and foreign keys are not checked while the tables are
// replaced (green's rows satisfied green's).

// constraintOf is a constraint of a table.
type constraintOf struct{ schema, table, name string }

// tableCopy is one table whose rows are carried back.
type tableCopy struct {
	schema, name string
	columns      []string
	// partitioned is a table of blue's whose rows are its partitions', carried back as theirs.
	partitioned bool
	// waits says some of its foreign keys (PostgreSQL's) are checked only at the end of the
	// carry-back: the dump writes its rows before those of the table they reference; deferred
	// are those of them made deferrable for it.
	waits    bool
	deferred []constraintOf
	// deleteOrder, when not 0, says a table left as it is references this one (or one that
	// references it, and so on), which a TRUNCATE of it would refuse: it is emptied with a
	// DELETE, in this order, each table before those it references.
	deleteOrder int
	// triggers are blue's triggers on its writes (PostgreSQL's), which do not fire while green's
	// rows come: green's fired when they were written, and what they wrote comes with the rows.
	triggers []trigger
}

// carryPlan is what a carry-back into blue's schema does with each table.
type carryPlan struct {
	copies []tableCopy
	// left are tables and columns not carried back, by table ("schema.table") and why.
	left []tableNote
	// refused are rows that blue cannot hold, by table and why.
	refused []tableNote
}

type tableNote struct{ table, detail string }

// planCarryBack matches the backup's tables (green's, as loaded into staging, by their dumped
// schema) with blue's.
// planInto plans carrying green's tables (green) back into the target's existing schemas; ok is
// false when a table refuses, each refusal then in the report and nothing to change.
func (c Dumps) planInto(ctx context.Context, t target, d snapshot.Database, green map[string]*shape, report *snapshot.Report) (plan carryPlan, ok bool, err error) {
	blue, err := t.eng.shapes(ctx, c, t, d.Schemas)
	if err != nil {
		return plan, false, err
	}
	plan = planCarryBack(d, green, blue)
	for _, n := range plan.refused {
		report.Add(kind, snapshot.StatusFailed, d.Name+"/"+n.table, n.detail+"; nothing of database "+d.Name+" was changed")
	}
	return plan, len(plan.refused) == 0, nil
}

func planCarryBack(d snapshot.Database, green, blue map[string]*shape) carryPlan {
	var p carryPlan
	seen := map[string]bool{}
	for _, t := range d.Tables {
		key := tableKey(t.Schema, t.Name)
		seen[key] = true
		name := t.Schema + "." + t.Name
		g, b := green[key], blue[key]
		if g == nil {
			p.refused = append(p.refused, tableNote{name, "the backup's table was not loaded into staging"})
			continue
		}
		if b == nil {
			p.left = append(p.left, tableNote{name, fmt.Sprintf("only in the backup (%d rows), not on the target: left, not carried back", t.Rows)})
			continue
		}
		c := tableCopy{schema: t.Schema, name: t.Name, partitioned: b.Partitioned, triggers: b.Triggers}
		var required []string
		for _, col := range b.Columns {
			_, inGreen := g.column(col.Name)
			switch {
			case col.Generated:
			case inGreen:
				c.columns = append(c.columns, col.Name)
			case col.NotNull && !col.Filled:
				required = append(required, col.Name)
			}
		}
		var only []string
		for _, col := range g.Columns {
			if _, ok := b.column(col.Name); !ok {
				only = append(only, col.Name)
			}
		}
		switch {
		case t.Rows > 0 && len(required) > 0:
			for _, col := range required {
				p.refused = append(p.refused, tableNote{name, fmt.Sprintf("column %s is NOT NULL without a default on the target and the backup's table has no such column: its %d rows cannot be represented", col, t.Rows)})
			}
			continue
		case t.Rows > 0 && len(c.columns) == 0:
			p.refused = append(p.refused, tableNote{name, "no column in common with the target's table"})
			continue
		}
		if len(only) > 0 {
			p.left = append(p.left, tableNote{name, "columns only in the backup, their values not carried back: " + strings.Join(only, ", ")})
		}
		p.copies = append(p.copies, c)
	}
	p.refused = append(p.refused, deferForeignKeys(p.copies, blue)...)
	var blueOnly []tableNote
	for key, b := range blue {
		if !seen[key] {
			blueOnly = append(blueOnly, tableNote{b.Schema + "." + b.Name, "not in the backup: left as it is on the target"})
		}
	}
	sortNotes(blueOnly)
	p.left = append(p.left, blueOnly...)
	return p
}

// deferForeignKeys marks, of each copy, blue's foreign keys that cannot be checked as its rows
// come: those to another copied table whose rows pg_dump writes after its own (it writes tables'
// rows by schema, then name, and makes its foreign keys after all of them), and those of tables
// left as they are, whose rows keep referencing rows that are deleted and come again; each is
// made deferrable unless it is. A copy that a table left as it is references is emptied with a
// DELETE (a TRUNCATE would refuse), and so is each copy such a one references, after it. A
// table left as it is whose key would delete or change its rows as the copy's go is a refusal.
func deferForeignKeys(copies []tableCopy, blue map[string]*shape) (refused []tableNote) {
	index := map[string]int{}
	for i, c := range copies {
		index[tableKey(c.schema, c.name)] = i
	}
	var next []int
	for _, b := range sortedShapes(blue) {
		if _, copied := index[tableKey(b.Schema, b.Name)]; copied {
			continue
		}
		for _, fk := range b.ForeignKeys {
			i, ok := index[tableKey(fk.ParentSchema, fk.ParentName)]
			if !ok {
				continue
			}
			if fk.OnDelete != "a" {
				refused = append(refused, tableNote{copies[i].schema + "." + copies[i].name, fmt.Sprintf("table %s.%s, which is not in the backup and stays as it is, has foreign key %s to it, which would delete or change its rows (or refuse) as the rows are replaced", b.Schema, b.Name, fk.Name)})
				continue
			}
			copies[i].waits = true
			if !fk.Deferrable {
				copies[i].deferred = append(copies[i].deferred, constraintOf{b.Schema, b.Name, fk.Name})
			}
			if copies[i].deleteOrder == 0 {
				copies[i].deleteOrder = 1
				next = append(next, i)
			}
		}
	}
	for len(next) > 0 {
		i := next[0]
		next = next[1:]
		b := blue[tableKey(copies[i].schema, copies[i].name)]
		if b == nil {
			continue
		}
		for _, fk := range b.ForeignKeys {
			if j, ok := index[tableKey(fk.ParentSchema, fk.ParentName)]; ok && j != i && copies[j].deleteOrder <= copies[i].deleteOrder {
				copies[j].deleteOrder = copies[i].deleteOrder + 1
				if copies[j].deleteOrder <= len(copies) { // a cycle stops here
					next = append(next, j)
				}
			}
		}
	}
	for i, c := range copies {
		b := blue[tableKey(c.schema, c.name)]
		if b == nil {
			continue
		}
		for _, fk := range b.ForeignKeys {
			before := c.schema < fk.ParentSchema || c.schema == fk.ParentSchema && c.name < fk.ParentName
			if _, copied := index[tableKey(fk.ParentSchema, fk.ParentName)]; !before || !copied {
				continue
			}
			copies[i].waits = true
			if !fk.Deferrable {
				copies[i].deferred = append(copies[i].deferred, constraintOf{c.schema, c.name, fk.Name})
			}
		}
	}
	return refused
}

// sortedShapes are the shapes by schema and name.
func sortedShapes(shapes map[string]*shape) []*shape {
	out := slices.Collect(maps.Values(shapes))
	slices.SortFunc(out, func(a, b *shape) int { return strings.Compare(tableKey(a.Schema, a.Name), tableKey(b.Schema, b.Name)) })
	return out
}

func sortNotes(n []tableNote) {
	for i := 1; i < len(n); i++ {
		for j := i; j > 0 && n[j].table < n[j-1].table; j-- {
			n[j], n[j-1] = n[j-1], n[j]
		}
	}
}

// carryBackOne carries one database's dump back into the target's existing schemas.
func (c Dumps) carryBackOne(ctx context.Context, dyn dynamic.Interface, r *snapshot.Reader, d snapshot.Database, report *snapshot.Report) error {
	t, err := c.locate(ctx, dyn, r, d)
	if err != nil {
		return err
	}
	return t.eng.carryBack(ctx, c, r, d, t, report)
}

// clientLineOf is the input line a client's error names, or 0.
func clientLineOf(err error) int64 {
	var ce *clientError
	if !errors.As(err, &ce) {
		return 0
	}
	return clientLine(ce.message)
}
