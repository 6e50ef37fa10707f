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

// upgradeDumps backs up blue's databases of a MySQL schema up_kfp and a PostgreSQL database
// up_appdb (namespace blueNS, served through pods of both clusters), loads them into green's
// servers (namespace greenNS) and returns the verify of green in upgrade mode or not.
func upgradeFixture(t *testing.T, ctx context.Context, blueNS, greenNS string) (verify func(upgrade bool) *snapshot.Report, m *snapshot.Manifest) {
	t.Helper()
	serveDatabases(t, "blue", blueNS)
	serveDatabases(t, "green", greenNS)
	blueDB, greenDB := tb.MariaDB["blue"], tb.MariaDB["green"]
	bluePG, greenPG := tb.Postgres["blue"], tb.Postgres["green"]
	t.Cleanup(func() {
		for _, db := range []*testbed.MariaDB{blueDB, greenDB} {
			if _, err := db.SQL(context.Background(), tb.Bins, "DROP DATABASE IF EXISTS up_kfp;"); err != nil {
				t.Error(err)
			}
		}
		for _, pg := range []*testbed.PostgreSQL{bluePG, greenPG} {
			if _, err := pg.SQL(context.Background(), tb.Bins, "postgres", "DROP DATABASE IF EXISTS up_appdb WITH (FORCE)"); err != nil {
				t.Error(err)
			}
		}
	})
	var runs strings.Builder
	for i := range 300 {
		if i > 0 {
			runs.WriteString(",")
		}
		runs.WriteString("(" + strconv.Itoa(i) + ", 'run-" + strconv.Itoa(i) + " ✓', " + strconv.Itoa(i) + ".5, '2026-01-02 03:04:05')")
	}
	if _, err := blueDB.SQL(ctx, tb.Bins, `SET NAMES utf8mb4; DROP DATABASE IF EXISTS up_kfp; CREATE DATABASE up_kfp CHARACTER SET utf8mb4;
CREATE TABLE up_kfp.runs (id INT PRIMARY KEY, name VARCHAR(64) NOT NULL, score DOUBLE, created DATETIME);
INSERT INTO up_kfp.runs VALUES `+runs.String()+`;
CREATE TABLE up_kfp.events (run INT, kind VARCHAR(16));
INSERT INTO up_kfp.events VALUES (1, 'start'), (1, 'start'), (2, 'end');
CREATE TABLE up_kfp.tags (run INT, tag VARCHAR(32), note TEXT, PRIMARY KEY (run, tag));
INSERT INTO up_kfp.tags VALUES (1, 'a', 'x'), (1, 'b', NULL), (2, 'a', 'y');
CREATE TABLE up_kfp.legacy (id INT PRIMARY KEY, v INT);
INSERT INTO up_kfp.legacy VALUES (1, 1);`); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{"DROP DATABASE IF EXISTS up_appdb", "CREATE DATABASE up_appdb"} {
		if _, err := bluePG.SQL(ctx, tb.Bins, "postgres", stmt); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := bluePG.SQL(ctx, tb.Bins, "up_appdb", `CREATE SCHEMA billing;
CREATE TABLE public.users (id int PRIMARY KEY, email text NOT NULL, age int);
INSERT INTO public.users SELECT g, 'usér' || g || '@example.com', g % 90 FROM generate_series(1, 200) g;
CREATE TABLE billing.invoices (id int, amount numeric);
INSERT INTO billing.invoices VALUES (1, 9.99), (1, 9.99), (2, 19.5);`); err != nil {
		t.Fatal(err)
	}
	if _, err := greenDB.SQL(ctx, tb.Bins, "DROP DATABASE IF EXISTS up_kfp;"); err != nil {
		t.Fatal(err)
	}
	if _, err := greenPG.SQL(ctx, tb.Bins, "postgres", "DROP DATABASE IF EXISTS up_appdb"); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(config, []byte(`include: {namespaces: [`+blueNS+`]}
databases:
- name: kfp-mysql
  engine: mysql
  namespace: `+blueNS+`
  workload: deployment/mysql
  secret: {name: mysql-secret, userKey: username, passwordKey: password}
  schemas: [up_kfp]
- name: app-pg
  engine: postgresql
  namespace: `+blueNS+`
  workload: deployment/pg
  secret: {name: pg-creds, userKey: user, passwordKey: password}
  schemas: [up_appdb]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	url := backupMinIO(t, "dbupgrade-"+blueNS)
	backup := "up-" + blueNS
	if code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "-f", config, "--name", backup); code != 0 {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	store, m := readManifest(t, url, backup)
	for _, d := range m.Databases {
		if d.RowDigests == "" {
			t.Fatalf("database %s has no row digests", d.Name)
		}
		for _, tbl := range d.Tables {
			if len(tbl.Columns) == 0 {
				t.Fatalf("table %s.%s: no columns recorded", tbl.Schema, tbl.Name)
			}
		}
	}
	greenCluster, greenKC := clients(t, "green")
	cfg, err := greenCluster.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	mapping := snapshot.Mapping{Namespaces: map[string]string{blueNS: greenNS}}
	open := func() *snapshot.Reader {
		r, err := snapshot.Open(ctx, store, backup, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	var restored snapshot.Report
	if err := (databases.Dumps{Config: cfg, Client: greenKC, Mapping: mapping}).Restore(ctx, open(), &restored); err != nil {
		t.Fatal(err)
	}
	if p := restored.Problems(); len(p) > 0 {
		t.Fatalf("the restore lists %+v", p)
	}
	return func(upgrade bool) *snapshot.Report {
		t.Helper()
		var report snapshot.Report
		start := time.Now()
		if err := (databases.Dumps{Config: cfg, Client: greenKC, Mapping: mapping, Upgrade: upgrade}).Verify(ctx, open(), &report); err != nil {
			t.Fatal(err)
		}
		t.Logf("verify (upgrade %v) took %s", upgrade, time.Since(start).Round(time.Millisecond))
		return &report
	}, m
}

// problemsOf lists a report's problems as "status name: detail".
func problemsOf(report *snapshot.Report) []string {
	var out []string
	for _, p := range report.Problems() {
		out = append(out, p.Status+" "+p.Name+": "+p.Detail)
	}
	slices.Sort(out)
	return out
}

// TestVerifyDatabasesAfterUpgrade loads blue's dumps into green, then plays the new release's
// migration on green (columns and a table added, types widened, new rows, a table dropped...):
// verify in upgrade mode is clean where only additions happened, and names each table and column
// whose dumped rows or columns are gone or changed.
func TestVerifyDatabasesAfterUpgrade(t *testing.T) {
	testbed.Require(t, tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	verify, m := upgradeFixture(t, ctx, "db-upgrade", "db-upgrade-green")
	greenDB, greenPG := tb.MariaDB["green"], tb.Postgres["green"]
	tables := 0
	for _, d := range m.Databases {
		tables += len(d.Tables)
	}
	if got := problemsOf(verify(true)); len(got) > 0 {
		t.Fatalf("upgrade verify right after the restore lists %q", got)
	}

	// The new release's migration: only additions and widenings.
	if _, err := greenDB.SQL(ctx, tb.Bins, `SET NAMES utf8mb4;
ALTER TABLE up_kfp.runs ADD COLUMN owner VARCHAR(64) NOT NULL DEFAULT 'kubeflow', MODIFY name VARCHAR(255) NOT NULL, MODIFY id BIGINT;
INSERT INTO up_kfp.runs (id, name) VALUES (1000, 'new run'), (-5, 'before');
ALTER TABLE up_kfp.events ADD COLUMN at DATETIME;
INSERT INTO up_kfp.events VALUES (3, 'new', NOW());
CREATE TABLE up_kfp.run_metrics (run BIGINT, metric VARCHAR(64), value DOUBLE, PRIMARY KEY (run, metric));
INSERT INTO up_kfp.run_metrics VALUES (1, 'loss', 0.1);`); err != nil {
		t.Fatal(err)
	}
	if _, err := greenPG.SQL(ctx, tb.Bins, "up_appdb", `ALTER TABLE public.users ADD COLUMN tenant text DEFAULT 'default', ALTER COLUMN age TYPE bigint;
INSERT INTO public.users (id, email) VALUES (500, 'new@example.com');
CREATE TABLE public.sessions (id int PRIMARY KEY);
INSERT INTO billing.invoices VALUES (3, 1);`); err != nil {
		t.Fatal(err)
	}
	if got := problemsOf(verify(false)); len(got) == 0 {
		t.Fatal("verify for equality lists no difference after the migration: the test does not migrate")
	}
	report := verify(true)
	if got := problemsOf(report); len(got) > 0 {
		t.Fatalf("upgrade verify after a migration that only added lists %q", got)
	}
	if n := report.Counts["databases"][snapshot.StatusIdentical]; n != tables {
		t.Fatalf("upgrade verify counts %v, want %d identical tables", report.Counts, tables)
	}

	// What a migration must not do, each named.
	if _, err := greenDB.SQL(ctx, tb.Bins, `SET NAMES utf8mb4;
ALTER TABLE up_kfp.runs DROP COLUMN score;
DELETE FROM up_kfp.runs WHERE id = 7;
UPDATE up_kfp.tags SET note = 'changed' WHERE run = 1 AND tag = 'a';
ALTER TABLE up_kfp.events MODIFY kind VARCHAR(16) CHARACTER SET utf8mb4;
UPDATE up_kfp.events SET kind = 'START' WHERE kind = 'start' LIMIT 1;
DROP TABLE up_kfp.legacy;
ALTER TABLE up_kfp.runs MODIFY created DATETIME(3);`); err != nil {
		t.Fatal(err)
	}
	if _, err := greenPG.SQL(ctx, tb.Bins, "up_appdb", `UPDATE public.users SET email = 'x@example.com' WHERE id = 3;
ALTER TABLE billing.invoices DROP COLUMN amount;`); err != nil {
		t.Fatal(err)
	}
	got := problemsOf(verify(true))
	want := []string{
		"different app-pg/up_appdb.billing.invoices: column amount (numeric): not on the target",
		"different app-pg/up_appdb.billing.invoices: rows not compared: their values (the table has no primary key) column(s) amount are not on the target",
		"different app-pg/up_appdb.public.users: column email: 1 of the backup's rows have another value on the target",
		"different kfp-mysql/up_kfp.events: 1 of the backup's 3 rows are not on the target (rows matched by all their values (the table has no primary key))",
		"different kfp-mysql/up_kfp.runs: 1 of the backup's 300 rows are not on the target (rows matched by primary key (id))",
		"different kfp-mysql/up_kfp.runs: column created (type datetime in the backup, datetime(3) on the target): 299 of the backup's rows have another value as text: not comparable across the type change",
		"different kfp-mysql/up_kfp.runs: column score (double): not on the target",
		"different kfp-mysql/up_kfp.tags: column note: 1 of the backup's rows have another value on the target",
		"missing kfp-mysql/up_kfp.legacy: not on the target (backup: 1 rows)",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("upgrade verify lists\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, g := range got {
		for _, secret := range []string{"changed", "x@example.com", "START", "usér"} {
			if strings.Contains(g, secret) {
				t.Errorf("a value shows in %q", g)
			}
		}
	}
}
