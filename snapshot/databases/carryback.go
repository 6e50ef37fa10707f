package databases

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

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
// PostgreSQL dumps need no staging (see carryback_pg.go). In MySQL the transaction covers transactional tables (InnoDB); blue's triggers fire on the rows written, and
// foreign keys are not checked while the tables are replaced (green's rows satisfied green's).

// tableCopy is one table whose rows are carried back.
type tableCopy struct {
	schema, name string
	columns      []string
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
	blue, err := c.shapes(ctx, t.item, t.cfg.Container, t.cred, d.Engine, d.Schemas)
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
		c := tableCopy{schema: t.Schema, name: t.Name}
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

func sortNotes(n []tableNote) {
	for i := 1; i < len(n); i++ {
		for j := i; j > 0 && n[j].table < n[j-1].table; j-- {
			n[j], n[j-1] = n[j-1], n[j]
		}
	}
}

// swapSQL replaces the rows of each table to copy by the staging table's, in one transaction, one
// statement a line; tables[i] is the table of the statement on line i+1 ("" for none).
func swapSQL(copies []tableCopy, stage map[string]string) (string, []string) {
	ident := func(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }
	lines := []string{"SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION';", "SET SESSION foreign_key_checks = 0;", "START TRANSACTION;"}
	tables := []string{"", "", ""}
	for _, c := range copies {
		cols := make([]string, len(c.columns))
		for i, col := range c.columns {
			cols[i] = ident(col)
		}
		list := strings.Join(cols, ", ")
		lines = append(lines,
			"DELETE FROM "+ident(c.schema)+"."+ident(c.name)+";",
			"INSERT INTO "+ident(c.schema)+"."+ident(c.name)+" ("+list+") SELECT "+list+" FROM "+ident(stage[c.schema])+"."+ident(c.name)+";")
		tables = append(tables, c.schema+"."+c.name, c.schema+"."+c.name)
	}
	lines = append(lines, "COMMIT;")
	tables = append(tables, "")
	return strings.Join(lines, "\n"), tables
}

// carryBackOne carries one database's dump back into the target's existing schemas.
func (c Dumps) carryBackOne(ctx context.Context, dyn dynamic.Interface, r *snapshot.Reader, d snapshot.Database, report *snapshot.Report) (err error) {
	t, err := c.locate(ctx, dyn, r, d)
	if err != nil {
		return err
	}
	if d.Engine == "postgresql" {
		err := c.carryBackPostgres(ctx, r, d, t, report)
		var refusal *carryRefusal
		if errors.As(err, &refusal) {
			report.Add(kind, snapshot.StatusFailed, d.Name+"/"+refusal.table, refusal.detail)
			return nil
		}
		return err
	}
	if d.Engine != "mysql" {
		return fmt.Errorf("engine %q: want mysql or postgresql", d.Engine)
	}
	stage := map[string]string{}
	back := map[string]string{}
	var staging []string
	for _, s := range d.Schemas {
		stage[s], back[stagingName(s)] = stagingName(s), s
		staging = append(staging, stagingName(s))
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		var drop strings.Builder
		for _, s := range staging {
			drop.WriteString("DROP DATABASE IF EXISTS `" + strings.ReplaceAll(s, "`", "``") + "`;\n")
		}
		if _, derr := c.query(ctx, t.item, t.cfg.Container, t.cred, drop.String()); derr != nil {
			err = errors.Join(err, fmt.Errorf("drop the staging schemas %s: %w", strings.Join(staging, ", "), derr))
		}
	}()
	if err := c.load(ctx, r, d, t, stage); err != nil {
		return fmt.Errorf("%w; the target's own schemas were not changed", err)
	}
	staged, err := c.shapes(ctx, t.item, t.cfg.Container, t.cred, d.Engine, staging)
	if err != nil {
		return err
	}
	green := map[string]*shape{}
	for _, s := range staged {
		s.Schema = back[s.Schema]
		green[tableKey(s.Schema, s.Name)] = s
	}
	plan, ok, err := c.planInto(ctx, t, d, green, report)
	if err != nil || !ok {
		return err
	}
	name := func(table string) string { return d.Name + "/" + table }
	if len(plan.copies) > 0 {
		sql, tables := swapSQL(plan.copies, stage)
		if _, err := c.query(ctx, t.item, t.cfg.Container, t.cred, sql); err != nil {
			var ce *clientError
			if line := int(clientLineOf(err)); errors.As(err, &ce) && line > 0 && line <= len(tables) && tables[line-1] != "" {
				report.Add(kind, snapshot.StatusFailed, name(tables[line-1]), "a row of the backup does not fit the target's table: "+ce.message+"; the transaction was rolled back: nothing of database "+d.Name+" was changed")
				return nil
			}
			return fmt.Errorf("replace the rows of the shared tables: %w; the transaction was not committed", err)
		}
	}
	for _, n := range plan.left {
		report.Add(kind, snapshot.StatusSkipped, name(n.table), n.detail)
	}
	// The rows written are counted against the backup's.
	want := map[string]int64{}
	for _, tbl := range d.Tables {
		want[tbl.Schema+"."+tbl.Name] = tbl.Rows
	}
	ok = true
	for _, cp := range plan.copies {
		rows, err := c.query(ctx, t.item, t.cfg.Container, t.cred, "SELECT COUNT(*) FROM `"+strings.ReplaceAll(cp.schema, "`", "``")+"`.`"+strings.ReplaceAll(cp.name, "`", "``")+"`;")
		if err != nil {
			return fmt.Errorf("count the rows carried back into %s.%s: %w", cp.schema, cp.name, err)
		}
		table := cp.schema + "." + cp.name
		if len(rows) != 1 || rows[0][0] != strconv.FormatInt(want[table], 10) {
			report.Add(kind, snapshot.StatusFailed, name(table), fmt.Sprintf("after the carry-back: rows: backup %d, target %v", want[table], rows))
			ok = false
		}
	}
	if ok {
		report.Count(kind, snapshot.StatusRestored)
	}
	return nil
}

// clientLineOf is the input line a client's error names, or 0.
func clientLineOf(err error) int64 {
	var ce *clientError
	if !errors.As(err, &ce) {
		return 0
	}
	return clientLine(ce.message)
}
