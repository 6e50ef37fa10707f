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
)

// TestCarryBackDatabaseAcrossUpgrade: blue has the old release's schema, green the new one's
// (a column added, a type widened, a new table, the old release's table gone) and new, changed
// and deleted rows. A backup of green carried back into blue's existing schema leaves blue's
// schema as it was and its rows equal to green's in the columns both have; a green row blue
// cannot hold (a NULL or a too long value) and a NOT NULL column of blue green lacks are refused
// by table and column, blue unchanged.
func TestCarryBackDatabaseAcrossUpgrade(t *testing.T) {
	testbed.Require(t, tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const blueNS, greenNS = "db-carry", "db-carry-green"
	serveDatabases(t, "blue", blueNS)
	serveDatabases(t, "green", greenNS)
	blueDB, greenDB := tb.MariaDB["blue"], tb.MariaDB["green"]
	t.Cleanup(func() {
		for _, db := range []*testbed.MariaDB{blueDB, greenDB} {
			if _, err := db.SQL(context.Background(), tb.Bins, "DROP DATABASE IF EXISTS cb_kfp;"); err != nil {
				t.Error(err)
			}
		}
	})
	var runs strings.Builder
	for i := 1; i <= 50; i++ {
		if i > 1 {
			runs.WriteString(",")
		}
		runs.WriteString("(" + strconv.Itoa(i) + ", 'run-" + strconv.Itoa(i) + " ✓', " + strconv.Itoa(i) + ".5)")
	}
	old := `SET NAMES utf8mb4; DROP DATABASE IF EXISTS cb_kfp; CREATE DATABASE cb_kfp CHARACTER SET utf8mb4;
CREATE TABLE cb_kfp.runs (id INT PRIMARY KEY, name VARCHAR(64) NOT NULL, score DOUBLE) ENGINE=InnoDB;
INSERT INTO cb_kfp.runs VALUES ` + runs.String() + `;
CREATE TABLE cb_kfp.tags (run INT, tag VARCHAR(32), PRIMARY KEY (run, tag)) ENGINE=InnoDB;
INSERT INTO cb_kfp.tags VALUES (1, 'a'), (2, 'b');`
	if _, err := blueDB.SQL(ctx, tb.Bins, old+`
CREATE TABLE cb_kfp.blue_only (id INT PRIMARY KEY);
INSERT INTO cb_kfp.blue_only VALUES (1);`); err != nil {
		t.Fatal(err)
	}
	// Green: the old data, migrated by the new release, then written to.
	if _, err := greenDB.SQL(ctx, tb.Bins, old+`
ALTER TABLE cb_kfp.runs ADD COLUMN owner VARCHAR(64) NOT NULL DEFAULT 'kubeflow', MODIFY name VARCHAR(255) NOT NULL;
CREATE TABLE cb_kfp.run_metrics (run INT, metric VARCHAR(64), value DOUBLE, PRIMARY KEY (run, metric));
INSERT INTO cb_kfp.run_metrics VALUES (1, 'loss', 0.25);
INSERT INTO cb_kfp.runs (id, name, score, owner) VALUES (51, 'green run', 1, 'alice'), (52, 'another', NULL, 'bob');
DELETE FROM cb_kfp.runs WHERE id = 7;
UPDATE cb_kfp.runs SET name = 'renamed on green' WHERE id = 3;
DELETE FROM cb_kfp.tags WHERE run = 2;
INSERT INTO cb_kfp.tags VALUES (51, 'new');`); err != nil {
		t.Fatal(err)
	}

	config := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(config, []byte(`include: {namespaces: [`+greenNS+`]}
databases:
- name: kfp-mysql
  engine: mysql
  namespace: `+greenNS+`
  workload: deployment/mysql
  secret: {name: mysql-secret, userKey: username, passwordKey: password}
  schemas: [cb_kfp]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	url := backupMinIO(t, "dbcarry")
	backupGreen := func(name string) {
		t.Helper()
		if code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "green", "-f", config, "--name", name); code != 0 {
			t.Fatalf("ferry backup of green exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
	}
	blueCluster, blueKC := clients(t, "blue")
	cfg, err := blueCluster.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	store, _ := readManifest(t, url, func() string { backupGreen("green-1"); return "green-1" }())
	carryBack := func(backup string) *snapshot.Report {
		t.Helper()
		r, err := snapshot.Open(ctx, store, backup, nil)
		if err != nil {
			t.Fatal(err)
		}
		var report snapshot.Report
		dumps := databases.Dumps{Config: cfg, Client: blueKC, Mapping: snapshot.Mapping{Namespaces: map[string]string{greenNS: blueNS}}, IntoExistingSchema: true}
		start := time.Now()
		if err := dumps.Restore(ctx, r, &report); err != nil {
			t.Fatal(err)
		}
		t.Logf("carry-back of %s took %s", backup, time.Since(start).Round(time.Millisecond))
		return &report
	}
	query := func(db *testbed.MariaDB, q string) string {
		t.Helper()
		out, err := db.SQL(ctx, tb.Bins, "SET NAMES utf8mb4; "+q)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	schemaOf := func() string {
		t.Helper()
		s := query(blueDB, `SELECT table_name, column_name, column_type, is_nullable, column_default, extra FROM information_schema.columns WHERE table_schema = 'cb_kfp' ORDER BY 1, ordinal_position;
SELECT table_name FROM information_schema.tables WHERE table_schema = 'cb_kfp' ORDER BY 1;
SHOW DATABASES LIKE 'ferry_stage%';`)
		for _, table := range []string{"runs", "tags", "blue_only"} {
			s += query(blueDB, "SHOW CREATE TABLE cb_kfp."+table)
		}
		return s
	}
	rowsOf := func(db *testbed.MariaDB) string {
		return query(db, "SELECT id, name, score FROM cb_kfp.runs ORDER BY id; SELECT * FROM cb_kfp.tags ORDER BY 1, 2;")
	}
	schemaBefore, blueRowsBefore := schemaOf(), rowsOf(blueDB)

	report := carryBack("green-1")
	want := []string{
		"skipped kfp-mysql/cb_kfp.blue_only: not in the backup: left as it is on the target",
		"skipped kfp-mysql/cb_kfp.run_metrics: only in the backup (1 rows), not on the target: left, not carried back",
		"skipped kfp-mysql/cb_kfp.runs: columns only in the backup, their values not carried back: owner",
	}
	if got := problemsOf(report); !slices.Equal(got, want) || report.Counts["databases"][snapshot.StatusRestored] != 1 {
		t.Fatalf("the carry-back lists\n%s\ncounts %v; want\n%s", strings.Join(got, "\n"), report.Counts, strings.Join(want, "\n"))
	}
	if got := schemaOf(); got != schemaBefore {
		t.Fatalf("blue's schema changed:\nbefore %s\nafter  %s", schemaBefore, got)
	}
	if b, g := rowsOf(blueDB), rowsOf(greenDB); b != g || b == blueRowsBefore {
		t.Fatalf("blue's rows are not green's in the shared columns:\nblue  %.400s\ngreen %.400s", b, g)
	}
	if n := query(blueDB, "SELECT COUNT(*) FROM cb_kfp.blue_only"); strings.TrimSpace(n) != "1" {
		t.Fatalf("blue's own table holds %s rows, want its 1", n)
	}

	// Refusals: blue as it is now must stay so.
	blueRowsBefore = rowsOf(blueDB)
	refused := func(backup, table, column string) {
		t.Helper()
		report := carryBack(backup)
		items := report.Problems()
		if len(items) != 1 || items[0].Status != snapshot.StatusFailed || items[0].Name != "kfp-mysql/"+table ||
			!strings.Contains(strings.ToLower(items[0].Detail), strings.ToLower(column)) || !strings.Contains(items[0].Detail, "nothing of database kfp-mysql was changed") {
			t.Fatalf("the carry-back of %s lists %+v; want %s refused naming %s", backup, items, table, column)
		}
		t.Logf("refused: %s", items[0].Detail)
		for _, value := range []string{"SECRET", "alice"} {
			if strings.Contains(items[0].Detail, value) {
				t.Errorf("a value shows in %q", items[0].Detail)
			}
		}
		if got := schemaOf(); got != schemaBefore {
			t.Fatalf("blue's schema changed after a refusal:\nbefore %s\nafter  %s", schemaBefore, got)
		}
		if got := rowsOf(blueDB); got != blueRowsBefore {
			t.Fatalf("blue's rows changed after a refusal:\nbefore %.400s\nafter  %.400s", blueRowsBefore, got)
		}
	}
	// A value longer than blue's column takes.
	query(greenDB, "INSERT INTO cb_kfp.runs (id, name) VALUES (60, CONCAT('SECRET', REPEAT('x', 100)))")
	backupGreen("green-long")
	refused("green-long", "cb_kfp.runs", "column 'name'")
	// A NULL where blue's column is NOT NULL.
	query(greenDB, "DELETE FROM cb_kfp.runs WHERE id = 60; ALTER TABLE cb_kfp.runs MODIFY name VARCHAR(255) NULL; INSERT INTO cb_kfp.runs (id, name) VALUES (61, NULL)")
	backupGreen("green-null")
	refused("green-null", "cb_kfp.runs", "column 'name'")
	// A NOT NULL column of blue without a default that green's table lacks.
	query(blueDB, "ALTER TABLE cb_kfp.tags ADD COLUMN must INT NOT NULL")
	schemaBefore, blueRowsBefore = schemaOf(), rowsOf(blueDB)
	refused("green-1", "cb_kfp.tags", "column must is NOT NULL without a default")
}

// TestCarryBackPostgresAcrossUpgrade is TestCarryBackDatabaseAcrossUpgrade for PostgreSQL: green's
// migrated database carried back into blue's old one, blue's schema unchanged and its rows
// green's in the shared columns, its sequences where green's are; a too long value and a NULL in
// blue's NOT NULL column refused naming table and column, blue unchanged.
func TestCarryBackPostgresAcrossUpgrade(t *testing.T) {
	testbed.Require(t, tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const blueNS, greenNS = "pg-carry", "pg-carry-green"
	serveDatabases(t, "blue", blueNS)
	serveDatabases(t, "green", greenNS)
	bluePG, greenPG := tb.Postgres["blue"], tb.Postgres["green"]
	t.Cleanup(func() {
		for _, pg := range []*testbed.PostgreSQL{bluePG, greenPG} {
			if _, err := pg.SQL(context.Background(), tb.Bins, "postgres", "DROP DATABASE IF EXISTS cb_appdb WITH (FORCE)"); err != nil {
				t.Error(err)
			}
		}
	})
	old := `CREATE SCHEMA billing;
CREATE TABLE public.users (id int PRIMARY KEY, email varchar(64) NOT NULL, age int);
INSERT INTO public.users SELECT g, 'usér' || g || '@example.com', g % 90 FROM generate_series(1, 100) g;
CREATE TABLE billing.invoices (id int, amount numeric);
INSERT INTO billing.invoices VALUES (1, 9.99), (1, 9.99), (2, 19.5);
CREATE TABLE public.events (id serial PRIMARY KEY, what text);
CREATE TABLE public.audit (what text);
CREATE FUNCTION public.audit_event() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO public.audit VALUES ('event ' || NEW.id); RETURN NEW; END $$;
CREATE TRIGGER events_audit AFTER INSERT ON public.events FOR EACH ROW EXECUTE FUNCTION public.audit_event();
CREATE TRIGGER events_replica AFTER INSERT ON public.events FOR EACH ROW EXECUTE FUNCTION public.audit_event();
ALTER TABLE public.events ENABLE REPLICA TRIGGER events_replica;
INSERT INTO public.events (what) SELECT 'event ' || g FROM generate_series(1, 10) g;
CREATE TABLE public.metrics (at date NOT NULL, value int, user_id int REFERENCES public.users(id)) PARTITION BY RANGE (at);
CREATE TABLE public.metrics_2026_11 PARTITION OF public.metrics FOR VALUES FROM ('2026-11-01') TO ('2026-12-01');
CREATE TABLE public.metrics_2026_12 PARTITION OF public.metrics FOR VALUES FROM ('2026-12-01') TO ('2027-01-01');
INSERT INTO public.metrics VALUES ('2026-11-15', 1, 1), ('2026-12-01', 2, 2);
CREATE TABLE public.orders (id int PRIMARY KEY, user_id int REFERENCES public.users(id) ON DELETE CASCADE, total numeric);
INSERT INTO public.orders SELECT g, g, g * 1.5 FROM generate_series(1, 20) g;`
	sql := func(pg *testbed.PostgreSQL, db, q string) string {
		t.Helper()
		out, err := pg.SQL(ctx, tb.Bins, db, q)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, pg := range []*testbed.PostgreSQL{bluePG, greenPG} {
		sql(pg, "postgres", "DROP DATABASE IF EXISTS cb_appdb")
		sql(pg, "postgres", "CREATE DATABASE cb_appdb")
		sql(pg, "cb_appdb", old)
	}
	sql(bluePG, "cb_appdb", `CREATE TABLE public.blue_only (id int); INSERT INTO public.blue_only VALUES (1);
CREATE TABLE public.blue_notes (user_id int REFERENCES public.users(id), note text); INSERT INTO public.blue_notes VALUES (1, 'kept');`)
	sql(greenPG, "cb_appdb", `ALTER TABLE public.users ADD COLUMN tenant text NOT NULL DEFAULT 'default', ALTER COLUMN email TYPE varchar(255), ALTER COLUMN age TYPE bigint;
CREATE TABLE public.sessions (id int PRIMARY KEY, token text);
INSERT INTO public.sessions VALUES (1, 'tok');
INSERT INTO public.users (id, email, tenant) VALUES (101, 'new@example.com', 'alice'), (102, E'tab\there', 'bob');
DELETE FROM public.users WHERE id = 7;
UPDATE public.users SET email = 'renamed@example.com' WHERE id = 3;
DELETE FROM billing.invoices WHERE id = 2;
INSERT INTO public.events (what) VALUES ('on green'), ('on green too');
INSERT INTO public.metrics VALUES ('2026-12-24', 3);
DELETE FROM public.metrics WHERE value = 1;`)

	config := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(config, []byte(`include: {namespaces: [`+greenNS+`]}
databases:
- name: app-pg
  engine: postgresql
  namespace: `+greenNS+`
  workload: deployment/pg
  secret: {name: pg-creds, userKey: user, passwordKey: password}
  schemas: [cb_appdb]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	url := backupMinIO(t, "pgcarry")
	backupGreen := func(name string) {
		t.Helper()
		if code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "green", "-f", config, "--name", name); code != 0 {
			t.Fatalf("ferry backup of green exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
	}
	backupGreen("green-1")
	store, _ := readManifest(t, url, "green-1")
	blueCluster, blueKC := clients(t, "blue")
	cfg, err := blueCluster.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	carryBack := func(backup string) *snapshot.Report {
		t.Helper()
		r, err := snapshot.Open(ctx, store, backup, nil)
		if err != nil {
			t.Fatal(err)
		}
		var report snapshot.Report
		dumps := databases.Dumps{Config: cfg, Client: blueKC, Mapping: snapshot.Mapping{Namespaces: map[string]string{greenNS: blueNS}}, IntoExistingSchema: true}
		start := time.Now()
		if err := dumps.Restore(ctx, r, &report); err != nil {
			t.Fatal(err)
		}
		t.Logf("carry-back of %s took %s", backup, time.Since(start).Round(time.Millisecond))
		return &report
	}
	schemaOf := func() string {
		return sql(bluePG, "cb_appdb", `SELECT table_schema, table_name, column_name, data_type, character_maximum_length, is_nullable, column_default
 FROM information_schema.columns WHERE table_schema IN ('public', 'billing') ORDER BY 1, 2, ordinal_position`) +
			sql(bluePG, "cb_appdb", "SELECT conrelid::regclass, conname, pg_get_constraintdef(oid), condeferrable, condeferred FROM pg_constraint ORDER BY 1, 2") +
			sql(bluePG, "cb_appdb", "SELECT tgrelid::regclass, tgname, tgenabled FROM pg_trigger WHERE NOT tgisinternal ORDER BY 1, 2")
	}
	rowsOf := func(pg *testbed.PostgreSQL) string {
		return sql(pg, "cb_appdb", "SELECT id, email, age FROM public.users ORDER BY id") + sql(pg, "cb_appdb", "SELECT * FROM billing.invoices ORDER BY 1, 2") +
			sql(pg, "cb_appdb", "SELECT tableoid::regclass, * FROM public.metrics ORDER BY 1, 2") + sql(pg, "cb_appdb", "SELECT * FROM public.orders ORDER BY id") +
			sql(pg, "cb_appdb", "SELECT last_value, is_called FROM public.events_id_seq")
	}
	schemaBefore, blueRowsBefore := schemaOf(), rowsOf(bluePG)
	report := carryBack("green-1")
	want := []string{
		"skipped app-pg/cb_appdb.public.blue_notes: not in the backup: left as it is on the target",
		"skipped app-pg/cb_appdb.public.blue_only: not in the backup: left as it is on the target",
		"skipped app-pg/cb_appdb.public.sessions: only in the backup (1 rows), not on the target: left, not carried back",
		"skipped app-pg/cb_appdb.public.users: columns only in the backup, their values not carried back: tenant",
	}
	if got := problemsOf(report); !slices.Equal(got, want) || report.Counts["databases"][snapshot.StatusRestored] != 1 {
		t.Fatalf("the carry-back lists\n%s\ncounts %v; want\n%s", strings.Join(got, "\n"), report.Counts, strings.Join(want, "\n"))
	}
	if got := schemaOf(); got != schemaBefore {
		t.Fatalf("blue's schema changed:\nbefore %s\nafter  %s", schemaBefore, got)
	}
	// Blue's triggers do not run again what green's did: green's audit rows come back as they are.
	if b, g := sql(bluePG, "cb_appdb", "SELECT count(*) FROM public.audit"), sql(greenPG, "cb_appdb", "SELECT count(*) FROM public.audit"); b != g {
		t.Errorf("blue holds %s audit rows, green %s", strings.TrimSpace(b), strings.TrimSpace(g))
	}
	// Blue's foreign keys hold while its tables are replaced, and cascade nothing away.
	if b, g := sql(bluePG, "cb_appdb", "SELECT count(*) FROM public.orders"), sql(greenPG, "cb_appdb", "SELECT count(*) FROM public.orders"); b != g {
		t.Errorf("blue holds %s of green's %s orders", strings.TrimSpace(b), strings.TrimSpace(g))
	}
	if b, g := rowsOf(bluePG), rowsOf(greenPG); b != g || b == blueRowsBefore {
		t.Fatalf("blue's rows are not green's in the shared columns:\nblue  %.400s\ngreen %.400s", b, g)
	}
	if n := sql(bluePG, "cb_appdb", "SELECT count(*) FROM public.blue_only"); strings.TrimSpace(n) != "1" {
		t.Fatalf("blue's own table holds %s rows", n)
	}
	if n := sql(bluePG, "cb_appdb", "SELECT note FROM public.blue_notes WHERE user_id = 1"); strings.TrimSpace(n) != "kept" {
		t.Fatalf("blue's own table referencing users holds %q, want its row", n)
	}
	// Blue's application writes again after the rollback: its sequences go on from green's.
	if id, err := bluePG.SQL(ctx, tb.Bins, "cb_appdb", "INSERT INTO public.events (what) VALUES ('after the rollback') RETURNING id"); err != nil || strings.SplitN(id, "\n", 2)[0] != "13" {
		t.Fatalf("a new event on blue after the carry-back: %q (%v), want id 13, after green's 12", id, err)
	}

	blueRowsBefore = rowsOf(bluePG)
	refused := func(backup, table, column string) {
		t.Helper()
		report := carryBack(backup)
		items := report.Problems()
		if len(items) != 1 || items[0].Status != snapshot.StatusFailed || items[0].Name != "app-pg/"+table ||
			!strings.Contains(items[0].Detail, column) || !strings.Contains(items[0].Detail, "nothing of database app-pg was changed") {
			t.Fatalf("the carry-back of %s lists %+v; want %s refused naming %s", backup, items, table, column)
		}
		t.Logf("refused: %s", items[0].Detail)
		if strings.Contains(items[0].Detail, "SECRET") {
			t.Errorf("a value shows in %q", items[0].Detail)
		}
		if got := schemaOf(); got != schemaBefore {
			t.Fatalf("blue's schema changed after a refusal:\nbefore %s\nafter  %s", schemaBefore, got)
		}
		if got := rowsOf(bluePG); got != blueRowsBefore {
			t.Fatalf("blue's rows changed after a refusal:\nbefore %.400s\nafter  %.400s", blueRowsBefore, got)
		}
	}
	sql(greenPG, "cb_appdb", "INSERT INTO public.users (id, email) VALUES (200, 'SECRET' || repeat('x', 100))")
	backupGreen("green-long")
	refused("green-long", "cb_appdb.public.users", "column email")
	sql(greenPG, "cb_appdb", "DELETE FROM public.users WHERE id = 200; ALTER TABLE public.users ALTER COLUMN email DROP NOT NULL; INSERT INTO public.users (id, email) VALUES (201, NULL)")
	backupGreen("green-null")
	refused("green-null", "cb_appdb.public.users", `column "email"`)
}

// TestCarryBackMySQLTriggersDoNotFire: blue's tables have triggers, as applications keep an audit
// trail, a counter or a derived column with them: one that rewrites a column of each new row
// (BEFORE INSERT), one that writes another table (AFTER INSERT), one of several statements that
// counts deletions (AFTER DELETE, BEGIN ... END). Green's rows were written through the same
// triggers, so what they wrote comes with green's tables. Carried back into blue, blue's tables
// must hold green's rows exactly: blue's triggers must not fire on the carry-back's writes (each
// row's column rewritten twice, audit rows and deletions counted twice). Afterwards blue has its
// triggers as they were, and they fire on its own writes.
func TestCarryBackMySQLTriggersDoNotFire(t *testing.T) {
	testbed.Require(t, tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const blueNS, greenNS = "db-trg", "db-trg-green"
	serveDatabases(t, "blue", blueNS)
	serveDatabases(t, "green", greenNS)
	blueDB, greenDB := tb.MariaDB["blue"], tb.MariaDB["green"]
	t.Cleanup(func() {
		for _, db := range []*testbed.MariaDB{blueDB, greenDB} {
			if _, err := db.SQL(context.Background(), tb.Bins, "DROP DATABASE IF EXISTS cb_trg;"); err != nil {
				t.Error(err)
			}
		}
	})
	schema := `DROP DATABASE IF EXISTS cb_trg; CREATE DATABASE cb_trg; USE cb_trg;
CREATE TABLE orders (id INT PRIMARY KEY, note VARCHAR(255) NOT NULL) ENGINE=InnoDB;
CREATE TABLE audit (id INT AUTO_INCREMENT PRIMARY KEY, order_id INT, what VARCHAR(16)) ENGINE=InnoDB;
CREATE TABLE counters (name VARCHAR(16) PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB;
INSERT INTO counters VALUES ('deleted', 0);
CREATE TRIGGER orders_checked BEFORE INSERT ON orders FOR EACH ROW SET NEW.note = CONCAT(NEW.note, ' (checked)');
CREATE TRIGGER orders_audit AFTER INSERT ON orders FOR EACH ROW INSERT INTO audit (order_id, what) VALUES (NEW.id, 'insert');
DELIMITER //
CREATE TRIGGER orders_deleted AFTER DELETE ON orders FOR EACH ROW BEGIN
  UPDATE counters SET n = n + 1 WHERE name = 'deleted';
  INSERT INTO audit (order_id, what) VALUES (OLD.id, 'delete');
END//
DELIMITER ;
INSERT INTO orders VALUES (1, 'first'), (2, 'second'), (3, 'third');`
	for _, db := range []*testbed.MariaDB{blueDB, greenDB} {
		if _, err := db.SQL(ctx, tb.Bins, schema); err != nil {
			t.Fatal(err)
		}
	}
	// Green's writes, through its triggers.
	if _, err := greenDB.SQL(ctx, tb.Bins, "INSERT INTO cb_trg.orders VALUES (4, 'on green'); DELETE FROM cb_trg.orders WHERE id = 1;"); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(config, []byte(`include: {namespaces: [`+greenNS+`]}
databases:
- name: trg-mysql
  engine: mysql
  namespace: `+greenNS+`
  workload: deployment/mysql
  secret: {name: mysql-secret, userKey: username, passwordKey: password}
  schemas: [cb_trg]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	url := backupMinIO(t, "dbtriggers")
	if code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "green", "-f", config, "--name", "green-trg"); code != 0 {
		t.Fatalf("ferry backup of green exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	query := func(db *testbed.MariaDB, q string) string {
		t.Helper()
		out, err := db.SQL(ctx, tb.Bins, q)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	rowsOf := func(db *testbed.MariaDB) string {
		return query(db, "SELECT * FROM cb_trg.orders ORDER BY id; SELECT * FROM cb_trg.audit ORDER BY id; SELECT * FROM cb_trg.counters;")
	}
	const triggersQuery = `SELECT trigger_name, action_timing, event_manipulation, event_object_table, action_order, action_statement, sql_mode, definer
FROM information_schema.triggers WHERE trigger_schema = 'cb_trg' ORDER BY trigger_name;
SHOW DATABASES LIKE 'ferry_stage%';`
	triggersBefore := query(blueDB, triggersQuery)

	blueCluster, blueKC := clients(t, "blue")
	cfg, err := blueCluster.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	store, _ := readManifest(t, url, "green-trg")
	carryBack := func(when string) {
		t.Helper()
		r, err := snapshot.Open(ctx, store, "green-trg", nil)
		if err != nil {
			t.Fatal(err)
		}
		var report snapshot.Report
		dumps := databases.Dumps{Config: cfg, Client: blueKC, Mapping: snapshot.Mapping{Namespaces: map[string]string{greenNS: blueNS}}, IntoExistingSchema: true}
		if err := dumps.Restore(ctx, r, &report); err != nil {
			t.Fatal(err)
		}
		if problems := report.Problems(); len(problems) > 0 || report.Counts["databases"][snapshot.StatusRestored] != 1 {
			t.Errorf("the carry-back %s lists %+v, counts %v; want the database restored, nothing else", when, problems, report.Counts)
		}
		if b, g := rowsOf(blueDB), rowsOf(greenDB); b != g {
			t.Errorf("blue's rows after the carry-back %s are not green's:\nblue  %s\ngreen %s", when, b, g)
		}
		if got := query(blueDB, triggersQuery); got != triggersBefore {
			t.Errorf("blue's triggers after the carry-back %s:\n%s\nwant them as they were:\n%s", when, got, triggersBefore)
		}
	}
	carryBack("")
	// A carry-back broken off after it took the triggers off (ferry killed) left their
	// definitions kept; run again, it makes them first.
	query(blueDB, "CREATE DATABASE ferry_stage_triggers; CREATE TABLE ferry_stage_triggers.kept AS SELECT * FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = 'cb_trg';"+
		" DROP TRIGGER cb_trg.orders_audit; DROP TRIGGER cb_trg.orders_deleted;")
	carryBack("run again after one broken off")
	// And they still fire on blue's own writes.
	query(blueDB, "INSERT INTO cb_trg.orders VALUES (5, 'on blue again'); DELETE FROM cb_trg.orders WHERE id = 2;")
	if got, want := query(blueDB, "SELECT note FROM cb_trg.orders WHERE id = 5; SELECT COUNT(*) FROM cb_trg.audit WHERE order_id IN (2, 5); SELECT n FROM cb_trg.counters;"),
		"on blue again (checked)\n3\n2\n"; got != want {
		t.Errorf("blue's triggers on its own writes after the carry-back: %q, want %q", got, want)
	}
}
