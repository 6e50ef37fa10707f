package databases

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/snapshot"
)

// mysql is the engine of MySQL and MariaDB servers: mysqldump dumps the schemas, the mysql client
// loads and queries them. Its staging of a carry-back is in stage.go, its packet size in
// packet.go.
type mysql struct{}

// systemSchemas belong to the server, not to the platform.
var systemSchemas = map[string]bool{"mysql": true, "information_schema": true, "performance_schema": true, "sys": true}

func mysqlShell(program string, cred credentials, args ...string) []string {
	return clientShell("MYSQL_PWD", "MYSQL_ROOT_PASSWORD", program, append([]string{"--user=" + cred.user}, args...)...)
}

// query runs SQL in one mysql session, the client given args beside its own, and returns its
// tab-separated rows. The script ends with quit, so the client stops without waiting for the end
// of stdin.
func (c Dumps) query(ctx context.Context, item plans.DataItem, container string, cred credentials, sql string, args ...string) ([][]string, error) {
	var out bytes.Buffer
	stdin := strings.NewReader(cred.passwordLine() + sql + "\nquit\n")
	if err := c.exec(ctx, item, container, mysqlShell("mysql", cred, append([]string{"--batch", "--skip-column-names"}, args...)...), stdin, &out); err != nil {
		return nil, err
	}
	return tabRows(&out)
}

func (mysql) defaultUser() string { return "root" }

func (mysql) listSchemas(ctx context.Context, c Dumps, t target) ([]string, error) {
	rows, err := c.query(ctx, t.item, t.cfg.Container, t.cred, "SHOW DATABASES;")
	if err != nil {
		return nil, fmt.Errorf("list schemas: %w", err)
	}
	return firstNotIn(rows, systemSchemas), nil
}

// dump runs mysqldump on all the schemas at once, in one transaction. A MariaDB server that can
// load a system-versioned table's history (10.11 and later: system_versioning_insert_history)
// has it dumped too (--dump-history), when the schemas hold such tables; without it, a restored
// table has its current rows only, and verify names it (its checksum covers its history).
func (mysql) dump(ctx context.Context, c Dumps, t target, schemas []string, schemaOnly bool, out io.Writer) error {
	// The client's own limit (mysqldump's default is 24 MiB) would refuse a bigger row.
	args := []string{"--single-transaction", "--routines", "--triggers", "--events", "--hex-blob", "--max-allowed-packet=" + strconv.Itoa(maxPacket)}
	if schemaOnly {
		args = append(args, "--no-data")
	} else {
		history, err := c.dumpsHistory(ctx, t, schemas)
		if err != nil {
			return err
		}
		if history {
			args = append(args, "--dump-history")
		}
	}
	args = append(append(args, "--databases"), schemas...)
	if err := c.exec(ctx, t.item, t.cfg.Container, mysqlShell("mysqldump", t.cred, args...), strings.NewReader(t.cred.passwordLine()), out); err != nil {
		return fmt.Errorf("mysqldump in pod %s/%s: %w", t.item.Namespace, t.item.Pod, err)
	}
	return nil
}

// dumpsHistory says whether the dump of schemas takes the history of their system-versioned
// tables: the server is MariaDB 10.11 or later, and the schemas hold such tables.
func (c Dumps) dumpsHistory(ctx context.Context, t target, schemas []string) (bool, error) {
	rows, err := c.query(ctx, t.item, t.cfg.Container, t.cred, "SELECT VERSION(), COUNT(*) FROM information_schema.tables WHERE table_type = 'SYSTEM VERSIONED' AND table_schema IN ("+inList(schemas)+");")
	if err != nil {
		return false, fmt.Errorf("read the server's version and its system-versioned tables: %w", err)
	}
	if len(rows) != 1 || len(rows[0]) != 2 {
		return false, fmt.Errorf("read the server's version and its system-versioned tables: %d rows", len(rows))
	}
	return rows[0][1] != "0" && mariaDBAtLeast(rows[0][0], 10, 11), nil
}

// mariaDBAtLeast says whether version, as VERSION() gives it, is a MariaDB server's of major.minor
// or later.
func mariaDBAtLeast(version string, major, minor int) bool {
	if !strings.Contains(version, "MariaDB") {
		return false
	}
	num, _, _ := strings.Cut(version, "-")
	parts := strings.Split(num, ".")
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// inList is the schemas as a list of SQL strings.
func inList(schemas []string) string {
	quoted := make([]string, len(schemas))
	for i, s := range schemas {
		quoted[i] = quote(s)
	}
	return strings.Join(quoted, ",")
}

// mysqlTableTypes are the types of information_schema.tables whose rows ferry counts, checksums
// and carries back: base tables, and MariaDB's system-versioned ones (whose checksum covers
// their history). Views hold no rows of their own; sequences are read by beyondTables.
const mysqlTableTypes = "('BASE TABLE', 'SYSTEM VERSIONED')"

// beyondTables reads where each ascending sequence (MariaDB's) of the schemas is: the next value
// it gives out once those it holds in its cache are gone, as its dump sets it. MySQL keeps
// nothing else outside its tables that ferry compares (its counters of auto-increment columns
// follow the rows written).
func (mysql) beyondTables(ctx context.Context, c Dumps, t target, schemas []string) (beyondTables, error) {
	var out beyondTables
	rows, err := c.query(ctx, t.item, t.cfg.Container, t.cred, "SELECT table_schema, table_name FROM information_schema.tables WHERE table_type = 'SEQUENCE' AND table_schema IN ("+inList(schemas)+") ORDER BY 1, 2;")
	if err != nil {
		return out, fmt.Errorf("list sequences: %w", err)
	}
	if len(rows) == 0 {
		return out, nil
	}
	var sql strings.Builder
	for _, r := range rows {
		if len(r) != 2 {
			return out, fmt.Errorf("list sequences: a row of %d fields", len(r))
		}
		fmt.Fprintf(&sql, "SELECT 'seq', %s, %s, next_not_cached_value, increment FROM %s.%s;\n", quote(r[0]), quote(r[1]), mysqlIdent(r[0]), mysqlIdent(r[1]))
	}
	got, err := c.query(ctx, t.item, t.cfg.Container, t.cred, sql.String())
	if err != nil {
		return out, fmt.Errorf("read the sequences: %w", err)
	}
	for _, r := range got {
		if len(r) != 5 || r[0] != "seq" {
			return out, fmt.Errorf("read the sequences: a row of %d fields", len(r))
		}
		next, err := strconv.ParseInt(r[3], 10, 64)
		if err != nil {
			return out, fmt.Errorf("sequence %s.%s's next value %q", r[1], r[2], r[3])
		}
		if strings.HasPrefix(r[4], "-") {
			continue // counting down
		}
		out.sequences = append(out.sequences, snapshot.Sequence{Schema: r[1], Name: r[2], Next: next})
	}
	if len(got) != len(rows) {
		return out, fmt.Errorf("read %d of %d sequences", len(got), len(rows))
	}
	return out, nil
}

// stats counts rows and checksums every base and system-versioned table, in one consistent
// snapshot.
func (mysql) stats(ctx context.Context, c Dumps, t target, schemas []string) ([]snapshot.Table, error) {
	rows, err := c.query(ctx, t.item, t.cfg.Container, t.cred, "SELECT table_schema, table_name FROM information_schema.tables WHERE table_type IN "+mysqlTableTypes+" AND table_schema IN ("+inList(schemas)+") ORDER BY 1, 2;")
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	var sql strings.Builder
	sql.WriteString("START TRANSACTION WITH CONSISTENT SNAPSHOT;\n")
	for _, r := range rows {
		fmt.Fprintf(&sql, "SELECT 'rows', %s, %s, COUNT(*) FROM %s.%s;\n", quote(r[0]), quote(r[1]), mysqlIdent(r[0]), mysqlIdent(r[1]))
		fmt.Fprintf(&sql, "CHECKSUM TABLE %s.%s EXTENDED;\n", mysqlIdent(r[0]), mysqlIdent(r[1]))
	}
	sql.WriteString("COMMIT;")
	out, err := c.query(ctx, t.item, t.cfg.Container, t.cred, sql.String())
	if err != nil {
		return nil, fmt.Errorf("count and checksum tables: %w", err)
	}
	var tables []snapshot.Table
	for _, r := range out {
		switch {
		case len(r) == 4 && r[0] == "rows":
			n, err := strconv.ParseInt(r[3], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("row count of %s.%s: %q", r[1], r[2], r[3])
			}
			tables = append(tables, snapshot.Table{Schema: r[1], Name: r[2], Rows: n})
		case len(r) == 2 && len(tables) > 0: // CHECKSUM TABLE: "schema.table<TAB>checksum"
			tables[len(tables)-1].Checksum = r[1]
		}
	}
	if len(tables) != len(rows) {
		return nil, fmt.Errorf("counted %d of %d tables", len(tables), len(rows))
	}
	return tables, nil
}

// mysqlIdent quotes a MySQL identifier.
func mysqlIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

func (mysql) shapes(ctx context.Context, c Dumps, t target, schemas []string) (map[string]*shape, error) {
	in := make([]string, len(schemas))
	for i, s := range schemas {
		in[i] = quote(s)
	}
	rows, err := c.query(ctx, t.item, t.cfg.Container, t.cred, mysqlShapeSQL(strings.Join(in, ",")))
	if err != nil {
		return nil, fmt.Errorf("read the tables' columns: %w", err)
	}
	out := map[string]*shape{}
	if err := readShapeRows(rows, "", shapesInto(out)); err != nil {
		return nil, err
	}
	return out, nil
}

// mysqlShapeSQL lists columns ("c", schema, table, name, type, not null, filled, generated) and
// primary key columns ("k", schema, table, name) of the base and system-versioned tables of the
// schemas, in order. A system-versioned table's row start and end are generated columns (the
// server writes them); when they are hidden (not declared), they are no columns and no key
// columns of it either.
func mysqlShapeSQL(schemas string) string {
	return `SELECT 'c', c.table_schema, c.table_name, c.column_name, c.column_type, c.is_nullable = 'NO',
 (c.column_default IS NOT NULL OR c.extra LIKE '%auto_increment%' OR c.extra LIKE '%GENERATED%' OR c.extra LIKE '%PERSISTENT%'),
 (c.extra LIKE '%GENERATED%' OR c.extra LIKE '%PERSISTENT%' OR c.extra LIKE '%VIRTUAL%')
 FROM information_schema.columns c JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
 WHERE t.table_type IN ` + mysqlTableTypes + ` AND c.table_schema IN (` + schemas + `) ORDER BY c.table_schema, c.table_name, c.ordinal_position;
SELECT 'k', k.table_schema, k.table_name, k.column_name FROM information_schema.key_column_usage k
 JOIN information_schema.columns c ON c.table_schema = k.table_schema AND c.table_name = k.table_name AND c.column_name = k.column_name
 WHERE k.constraint_name = 'PRIMARY' AND k.table_schema IN (` + schemas + `) ORDER BY k.table_schema, k.table_name, k.ordinal_position;`
}

// digests runs all the queries in one session. The client streams rows (--quick) rather than
// hold a table's in memory.
func (mysql) digests(ctx context.Context, c Dumps, t target, qs []digestQuery, out io.Writer) error {
	if len(qs) == 0 {
		return nil
	}
	var script strings.Builder
	// A TIMESTAMP is written as text in the session's time zone, by default the server's.
	if !t.serverSettings {
		script.WriteString("SET time_zone = '+00:00';\n")
	}
	script.WriteString("START TRANSACTION WITH CONSISTENT SNAPSHOT;\n")
	for _, q := range qs {
		script.WriteString(digestSQL(false, q))
	}
	script.WriteString("COMMIT;")
	stdin := strings.NewReader(t.cred.passwordLine() + script.String() + "\nquit\n")
	cmd := mysqlShell("mysql", t.cred, "--batch", "--skip-column-names", "--quick")
	if err := c.exec(ctx, t.item, t.cfg.Container, cmd, stdin, out); err != nil {
		return fmt.Errorf("digest rows: %w", err)
	}
	return nil
}

// prepareLoad makes the server take the dump's largest statement (fitPacket), and drops the
// staging schemas, or with Exact the dumped schemas, before the dump runs.
func (mysql) prepareLoad(ctx context.Context, c Dumps, t target, d snapshot.Database, checked *checkedDump, stage map[string]string) (loading, error) {
	// The client's own limit (16 MiB by default) would refuse a bigger statement.
	l := loading{cmd: mysqlShell("mysql", t.cred, "--batch", "--max-allowed-packet="+strconv.Itoa(maxPacket)), end: "\nquit\n"}
	replaced := d.Schemas
	if stage != nil {
		replaced = slices.Sorted(maps.Values(stage))
	}
	if err := c.endMySQLSessions(ctx, t, replaced); err != nil {
		return l, fmt.Errorf("end the sessions on the schemas to replace: %w", err)
	}
	putBack, err := c.fitPacket(ctx, t, d, checked.largest)
	if err != nil {
		return l, err
	}
	l.putBack = putBack
	if stage != nil {
		for _, schema := range d.Schemas {
			l.begin += "DROP DATABASE IF EXISTS " + mysqlIdent(stage[schema]) + ";\n"
		}
	} else if c.Exact {
		for _, schema := range d.Schemas {
			l.begin += "DROP DATABASE IF EXISTS " + mysqlIdent(schema) + ";\n"
		}
	}
	return l, nil
}

// endMySQLSessions ends every session but its own on the schemas a load replaces, as PostgreSQL's
// load does (terminateSessions): the client of a load whose exec broke off may live on, its stdin
// never ending (an exec's end need not reach the process), and hold a table locked (mysqldump's
// LOCK TABLES ... WRITE), which the load run again would wait behind until its exec times out.
func (c Dumps) endMySQLSessions(ctx context.Context, t target, schemas []string) error {
	if len(schemas) == 0 {
		return nil
	}
	quoted := make([]string, len(schemas))
	for i, s := range schemas {
		quoted[i] = quote(s)
	}
	rows, err := c.query(ctx, t.item, t.cfg.Container, t.cred,
		"SELECT ID FROM information_schema.PROCESSLIST WHERE DB IN ("+strings.Join(quoted, ",")+") AND ID <> CONNECTION_ID();")
	if err != nil {
		return err
	}
	ended := 0
	for _, row := range rows {
		if len(row) == 0 || strings.Trim(row[0], "0123456789") != "" {
			continue
		}
		// A session that ended since it was listed is no error (ER_NO_SUCH_THREAD).
		if _, err := c.query(ctx, t.item, t.cfg.Container, t.cred, "KILL CONNECTION "+row[0]+";"); err != nil && !strings.Contains(err.Error(), "1094") {
			return err
		}
		ended++
	}
	if ended > 0 && c.Log != nil {
		c.Log.Info("ended the sessions on the schemas to replace", "database", t.item.Name, "sessions", ended)
	}
	return nil
}

// carryBack loads the dump into staging schemas beside blue's (dropped again at the end), then
// replaces the rows of the tables both have in one transaction (swapSQL), with blue's triggers
// on them off (mysql_triggers.go), and counts them.
func (mysql) carryBack(ctx context.Context, c Dumps, r *snapshot.Reader, d snapshot.Database, t target, report *snapshot.Report) (err error) {
	stage := map[string]string{}
	back := map[string]string{}
	var staging []string
	for _, s := range d.Schemas {
		stage[s], back[stagingName(s)] = stagingName(s), s
		staging = append(staging, stagingName(s))
	}
	if n, err := remakeKeptTriggers(ctx, c, t, d.Schemas); err != nil {
		return err
	} else if n > 0 && c.Log != nil {
		c.Log.Warn("made again blue's triggers that a carry-back broken off had taken off", "database", d.Name, "triggers", n)
	}
	var triggersOff []mysqlTrigger // taken off by the swap (some may still be there), made again at the end
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if rerr := remakeTriggers(ctx, c, t, triggersOff); rerr != nil {
			err = errors.Join(err, fmt.Errorf("blue's triggers on the carried tables: %w", rerr))
		}
		var drop strings.Builder
		for _, s := range staging {
			drop.WriteString("DROP DATABASE IF EXISTS " + mysqlIdent(s) + ";\n")
		}
		if _, derr := c.query(ctx, t.item, t.cfg.Container, t.cred, drop.String()); derr != nil {
			err = errors.Join(err, fmt.Errorf("drop the staging schemas %s: %w", strings.Join(staging, ", "), derr))
		}
	}()
	if err := c.load(ctx, r, d, t, stage); err != nil {
		return fmt.Errorf("%w; the target's own schemas were not changed", err)
	}
	staged, err := t.eng.shapes(ctx, c, t, staging)
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
		triggers, err := readTriggers(ctx, c, t, "information_schema.TRIGGERS", triggersOn(plan.copies))
		if err != nil {
			return fmt.Errorf("read blue's triggers on the carried tables: %w", err)
		}
		if len(triggers) > 0 {
			if err := tryTriggers(ctx, c, t, triggers); err != nil {
				report.Add(kind, snapshot.StatusFailed, d.Name, fmt.Sprintf("blue's %d triggers on the carried tables must be off while green's rows come, and made again after: "+
					"ferry's user cannot make them as their definers (tried on empty tables of their tables' shape: %v); nothing of database %s was changed", len(triggers), err, d.Name))
				return nil
			}
		}
		sql, tables := swapSQL(plan.copies, stage, triggers)
		triggersOff = triggers
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
		rows, err := c.query(ctx, t.item, t.cfg.Container, t.cred, "SELECT COUNT(*) FROM "+mysqlIdent(cp.schema)+"."+mysqlIdent(cp.name)+";")
		if err != nil {
			return fmt.Errorf("count the rows carried back into %s.%s: %w", cp.schema, cp.name, err)
		}
		table := cp.schema + "." + cp.name
		if len(rows) != 1 || rows[0][0] != strconv.FormatInt(want[table], 10) {
			report.Add(kind, snapshot.StatusFailed, name(table), fmt.Sprintf("after the carry-back: rows: backup %d, target %v", want[table], rows))
			ok = false
		}
	}
	if err := carryMySQLSequences(ctx, c, t, d, report); err != nil {
		return err
	}
	if ok {
		report.Count(kind, snapshot.StatusRestored)
	}
	return nil
}

// carryMySQLSequences puts each of blue's sequences (MariaDB's) that the backup has at least
// where green's is (SETVAL moves a sequence forward only), or blue's application would take
// numbers green's rows already hold; a sequence of green's only is listed and left.
func carryMySQLSequences(ctx context.Context, c Dumps, t target, d snapshot.Database, report *snapshot.Report) error {
	if len(d.Sequences) == 0 {
		return nil
	}
	rows, err := c.query(ctx, t.item, t.cfg.Container, t.cred, "SELECT table_schema, table_name FROM information_schema.tables WHERE table_type = 'SEQUENCE' AND table_schema IN ("+inList(d.Schemas)+");")
	if err != nil {
		return fmt.Errorf("list blue's sequences: %w", err)
	}
	blue := map[string]bool{}
	for _, r := range rows {
		if len(r) == 2 {
			blue[tableKey(r[0], r[1])] = true
		}
	}
	var sql strings.Builder
	for _, s := range d.Sequences {
		if !blue[tableKey(s.Schema, s.Name)] {
			report.Add(kind, snapshot.StatusSkipped, d.Name+"/"+s.Schema+"."+s.Name, fmt.Sprintf("sequence only in the backup (next value %d), not on the target: left, not carried back", s.Next))
			continue
		}
		fmt.Fprintf(&sql, "SELECT SETVAL(%s.%s, %d, 0);\n", mysqlIdent(s.Schema), mysqlIdent(s.Name), s.Next)
	}
	if sql.Len() == 0 {
		return nil
	}
	if _, err := c.query(ctx, t.item, t.cfg.Container, t.cred, sql.String()); err != nil {
		return fmt.Errorf("put blue's sequences where green's are: %w; the rows were carried back", err)
	}
	return nil
}

// swapSQL replaces the rows of each table to copy by the staging table's, in one transaction, one
// statement a line; tables[i] is the table of the statement on line i+1 ("" for none). The
// triggers on those tables are kept (keptTriggers) and dropped first.
func swapSQL(copies []tableCopy, stage map[string]string, triggers []mysqlTrigger) (string, []string) {
	lines := []string{"SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION,NO_AUTO_VALUE_ON_ZERO';", "SET SESSION foreign_key_checks = 0;"}
	if len(triggers) > 0 {
		lines = append(lines, keepAndDropTriggersSQL(triggers, copies)...)
	}
	lines = append(lines, "START TRANSACTION;")
	tables := make([]string, len(lines))
	for _, c := range copies {
		cols := make([]string, len(c.columns))
		for i, col := range c.columns {
			cols[i] = mysqlIdent(col)
		}
		list := strings.Join(cols, ", ")
		lines = append(lines,
			"DELETE FROM "+mysqlIdent(c.schema)+"."+mysqlIdent(c.name)+";",
			"INSERT INTO "+mysqlIdent(c.schema)+"."+mysqlIdent(c.name)+" ("+list+") SELECT "+list+" FROM "+mysqlIdent(stage[c.schema])+"."+mysqlIdent(c.name)+";")
		tables = append(tables, c.schema+"."+c.name, c.schema+"."+c.name)
	}
	lines = append(lines, "COMMIT;")
	tables = append(tables, "")
	return strings.Join(lines, "\n"), tables
}
