package integration

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/databases"
	"github.com/ferrykube/ferry/storage"
)

// Shapes of tables and databases that the dumps, checksums and carry-backs must not pass over:
// a PostgreSQL column whose name is the checksum's alias, an AUTO_INCREMENT row numbered 0, the
// `postgres` database holding an application's tables, MariaDB's system-versioned tables and
// sequences.

// shapesConfig writes a ferry.yaml declaring the MySQL workload of namespace ns (serveDatabases)
// with schemas mysqlSchemas and its PostgreSQL workload with databases pgDBs; an empty list
// declares no engine, a nil one declares it without schemas (all but the server's own).
func shapesConfig(t *testing.T, ns string, mysqlSchemas, pgDBs []string) string {
	t.Helper()
	list := func(names []string) string {
		if names == nil {
			return ""
		}
		return "\n  schemas: [" + strings.Join(names, ", ") + "]"
	}
	text := "include: {namespaces: [" + ns + "]}\ndatabases:\n"
	if mysqlSchemas == nil || len(mysqlSchemas) > 0 {
		text += `- name: app-mysql
  engine: mysql
  namespace: ` + ns + `
  workload: deployment/mysql
  secret: {name: mysql-secret, userKey: username, passwordKey: password}` + list(mysqlSchemas) + "\n"
	}
	if pgDBs == nil || len(pgDBs) > 0 {
		text += `- name: app-pg
  engine: postgresql
  namespace: ` + ns + `
  workload: deployment/pg
  secret: {name: pg-creds, userKey: user, passwordKey: password}` + list(pgDBs) + "\n"
	}
	config := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(config, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return config
}

// shapesBackup backs up cluster with config into the folder url of a store, as name, and returns
// the store and the backup's manifest.
func shapesBackup(t *testing.T, url, cluster, config, name string) (storage.Backend, *snapshot.Manifest) {
	t.Helper()
	if code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", cluster, "-f", config, "--name", name); code != 0 {
		t.Fatalf("ferry backup of %s exited %d\nstdout: %s\nstderr: %s", cluster, code, out, errOut)
	}
	return readManifest(t, url, name)
}

// shapesDatabase is the backup's database named name.
func shapesDatabase(t *testing.T, m *snapshot.Manifest, name string) snapshot.Database {
	t.Helper()
	i := slices.IndexFunc(m.Databases, func(d snapshot.Database) bool { return d.Name == name })
	if i < 0 {
		t.Fatalf("the manifest has no database %s: %+v", name, m.Databases)
	}
	return m.Databases[i]
}

// shapesDumps are the databases kind on cluster, the backup's namespace ns mapped to the
// cluster's namespace to.
func shapesDumps(t *testing.T, cluster, ns, to string, carryBack bool) databases.Dumps {
	t.Helper()
	c, kc := clients(t, cluster)
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	d := databases.Dumps{Config: cfg, Client: kc, IntoExistingSchema: carryBack}
	if ns != to {
		d.Mapping = snapshot.Mapping{Namespaces: map[string]string{ns: to}}
	}
	return d
}

// shapesRun runs the databases kind's restore (verify false) or verify of backup on dumps' cluster.
func shapesRun(t *testing.T, ctx context.Context, dumps databases.Dumps, store storage.Backend, backup string, verify bool) *snapshot.Report {
	t.Helper()
	r, err := snapshot.Open(ctx, store, backup, nil)
	if err != nil {
		t.Fatal(err)
	}
	var report snapshot.Report
	run := dumps.Restore
	if verify {
		run = dumps.Verify
	}
	if err := run(ctx, r, &report); err != nil {
		t.Fatalf("backup %s: %v", backup, err)
	}
	return &report
}

// TestPostgresChecksumSeesEveryColumn: a table with a column named as the alias of the row in the
// checksum's query (t, or the alias ferry uses now) is checksummed whole: a change in another
// column is a difference verify names. Before, `md5(t::text) FROM tbl t` read column t, not the
// row, and verify passed.
func TestPostgresChecksumSeesEveryColumn(t *testing.T) {
	testbed.Require(t, tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const ns, db = "pg-checksum", "sh_checksum"
	serveDatabases(t, "blue", ns)
	pg := tb.Postgres["blue"]
	t.Cleanup(func() {
		if _, err := pg.SQL(context.Background(), tb.Bins, "postgres", "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)"); err != nil {
			t.Error(err)
		}
	})
	for _, stmt := range []string{"DROP DATABASE IF EXISTS " + db + " WITH (FORCE)", "CREATE DATABASE " + db} {
		if _, err := pg.SQL(ctx, tb.Bins, "postgres", stmt); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct{ table, create, change string }{
		{"named_t", `CREATE TABLE public.named_t (id int PRIMARY KEY, t text, body text);
INSERT INTO public.named_t SELECT g, 'same', 'body ' || g FROM generate_series(1, 20) g;`,
			"UPDATE public.named_t SET body = 'changed' WHERE id = 3"},
		{"t", `CREATE TABLE public.t (t int, note text);
INSERT INTO public.t SELECT g, 'note' FROM generate_series(1, 5) g;`,
			"UPDATE public.t SET note = 'changed' WHERE t = 2"},
		{"odd_alias", `CREATE TABLE public.odd_alias ("ferry row" text, "ferry.row" text, "row" text, amount int);
INSERT INTO public.odd_alias SELECT 'a', 'b', 'c', g FROM generate_series(1, 5) g;`,
			"UPDATE public.odd_alias SET amount = 99 WHERE amount = 4"},
	}
	for _, c := range cases {
		if _, err := pg.SQL(ctx, tb.Bins, db, c.create); err != nil {
			t.Fatal(err)
		}
	}
	url := "file://" + t.TempDir()
	store, _ := shapesBackup(t, url, "blue", shapesConfig(t, ns, []string{}, []string{db}), "checksum")
	dumps := shapesDumps(t, "blue", ns, ns, false)
	if items := shapesRun(t, ctx, dumps, store, "checksum", true).Problems(); len(items) > 0 {
		t.Fatalf("verify of the unchanged database lists %+v", items)
	}
	for _, c := range cases {
		t.Run(c.table, func(t *testing.T) {
			before, err := pg.SQL(ctx, tb.Bins, db, "SELECT * FROM public."+c.table+" ORDER BY 1, 2")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pg.SQL(ctx, tb.Bins, db, c.change); err != nil {
				t.Fatal(err)
			}
			report := shapesRun(t, ctx, dumps, store, "checksum", true)
			onlyOne(t, report, snapshot.StatusDifferent, "app-pg/"+db+".public."+c.table, "checksum: backup ")
			// Back as it was: the next case's verify names its own table only.
			restore := "DELETE FROM public." + c.table + "; INSERT INTO public." + c.table + " VALUES " + pgValues(before)
			if _, err := pg.SQL(ctx, tb.Bins, db, restore); err != nil {
				t.Fatal(err)
			}
			if items := shapesRun(t, ctx, dumps, store, "checksum", true).Problems(); len(items) > 0 {
				t.Fatalf("verify after the table was put back lists %+v", items)
			}
		})
	}
}

// pgValues makes the rows psql printed (fields split by |, all text, none NULL) a VALUES list.
func pgValues(out string) string {
	var rows []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		fields := strings.Split(line, "|")
		for i, f := range fields {
			fields[i] = "'" + strings.ReplaceAll(f, "'", "''") + "'"
		}
		rows = append(rows, "("+strings.Join(fields, ", ")+")")
	}
	return strings.Join(rows, ", ")
}

// TestCarryBackKeepsRowZero: green's AUTO_INCREMENT table holds a row numbered 0 (a sentinel an
// application wrote with NO_AUTO_VALUE_ON_ZERO, as mysqldump loads it); carried back into blue it
// keeps its number. Before, the carry-back's INSERT ... SELECT gave it a new one.
func TestCarryBackKeepsRowZero(t *testing.T) {
	testbed.Require(t, tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const blueNS, greenNS, schema = "db-zero", "db-zero-green", "sh_zero"
	blueDB, greenDB := mariaDBsServed(t, blueNS, greenNS, schema)
	create := `DROP DATABASE IF EXISTS ` + schema + `; CREATE DATABASE ` + schema + `;
CREATE TABLE ` + schema + `.kinds (id INT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(32) NOT NULL) ENGINE=InnoDB;
SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_AUTO_VALUE_ON_ZERO');
INSERT INTO ` + schema + `.kinds VALUES (0, 'none'), (1, 'first');`
	if _, err := blueDB.SQL(ctx, tb.Bins, create); err != nil {
		t.Fatal(err)
	}
	if _, err := greenDB.SQL(ctx, tb.Bins, create+`
INSERT INTO `+schema+`.kinds (name) VALUES ('green'); UPDATE `+schema+`.kinds SET name = 'none on green' WHERE id = 0;`); err != nil {
		t.Fatal(err)
	}
	url := "file://" + t.TempDir()
	store, _ := shapesBackup(t, url, "green", shapesConfig(t, greenNS, []string{schema}, []string{}), "zero")
	report := shapesRun(t, ctx, shapesDumps(t, "blue", greenNS, blueNS, true), store, "zero", false)
	if items := report.Problems(); len(items) > 0 || report.Counts["databases"][snapshot.StatusRestored] != 1 {
		t.Fatalf("the carry-back lists %+v, counts %v", items, report.Counts)
	}
	rows := "SELECT id, name FROM " + schema + ".kinds ORDER BY id"
	b, errB := blueDB.SQL(ctx, tb.Bins, rows)
	g, errG := greenDB.SQL(ctx, tb.Bins, rows)
	if errB != nil || errG != nil || b != g || !strings.HasPrefix(b, "0\tnone on green") {
		t.Fatalf("blue's rows after the carry-back are not green's (%v, %v):\nblue:  %q\ngreen: %q", errB, errG, b, g)
	}
}

// TestPostgresDefaultDatabase: an application's tables in the server's `postgres` database (the
// official image's POSTGRES_DB) are backed up, restored and verified like any database's, both
// when ferry.yaml names it and when it names none; an empty `postgres` database is left out.
// Before, its tables were skipped silently, and `schemas: [postgres]` failed at load: the dump
// dropped the database psql was connected to.
func TestPostgresDefaultDatabase(t *testing.T) {
	testbed.Require(t, tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const blueNS, greenNS, other = "pg-default", "pg-default-green", "zz_sh_after"
	serveDatabases(t, "blue", blueNS)
	serveDatabases(t, "green", greenNS)
	bluePG, greenPG := tb.Postgres["blue"], tb.Postgres["green"]
	clean := func(ctx context.Context) error {
		for _, pg := range []*testbed.PostgreSQL{bluePG, greenPG} {
			if _, err := pg.SQL(ctx, tb.Bins, "postgres", "DROP TABLE IF EXISTS public.sh_accounts; DROP SCHEMA IF EXISTS sh_billing CASCADE;"); err != nil {
				return err
			}
			if _, err := pg.SQL(ctx, tb.Bins, "postgres", "DROP DATABASE IF EXISTS "+other+" WITH (FORCE)"); err != nil {
				return err
			}
		}
		return nil
	}
	t.Cleanup(func() {
		if err := clean(context.Background()); err != nil {
			t.Error(err)
		}
	})
	if err := clean(ctx); err != nil {
		t.Fatal(err)
	}
	url := "file://" + t.TempDir()

	// Empty, it is not a database of the platform's.
	_, m := shapesBackup(t, url, "blue", shapesConfig(t, blueNS, []string{}, nil), "pg-empty-default")
	if d := shapesDatabase(t, m, "app-pg"); slices.Contains(d.Schemas, "postgres") {
		t.Fatalf("an empty postgres database is backed up: %v", d.Schemas)
	}

	if _, err := bluePG.SQL(ctx, tb.Bins, "postgres", `CREATE TABLE public.sh_accounts (id int PRIMARY KEY, email text);
INSERT INTO public.sh_accounts SELECT g, 'user' || g || '@example.com' FROM generate_series(1, 40) g;
CREATE SCHEMA sh_billing; CREATE TABLE sh_billing.invoices (id serial PRIMARY KEY, amount numeric);
INSERT INTO sh_billing.invoices (amount) VALUES (9.99), (19.5);`); err != nil {
		t.Fatal(err)
	}
	if _, err := bluePG.SQL(ctx, tb.Bins, "postgres", "CREATE DATABASE "+other); err != nil {
		t.Fatal(err)
	}
	if _, err := bluePG.SQL(ctx, tb.Bins, other, "CREATE TABLE public.notes (id int PRIMARY KEY); INSERT INTO public.notes VALUES (1), (2);"); err != nil {
		t.Fatal(err)
	}
	wantTables := []string{"postgres.public.sh_accounts", "postgres.sh_billing.invoices"}
	tablesOf := func(d snapshot.Database, db string) []string {
		var out []string
		for _, tbl := range d.Tables {
			if strings.HasPrefix(tbl.Schema, db+".") {
				out = append(out, tbl.Schema+"."+tbl.Name)
			}
		}
		return out
	}

	// Named by no configuration: listed with the server's other databases.
	_, m = shapesBackup(t, url, "blue", shapesConfig(t, blueNS, []string{}, nil), "pg-all")
	if d := shapesDatabase(t, m, "app-pg"); !slices.Contains(d.Schemas, "postgres") || !slices.Equal(tablesOf(d, "postgres"), wantTables) {
		t.Fatalf("a backup of every database has databases %v and of postgres tables %v; want postgres with %v", d.Schemas, tablesOf(d, "postgres"), wantTables)
	}

	// Named, beside a database dumped after it: backed up, restored onto green (twice), verified.
	store, m := shapesBackup(t, url, "blue", shapesConfig(t, blueNS, []string{}, []string{"postgres", other}), "pg-default")
	if d := shapesDatabase(t, m, "app-pg"); !slices.Equal(tablesOf(d, "postgres"), wantTables) {
		t.Fatalf("the backup's tables of postgres are %v, want %v", tablesOf(d, "postgres"), wantTables)
	}
	// green's postgres database holds other rows of the same table, to be replaced.
	if _, err := greenPG.SQL(ctx, tb.Bins, "postgres", `CREATE TABLE public.sh_accounts (id int PRIMARY KEY, email text);
INSERT INTO public.sh_accounts VALUES (1, 'green'), (99, 'only on green');`); err != nil {
		t.Fatal(err)
	}
	dumps := shapesDumps(t, "green", blueNS, greenNS, false)
	reads := map[string][]string{
		"postgres": {"SELECT * FROM public.sh_accounts ORDER BY id", "SELECT * FROM sh_billing.invoices ORDER BY id", "SELECT last_value, is_called FROM sh_billing.invoices_id_seq"},
		other:      {"SELECT * FROM public.notes ORDER BY id"},
	}
	for i := range 2 {
		report := shapesRun(t, ctx, dumps, store, "pg-default", false)
		if items := report.Problems(); len(items) > 0 || report.Counts["databases"][snapshot.StatusRestored] != 1 {
			t.Fatalf("restore %d lists %+v, counts %v", i+1, items, report.Counts)
		}
		for db, qs := range reads {
			for _, q := range qs {
				b, errB := bluePG.SQL(ctx, tb.Bins, db, q)
				g, errG := greenPG.SQL(ctx, tb.Bins, db, q)
				if errB != nil || errG != nil || b != g || b == "" {
					t.Fatalf("after restore %d: %s: %s: blue and green differ (%v, %v):\nblue:  %.300q\ngreen: %.300q", i+1, db, q, errB, errG, b, g)
				}
			}
		}
		if items := shapesRun(t, ctx, dumps, store, "pg-default", true).Problems(); len(items) > 0 {
			t.Fatalf("verify after restore %d lists %+v", i+1, items)
		}
	}
	if _, err := greenPG.SQL(ctx, tb.Bins, "postgres", "UPDATE public.sh_accounts SET email = 'changed' WHERE id = 5"); err != nil {
		t.Fatal(err)
	}
	onlyOne(t, shapesRun(t, ctx, dumps, store, "pg-default", true), snapshot.StatusDifferent, "app-pg/postgres.public.sh_accounts", "checksum: backup ")
}

// TestMariaDBVersionedTablesAndSequences: MariaDB's system-versioned tables and its sequences are
// backed up (a versioned table with its history), restored, verified and carried back: a change
// of a versioned table's rows or of its history is a difference verify names, a sequence set
// back is one too, and a carry-back brings green's rows of a versioned table and puts blue's
// sequence at least where green's is. Before, `table_type = 'BASE TABLE'` left them out of the
// counts, checksums and shapes: verify passed whatever their state and the carry-back left them.
func TestMariaDBVersionedTablesAndSequences(t *testing.T) {
	testbed.Require(t, tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const blueNS, greenNS, schema = "db-versioned", "db-versioned-green", "sh_versioned"
	blueDB, greenDB := mariaDBsServed(t, blueNS, greenNS, schema)
	query := func(db *testbed.MariaDB, q string) string {
		t.Helper()
		out, err := db.SQL(ctx, tb.Bins, q)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	query(greenDB, "DROP DATABASE IF EXISTS "+schema)
	query(blueDB, `DROP DATABASE IF EXISTS `+schema+`; CREATE DATABASE `+schema+`;
CREATE TABLE `+schema+`.prices (id INT PRIMARY KEY, amount INT) WITH SYSTEM VERSIONING;
INSERT INTO `+schema+`.prices VALUES (1, 10), (2, 20), (3, 30);
UPDATE `+schema+`.prices SET amount = 11 WHERE id = 1;
DELETE FROM `+schema+`.prices WHERE id = 3;
CREATE TABLE `+schema+`.stamped (id INT PRIMARY KEY, v INT, rs TIMESTAMP(6) GENERATED ALWAYS AS ROW START,
 re TIMESTAMP(6) GENERATED ALWAYS AS ROW END, PERIOD FOR SYSTEM_TIME(rs, re)) WITH SYSTEM VERSIONING;
INSERT INTO `+schema+`.stamped (id, v) VALUES (1, 1), (2, 2);
UPDATE `+schema+`.stamped SET v = 5 WHERE id = 2;
CREATE TABLE `+schema+`.notes (id INT PRIMARY KEY, body TEXT);
INSERT INTO `+schema+`.notes VALUES (1, 'plain');
CREATE SEQUENCE `+schema+`.ids START WITH 100;
SELECT NEXTVAL(`+schema+`.ids), NEXTVAL(`+schema+`.ids);`)
	versioned := []string{"prices", "stamped"}
	history := func(db *testbed.MariaDB) string {
		return query(db, "SELECT id, amount, row_start, row_end FROM "+schema+".prices FOR SYSTEM_TIME ALL ORDER BY id, row_start; "+
			"SELECT id, v, rs, re FROM "+schema+".stamped FOR SYSTEM_TIME ALL ORDER BY id, rs;")
	}

	url := "file://" + t.TempDir()
	config := shapesConfig(t, blueNS, []string{schema}, []string{})
	store, m := shapesBackup(t, url, "blue", config, "versioned")
	d := shapesDatabase(t, m, "app-mysql")
	var tables []string
	for _, tbl := range d.Tables {
		tables = append(tables, tbl.Name)
		if tbl.Checksum == "" || len(tbl.Columns) == 0 {
			t.Errorf("table %s.%s has no checksum or no columns recorded: %+v", tbl.Schema, tbl.Name, tbl)
		}
	}
	if want := []string{"notes", "prices", "stamped"}; !slices.Equal(tables, want) {
		t.Fatalf("the backup's tables are %v, want %v (the versioned ones too)", tables, want)
	}
	if len(d.Sequences) != 1 || d.Sequences[0].Schema != schema || d.Sequences[0].Name != "ids" || d.Sequences[0].Next < 102 {
		t.Fatalf("the backup's sequences are %+v, want %s.ids past 101", d.Sequences, schema)
	}

	dumps := shapesDumps(t, "green", blueNS, greenNS, false)
	restored := func(when string) {
		t.Helper()
		report := shapesRun(t, ctx, dumps, store, "versioned", false)
		if items := report.Problems(); len(items) > 0 || report.Counts["databases"][snapshot.StatusRestored] != 1 {
			t.Fatalf("%s: the restore lists %+v, counts %v", when, items, report.Counts)
		}
		if b, g := history(blueDB), history(greenDB); b != g {
			t.Fatalf("%s: green's versioned rows and history are not blue's:\nblue:  %s\ngreen: %s", when, b, g)
		}
		report = shapesRun(t, ctx, dumps, store, "versioned", true)
		if items := report.Problems(); len(items) > 0 || report.Counts["databases"][snapshot.StatusIdentical] != 3 {
			t.Fatalf("%s: verify lists %+v, counts %v", when, items, report.Counts)
		}
	}
	restored("after a restore")
	if next := number(t, query(greenDB, "SELECT NEXTVAL("+schema+".ids)")); next < 102 {
		t.Fatalf("green's sequence gives %d after the restore; blue's gave 101", next)
	}

	changes := []struct{ name, change, table, detail string }{
		{"a current row", "UPDATE " + schema + ".prices SET amount = 21 WHERE id = 2", "prices", "checksum: backup "},
		{"the history", "DELETE HISTORY FROM " + schema + ".prices", "prices", "checksum: backup "},
		{"a history of explicit periods", "DELETE HISTORY FROM " + schema + ".stamped", "stamped", "checksum: backup "},
		{"a sequence set back", "ALTER SEQUENCE " + schema + ".ids RESTART WITH 1", "ids", "sequence behind the backup's"},
	}
	for _, c := range changes {
		t.Run(c.name, func(t *testing.T) {
			query(greenDB, c.change)
			onlyOne(t, shapesRun(t, ctx, dumps, store, "versioned", true), snapshot.StatusDifferent, "app-mysql/"+schema+"."+c.table, c.detail)
			restored("restored after " + c.name)
		})
	}

	// Carried back: green's writes to a versioned table and its sequence come to blue.
	query(greenDB, "INSERT INTO "+schema+".prices VALUES (4, 40); UPDATE "+schema+".prices SET amount = 12 WHERE id = 1; "+
		"UPDATE "+schema+".stamped SET v = 7 WHERE id = 1; SELECT NEXTVAL("+schema+".ids);")
	greenNext := number(t, query(greenDB, "SELECT next_not_cached_value FROM "+schema+".ids"))
	greenConfig := shapesConfig(t, greenNS, []string{schema}, []string{})
	store, _ = shapesBackup(t, url, "green", greenConfig, "versioned-green")
	report := shapesRun(t, ctx, shapesDumps(t, "blue", greenNS, blueNS, true), store, "versioned-green", false)
	if items := report.Problems(); len(items) > 0 || report.Counts["databases"][snapshot.StatusRestored] != 1 {
		t.Fatalf("the carry-back lists %+v, counts %v", items, report.Counts)
	}
	for _, table := range versioned {
		q := "SELECT * FROM " + schema + "." + table + " ORDER BY id"
		if table == "stamped" {
			q = "SELECT id, v FROM " + schema + ".stamped ORDER BY id"
		}
		if b, g := query(blueDB, q), query(greenDB, q); b != g {
			t.Errorf("blue's rows of %s after the carry-back are not green's:\nblue:  %s\ngreen: %s", table, b, g)
		}
	}
	if next := number(t, query(blueDB, "SELECT NEXTVAL("+schema+".ids)")); next < greenNext {
		t.Errorf("blue's sequence gives %d after the carry-back, behind green's %d", next, greenNext)
	}
}

// number is the whole number a client printed.
func number(t *testing.T, out string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		t.Fatalf("not a number: %q", out)
	}
	return n
}

// mariaDBsServed serves blue's and green's MariaDB in namespaces blueNS and greenNS, and drops
// schema on both once the test is done.
func mariaDBsServed(t *testing.T, blueNS, greenNS, schema string) (blue, green *testbed.MariaDB) {
	t.Helper()
	serveDatabases(t, "blue", blueNS)
	serveDatabases(t, "green", greenNS)
	blue, green = tb.MariaDB["blue"], tb.MariaDB["green"]
	t.Cleanup(func() {
		for _, db := range []*testbed.MariaDB{blue, green} {
			if _, err := db.SQL(context.Background(), tb.Bins, "DROP DATABASE IF EXISTS "+schema+";"); err != nil {
				t.Error(err)
			}
		}
	})
	return blue, green
}
