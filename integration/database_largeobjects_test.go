package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/databases"
)

// TestPostgresLargeObjectsMove: a PostgreSQL application that keeps its files as large objects
// (a table of oid columns, as Hibernate's @Lob and JDBC's Blob do) keeps them. Restored onto
// green, the documents read the same; verify names a large object changed on green since, and a
// sequence set back behind the backup's; and a carry-back after an upgrade gives blue green's
// documents, the large objects its rows point to included, which verify of blue then holds to
// green's.
func TestPostgresLargeObjectsMove(t *testing.T) {
	testbed.Require(t, tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const blueNS, greenNS = "pg-lo", "pg-lo-green"
	serveDatabases(t, "blue", blueNS)
	serveDatabases(t, "green", greenNS)
	bluePG, greenPG := tb.Postgres["blue"], tb.Postgres["green"]
	t.Cleanup(func() {
		for _, pg := range []*testbed.PostgreSQL{bluePG, greenPG} {
			if _, err := pg.SQL(context.Background(), tb.Bins, "postgres", "DROP DATABASE IF EXISTS lo_appdb WITH (FORCE)"); err != nil {
				t.Error(err)
			}
		}
	})
	sql := func(pg *testbed.PostgreSQL, db, q string) string {
		t.Helper()
		out, err := pg.SQL(ctx, tb.Bins, db, q)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	sql(greenPG, "postgres", "DROP DATABASE IF EXISTS lo_appdb")
	sql(bluePG, "postgres", "DROP DATABASE IF EXISTS lo_appdb")
	sql(bluePG, "postgres", "CREATE DATABASE lo_appdb")
	// A small file, one of 96 KiB (pg_dump writes it in several pieces) and one empty.
	sql(bluePG, "lo_appdb", `CREATE TABLE public.documents (id int PRIMARY KEY, name text NOT NULL, body oid);
INSERT INTO public.documents VALUES
 (1, 'readme.txt', lo_from_bytea(0, convert_to('hello, large objects', 'UTF8'))),
 (2, 'model.bin', lo_from_bytea(0, decode(repeat(md5('weights'), 6144), 'hex'))),
 (3, 'empty', lo_from_bytea(0, ''));
CREATE SEQUENCE public.doc_numbers;
SELECT nextval('public.doc_numbers') FROM generate_series(1, 5);`)
	// What a user checks: each document's name and the digest of the file it points to.
	documents := func(pg *testbed.PostgreSQL) string {
		t.Helper()
		return sql(pg, "lo_appdb", "SELECT id, name, md5(lo_get(body)) FROM public.documents ORDER BY id") +
			sql(pg, "lo_appdb", "SELECT count(*) FROM pg_largeobject_metadata")
	}

	config := filepath.Join(t.TempDir(), "ferry.yaml")
	writeConfig := func(ns string) {
		t.Helper()
		if err := os.WriteFile(config, []byte(`include: {namespaces: [`+ns+`]}
databases:
- name: app-pg
  engine: postgresql
  namespace: `+ns+`
  workload: deployment/pg
  secret: {name: pg-creds, userKey: user, passwordKey: password}
  schemas: [lo_appdb]
`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	url := backupMinIO(t, "pglargeobjects")
	backup := func(cluster, ns, name string) {
		t.Helper()
		writeConfig(ns)
		if code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", cluster, "-f", config, "--name", name); code != 0 {
			t.Fatalf("ferry backup of %s exited %d\nstdout: %s\nstderr: %s", cluster, code, out, errOut)
		}
	}
	backup("blue", blueNS, "lo-blue")
	store, _ := readManifest(t, url, "lo-blue")
	open := func(name string) *snapshot.Reader {
		t.Helper()
		r, err := snapshot.Open(ctx, store, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	dumpsOn := func(cluster string, mapping map[string]string) databases.Dumps {
		t.Helper()
		c, kc := clients(t, cluster)
		cfg, err := c.RESTConfig()
		if err != nil {
			t.Fatal(err)
		}
		return databases.Dumps{Config: cfg, Client: kc, Mapping: snapshot.Mapping{Namespaces: mapping}}
	}
	green := dumpsOn("green", map[string]string{blueNS: greenNS})
	run := func(what string, fn func(*snapshot.Report) error) *snapshot.Report {
		t.Helper()
		var report snapshot.Report
		if err := fn(&report); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return &report
	}
	clean := func(what string, report *snapshot.Report) {
		t.Helper()
		if items := report.Problems(); len(items) > 0 {
			t.Fatalf("%s lists problems: %+v", what, items)
		}
	}

	clean("the restore", run("restore", func(rep *snapshot.Report) error { return green.Restore(ctx, open("lo-blue"), rep) }))
	if b, g := documents(bluePG), documents(greenPG); b != g {
		t.Fatalf("green's documents are not blue's:\nblue  %s\ngreen %s", b, g)
	}
	verifyGreen := func() *snapshot.Report {
		return run("verify", func(rep *snapshot.Report) error { return green.Verify(ctx, open("lo-blue"), rep) })
	}
	clean("verify", verifyGreen())

	// A file changed on green: its row is as it was, its large object is not.
	sql(greenPG, "lo_appdb", "SELECT lo_put(body, 0, '\\x00') FROM public.documents WHERE id = 2")
	onlyOne(t, verifyGreen(), snapshot.StatusDifferent, "app-pg/lo_appdb.pg_catalog.pg_largeobject", "checksum")
	// One gone.
	sql(greenPG, "lo_appdb", "SELECT lo_unlink(body) FROM public.documents WHERE id = 2")
	onlyOne(t, verifyGreen(), snapshot.StatusDifferent, "app-pg/lo_appdb.pg_catalog.pg_largeobject", "large objects: backup 3, target 2")
	// A sequence set back: the next document would take a number blue had given out.
	clean("a restore", run("restore", func(rep *snapshot.Report) error { return green.Restore(ctx, open("lo-blue"), rep) }))
	sql(greenPG, "lo_appdb", "SELECT setval('public.doc_numbers', 2)")
	onlyOne(t, verifyGreen(), snapshot.StatusDifferent, "app-pg/lo_appdb.public.doc_numbers", "sequence behind the backup's: next value backup 6, target 3")
	sql(greenPG, "lo_appdb", "SELECT setval('public.doc_numbers', 9)")
	clean("verify of a sequence ahead", verifyGreen())

	// Green's writes: a new document, a changed one, one deleted with its file. Carried back
	// into blue's existing database, blue holds green's documents.
	clean("a second restore", run("restore", func(rep *snapshot.Report) error { return green.Restore(ctx, open("lo-blue"), rep) }))
	sql(greenPG, "lo_appdb", `INSERT INTO public.documents VALUES (4, 'report.pdf', lo_from_bytea(0, decode(repeat(md5('report'), 3000), 'hex')));
SELECT lo_put(body, 5, convert_to(' and changed on green', 'UTF8')) FROM public.documents WHERE id = 1;
SELECT lo_unlink(body) FROM public.documents WHERE id = 3;
DELETE FROM public.documents WHERE id = 3;`)
	backup("green", greenNS, "lo-green")
	blue := dumpsOn("blue", map[string]string{greenNS: blueNS})
	blue.IntoExistingSchema = true
	clean("the carry-back", run("carry-back", func(rep *snapshot.Report) error { return blue.Restore(ctx, open("lo-green"), rep) }))
	if b, g := documents(bluePG), documents(greenPG); b != g {
		t.Fatalf("after the carry-back, blue's documents are not green's:\nblue  %s\ngreen %s", b, g)
	}
	blue.Upgrade = true
	clean("verify of blue", run("verify", func(rep *snapshot.Report) error { return blue.Verify(ctx, open("lo-green"), rep) }))
	for _, db := range []struct {
		name string
		pg   *testbed.PostgreSQL
	}{{"blue", bluePG}, {"green", greenPG}} {
		if n := sql(db.pg, "lo_appdb", "SELECT count(*) FROM pg_largeobject_metadata"); strings.TrimSpace(n) != "3" {
			t.Errorf("%s holds %s large objects, want green's 3", db.name, strings.TrimSpace(n))
		}
	}
}
