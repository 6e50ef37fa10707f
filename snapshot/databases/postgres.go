package databases

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/snapshot"
)

// postgresSystemDBs belong to the server, not to the platform.
var postgresSystemDBs = map[string]bool{"template0": true, "template1": true}

// pgDefaultDB is the database every server has and ferry's clients connect to: the server's own
// until it holds tables, when it is an application's too (the official image's POSTGRES_DB
// is it unless set). Its dump neither drops nor recreates it (pgDumpArgs).
const pgDefaultDB = "postgres"

func pgShell(program string, cred credentials, args ...string) []string {
	return clientShell("PGPASSWORD", "POSTGRES_PASSWORD", program, append([]string{"--username=" + cred.user, "--no-password"}, args...)...)
}

// pgQuery runs a psql script on database db and returns its tab-separated rows. The script ends
// with \q, so psql stops without waiting for the end of stdin.
func (c Dumps) pgQuery(ctx context.Context, item plans.DataItem, container string, cred credentials, db, script string) ([][]string, error) {
	var out bytes.Buffer
	stdin := strings.NewReader(cred.passwordLine() + script + "\n\\q\n")
	cmd := pgShell("psql", cred, "-X", "-q", "-A", "-t", "-F", "\t", "-v", "ON_ERROR_STOP=1", "--dbname="+db)
	if err := c.exec(ctx, item, container, cmd, stdin, &out); err != nil {
		return nil, err
	}
	return tabRows(&out)
}

// postgres is the engine of PostgreSQL servers: pg_dump --create dumps each database, one after
// the other into one SQL stream that psql replays. Its carry-back is in postgres_carryback.go.
type postgres struct{}

func (postgres) defaultUser() string { return "postgres" }

// listSchemas lists the server's databases but the templates, and the default database
// (pgDefaultDB) only when it holds tables of its users (pgUserTablesSQL).
func (postgres) listSchemas(ctx context.Context, c Dumps, t target) ([]string, error) {
	rows, err := c.pgQuery(ctx, t.item, t.cfg.Container, t.cred, pgDefaultDB,
		"SELECT 'db', datname FROM pg_database WHERE NOT datistemplate;\n"+pgUserTablesSQL)
	if err != nil {
		return nil, fmt.Errorf("list databases: %w", err)
	}
	var dbs [][]string
	defaultHolds := false
	for _, r := range rows {
		switch {
		case len(r) == 2 && r[0] == "db":
			dbs = append(dbs, r[1:])
		case len(r) == 2 && r[0] == "tables":
			defaultHolds = r[1] != "0"
		default:
			return nil, fmt.Errorf("list databases: a row of %d fields", len(r))
		}
	}
	system := maps.Clone(postgresSystemDBs)
	system[pgDefaultDB] = !defaultHolds
	return firstNotIn(dbs, system), nil
}

// pgUserTablesSQL counts the tables of the database it runs in that are its users': outside
// the catalogs and temporary schemas, and not an extension's.
const pgUserTablesSQL = `SELECT 'tables', count(*) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
 AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e');`

// dump runs pg_dump on each database in turn (pgDumpArgs): the SQL drops and recreates them, but
// the default database, whose objects it drops and recreates in it.
func (postgres) dump(ctx context.Context, c Dumps, t target, dbs []string, schemaOnly bool, out io.Writer) error {
	for _, db := range dbs {
		args := pgDumpArgs(db)
		if schemaOnly {
			// A preflight's dump of a live database must not wait behind a migration's lock.
			args = append(args, "--schema-only", "--lock-wait-timeout=30000")
		}
		if db == pgDefaultDB {
			// Without --create, pg_dump does not connect psql to the database: the dump of the one
			// before would go on in its own.
			if _, err := io.WriteString(out, pgConnectDefault); err != nil {
				return err
			}
		}
		cmd := pgShell("pg_dump", t.cred, args...)
		if err := c.exec(ctx, t.item, t.cfg.Container, cmd, strings.NewReader(t.cred.passwordLine()), out); err != nil {
			return fmt.Errorf("pg_dump in pod %s/%s: database %s: %w", t.item.Namespace, t.item.Pod, db, err)
		}
	}
	return nil
}

// pgConnectDefault is the line of a dump that connects psql to the default database, as pg_dump
// --create writes it for the others.
const pgConnectDefault = "\\connect " + pgDefaultDB + "\n"

// pgDumpArgs are pg_dump's arguments for database db: --create --clean, so that the SQL drops and
// recreates it, but for the default database: psql, and every client that does not name a
// database, connects to it, and a drop of the database psql is connected to fails; its objects
// are dropped and recreated in it (--clean alone), the database itself kept.
func pgDumpArgs(db string) []string {
	if db == pgDefaultDB {
		return []string{"--clean", "--if-exists", "--dbname=" + db}
	}
	return []string{"--create", "--clean", "--if-exists", "--dbname=" + db}
}

// databases lists the server's databases, templates too.
func (postgres) databases(ctx context.Context, c Dumps, t target) (map[string]bool, error) {
	rows, err := c.pgQuery(ctx, t.item, t.cfg.Container, t.cred, "postgres", "SELECT datname FROM pg_database;")
	if err != nil {
		return nil, fmt.Errorf("list databases: %w", err)
	}
	exists := map[string]bool{}
	for _, r := range rows {
		exists[r[0]] = true
	}
	return exists, nil
}

// existing are those of the databases dbs the server has.
func (p postgres) existing(ctx context.Context, c Dumps, t target, dbs []string) ([]string, error) {
	exists, err := p.databases(ctx, c, t)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, db := range dbs {
		if exists[db] {
			out = append(out, db)
		}
	}
	return out, nil
}

// stats counts and checksums the tables of those of the databases the server has, each in one
// snapshot (pgTableStats).
func (p postgres) stats(ctx context.Context, c Dumps, t target, dbs []string) ([]snapshot.Table, error) {
	dbs, err := p.existing(ctx, c, t, dbs)
	if err != nil {
		return nil, err
	}
	var tables []snapshot.Table
	for _, db := range dbs {
		got, err := c.pgTableStats(ctx, t, db)
		if err != nil {
			return nil, fmt.Errorf("database %s: %w", db, err)
		}
		tables = append(tables, got...)
	}
	return tables, nil
}

// beyondTables counts the large objects of each of the databases the server has and checksums
// their oids and contents (pgLargeObjectsSQL), and reads the next value of each of their
// sequences that has given out values (pgSequencesSQL).
func (p postgres) beyondTables(ctx context.Context, c Dumps, t target, dbs []string) (beyondTables, error) {
	var out beyondTables
	dbs, err := p.existing(ctx, c, t, dbs)
	if err != nil {
		return out, err
	}
	for _, db := range dbs {
		rows, err := c.pgQuery(ctx, t.item, t.cfg.Container, t.cred, db, pgLargeObjectsSQL+"\n"+pgSequencesSQL)
		if err != nil {
			return out, fmt.Errorf("database %s: count and checksum the large objects, read the sequences: %w", db, err)
		}
		for _, r := range rows {
			switch {
			case len(r) == 3 && r[0] == "lo":
				n, err := strconv.ParseInt(r[1], 10, 64)
				if err != nil {
					return out, fmt.Errorf("database %s: the large objects' count %q", db, r[1])
				}
				out.largeObjects = append(out.largeObjects, snapshot.LargeObjects{Database: db, Count: n, Checksum: r[2]})
			case len(r) == 4 && r[0] == "seq":
				next, err := strconv.ParseInt(r[3], 10, 64)
				if err != nil {
					return out, fmt.Errorf("database %s: sequence %s.%s's next value %q", db, r[1], r[2], r[3])
				}
				out.sequences = append(out.sequences, snapshot.Sequence{Schema: db + "." + r[1], Name: r[2], Next: next})
			default:
				return out, fmt.Errorf("database %s: the large objects and sequences came as a row of %d fields", db, len(r))
			}
		}
		if len(out.largeObjects) == 0 || out.largeObjects[len(out.largeObjects)-1].Database != db {
			return out, fmt.Errorf("database %s: the large objects were not counted", db)
		}
	}
	return out, nil
}

// pgSequencesSQL lists a database's ascending sequences that have given out values, and the
// next value each gives. One the user may not read has no last value: it is left out, as is a
// sequence counting down.
const pgSequencesSQL = `SELECT 'seq', schemaname, sequencename, last_value + increment_by FROM pg_catalog.pg_sequences
 WHERE last_value IS NOT NULL AND increment_by > 0 ORDER BY 2, 3;`

// pgLargeObjectsSQL counts a database's large objects and checksums them: the MD5 of each one's
// oid and the MD5s of its MiBs, in order. A large object is read a MiB at a time, since lo_get
// of a whole one stops at 1 GB. Reading one takes its SELECT privilege, as pg_dump's does.
const pgLargeObjectsSQL = `WITH RECURSIVE parts(oid, off, sum, more) AS (
 SELECT m.oid, 0::bigint, md5(p), length(p) = 1048576 FROM pg_catalog.pg_largeobject_metadata m, pg_catalog.lo_get(m.oid, 0, 1048576) p
 UNION ALL
 SELECT parts.oid, off + 1048576, md5(p), length(p) = 1048576 FROM parts, pg_catalog.lo_get(parts.oid, off + 1048576, 1048576) p WHERE more)
SELECT 'lo', count(*) FILTER (WHERE off = 0), md5(coalesce(string_agg(oid::text || ':' || off || ':' || sum, ',' ORDER BY oid, off), '')) FROM parts;`

func (p postgres) shapes(ctx context.Context, c Dumps, t target, dbs []string) (map[string]*shape, error) {
	dbs, err := p.existing(ctx, c, t, dbs) // the tables of the others are not there
	if err != nil {
		return nil, err
	}
	out := map[string]*shape{}
	for _, db := range dbs {
		rows, err := c.pgQuery(ctx, t.item, t.cfg.Container, t.cred, db, pgShapeSQL)
		if err != nil {
			return nil, fmt.Errorf("database %s: read the tables' columns: %w", db, err)
		}
		if err := readShapeRows(rows, db+".", shapesInto(out)); err != nil {
			return nil, fmt.Errorf("database %s: %w", db, err)
		}
	}
	return out, nil
}

// pgShapeSQL is mysqlShapeSQL for a PostgreSQL database, and lists its partitioned tables ("p",
// schema, table), foreign keys ("f", schema, table, name, referenced schema and table,
// deferrable, on delete; not the copies a partitioned table's key has in its partitions) and
// the triggers that fire on writes of its tables and partitions ("t", schema, table, name,
// when) too.
const pgShapeSQL = `SELECT 'c', n.nspname, c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
 (a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> ''), a.attgenerated <> ''
 FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped AND n.nspname NOT IN ('pg_catalog', 'information_schema')
 ORDER BY 2, 3, a.attnum;
SELECT 'k', n.nspname, c.relname, a.attname FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
 JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey)
 WHERE i.indisprimary AND c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
 ORDER BY 2, 3, array_position(i.indkey::int2[], a.attnum);
SELECT 'p', n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind = 'p' AND n.nspname NOT IN ('pg_catalog', 'information_schema') ORDER BY 2, 3;
SELECT 'f', cn.nspname, cr.relname, c.conname, pn.nspname, pr.relname, c.condeferrable, c.confdeltype FROM pg_constraint c
 JOIN pg_class cr ON cr.oid = c.conrelid JOIN pg_namespace cn ON cn.oid = cr.relnamespace
 JOIN pg_class pr ON pr.oid = c.confrelid JOIN pg_namespace pn ON pn.oid = pr.relnamespace
 WHERE c.contype = 'f' AND NOT cr.relispartition AND NOT pr.relispartition AND cn.nspname NOT IN ('pg_catalog', 'information_schema')
 ORDER BY 2, 3, 4;
SELECT 't', n.nspname, c.relname, t.tgname, t.tgenabled FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE NOT t.tgisinternal AND t.tgenabled IN ('O', 'A') AND c.relkind = 'r' AND n.nspname NOT IN ('pg_catalog', 'information_schema')
 ORDER BY 2, 3, 4;`

// digests runs the queries of each database in a session of its own, in one repeatable-read
// snapshot. psql streams rows (FETCH_COUNT) rather than hold a table's in memory.
func (postgres) digests(ctx context.Context, c Dumps, t target, qs []digestQuery, out io.Writer) error {
	for i := 0; i < len(qs); {
		j := i
		db := qs[i].database(true)
		var script strings.Builder
		script.WriteString("\\set FETCH_COUNT 10000\n" + t.pgValuesAsText() + "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;\n")
		for ; j < len(qs) && qs[j].database(true) == db; j++ {
			script.WriteString(digestSQL(true, qs[j]))
		}
		script.WriteString("COMMIT;")
		cmd := pgShell("psql", t.cred, "-X", "-q", "-A", "-t", "-F", "\t", "-v", "ON_ERROR_STOP=1", "--dbname="+db)
		stdin := strings.NewReader(t.cred.passwordLine() + script.String() + "\n\\q\n")
		if err := c.exec(ctx, t.item, t.cfg.Container, cmd, stdin, out); err != nil {
			return fmt.Errorf("database %s: digest rows: %w", db, err)
		}
		i = j
	}
	return nil
}

// prepareLoad ends the other sessions on the databases the dump replaces: the dump drops them
// before recreating them, which open sessions would make fail. PostgreSQL dumps are not staged.
// psql starts in the default database, or in template1 when the dump holds the default database:
// a dump of it by an earlier ferry (pg_dump --create) drops it first.
func (postgres) prepareLoad(ctx context.Context, c Dumps, t target, d snapshot.Database, checked *checkedDump, stage map[string]string) (loading, error) {
	if stage != nil {
		return loading{}, fmt.Errorf("database %s: staging is for MySQL dumps", d.Name)
	}
	first := pgDefaultDB
	if slices.Contains(d.Schemas, pgDefaultDB) {
		first = "template1"
	}
	l := loading{cmd: pgShell("psql", t.cred, "-X", "-q", "-v", "ON_ERROR_STOP=1", "--dbname="+first), end: "\n\\q\n"}
	if _, err := c.pgQuery(ctx, t.item, t.cfg.Container, t.cred, pgDefaultDB, terminateSessions(d.Schemas)); err != nil {
		return l, fmt.Errorf("end the sessions on the databases to replace: %w", err)
	}
	return l, nil
}

// terminateSessions is SQL that ends other sessions on the PostgreSQL databases.
func terminateSessions(dbs []string) string {
	quoted := make([]string, len(dbs))
	for i, db := range dbs {
		quoted[i] = quote(db)
	}
	return "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname IN (" + strings.Join(quoted, ", ") + ") AND pid <> pg_backend_pid();"
}

// pgTableStats counts the rows of every table of db and checksums their contents (the MD5 of the
// sorted MD5s of the rows' text, pgRowText), in one repeatable-read snapshot.
func (c Dumps) pgTableStats(ctx context.Context, t target, db string) ([]snapshot.Table, error) {
	rows, err := c.pgQuery(ctx, t.item, t.cfg.Container, t.cred, db,
		"SELECT schemaname, tablename FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2;")
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	var script strings.Builder
	script.WriteString(t.pgValuesAsText() + "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;\n")
	for _, r := range rows {
		fmt.Fprintf(&script, "SELECT %s, %s, count(*), md5(coalesce(string_agg(md5(%s), '' ORDER BY md5(%s)), '')) FROM %s.%s %s;\n",
			quote(r[0]), quote(r[1]), pgRowText, pgRowText, pgQuoted(r[0]), pgQuoted(r[1]), pgRowAlias)
	}
	script.WriteString("COMMIT;")
	out, err := c.pgQuery(ctx, t.item, t.cfg.Container, t.cred, db, script.String())
	if err != nil {
		return nil, fmt.Errorf("count and checksum tables: %w", err)
	}
	var tables []snapshot.Table
	for _, r := range out {
		if len(r) != 4 {
			continue
		}
		n, err := strconv.ParseInt(r[2], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("row count of %s.%s: %q", r[0], r[1], r[2])
		}
		tables = append(tables, snapshot.Table{Schema: db + "." + r[0], Name: r[1], Rows: n, Checksum: r[3]})
	}
	if len(tables) != len(rows) {
		return nil, fmt.Errorf("counted %d of %d tables", len(tables), len(rows))
	}
	return tables, nil
}

// pgValuesAsText fixes how the session writes values as text, which checksums and digests read:
// by default the server's settings, which two servers need not share (a time zone, a date
// style, rounded floats, bytea's escape form, the currency's locale), and the same rows would
// differ from one to the other. These are pg_dump's own, and UTC.
const pgValuesAsText = "SET TimeZone = 'UTC'; SET DateStyle = 'ISO, YMD'; SET IntervalStyle = 'postgres'; SET extra_float_digits = 3; SET bytea_output = 'hex'; SET lc_monetary = 'C';\n"

// pgValuesAsText is pgValuesAsText, or nothing where the server's own settings are read.
func (t target) pgValuesAsText() string {
	if t.serverSettings {
		return ""
	}
	return pgValuesAsText
}

// pgRowAlias names the table in pgTableStats' query, and pgRowText is the text of its whole row.
// A bare name (t::text) would be a column of that name when the table has one, and the checksum
// that column's alone; the qualified star (alias.*) always means the table's row, whatever its
// columns are called. Its text is the same as the row's by the table's name.
const (
	pgRowAlias = `"ferry row"`
	pgRowText  = "(" + pgRowAlias + ".*)::text"
)
