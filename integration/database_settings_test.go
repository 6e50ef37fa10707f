package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/snapshot"
)

// TestChecksumsDoNotDependOnServerSettings: green's servers write values as text otherwise than
// blue's (another time zone, date and interval styles, rounded floats, bytea's escape form, as a
// managed server or another image is set up), which changes nothing they hold. A restore, its
// verify and an upgrade's verify of rows must find the tables as blue's. Before, PostgreSQL's
// checksums and MariaDB's row digests read the values as the server writes them: the restore
// failed, `checksum: backup ..., target ...`, for tables restored exactly.
func TestChecksumsDoNotDependOnServerSettings(t *testing.T) {
	testbed.Require(t, tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const blueNS, greenNS, schema, pgDB = "db-settings", "db-settings-green", "sh_settings", "zz_settings"
	blueDB, greenDB := mariaDBsServed(t, blueNS, greenNS, schema)
	bluePG, greenPG := tb.Postgres["blue"], tb.Postgres["green"]
	must := mustOutput(t)
	for _, pg := range []*testbed.PostgreSQL{bluePG, greenPG} {
		must(pg.SQL(ctx, tb.Bins, "postgres", "DROP DATABASE IF EXISTS "+pgDB))
	}
	t.Cleanup(func() {
		for _, pg := range []*testbed.PostgreSQL{bluePG, greenPG} {
			pg.SQL(context.Background(), tb.Bins, "postgres", "DROP DATABASE IF EXISTS "+pgDB)
		}
	})
	must(bluePG.SQL(ctx, tb.Bins, "postgres", "CREATE DATABASE "+pgDB))
	must(bluePG.SQL(ctx, tb.Bins, pgDB, `CREATE TABLE events (id int PRIMARY KEY, at timestamptz, day date, span interval, ratio float8, blob bytea);
INSERT INTO events VALUES (1, '2026-03-29 01:30:00+00', '2026-12-07', '1 day 02:03:04', 0.1 + 0.2, '\x00ff10'),
 (2, '2026-10-25 23:59:59.123456+00', '1999-01-31', '-3 months', 1e-300, NULL);`))
	must(blueDB.SQL(ctx, tb.Bins, `DROP DATABASE IF EXISTS `+schema+`; CREATE DATABASE `+schema+`;
CREATE TABLE `+schema+`.events (id INT PRIMARY KEY, at TIMESTAMP(6) NULL, ratio DOUBLE) ENGINE=InnoDB;
SET time_zone = '+00:00';
INSERT INTO `+schema+`.events VALUES (1, '2026-03-29 01:30:00', 0.1 + 0.2), (2, '2026-10-25 23:59:59.123456', 1e-300);`))

	url := "file://" + t.TempDir()
	store, _ := shapesBackup(t, url, "blue", shapesConfig(t, blueNS, []string{schema}, []string{pgDB}), "settings")

	// Green's servers, set up otherwise.
	for _, set := range []string{"TimeZone = 'Asia/Kolkata'", "DateStyle = 'German, DMY'", "IntervalStyle = 'iso_8601'", "extra_float_digits = 0", "bytea_output = 'escape'"} {
		must(greenPG.SQL(ctx, tb.Bins, "postgres", "ALTER SYSTEM SET "+set))
	}
	must(greenPG.SQL(ctx, tb.Bins, "postgres", "SELECT pg_reload_conf()"))
	zone := strings.TrimSpace(must(greenDB.SQL(ctx, tb.Bins, "SELECT @@global.time_zone")))
	must(greenDB.SQL(ctx, tb.Bins, "SET GLOBAL time_zone = '+05:30'"))
	t.Cleanup(func() {
		greenPG.SQL(context.Background(), tb.Bins, "postgres", "ALTER SYSTEM RESET ALL")
		greenPG.SQL(context.Background(), tb.Bins, "postgres", "SELECT pg_reload_conf()")
		greenDB.SQL(context.Background(), tb.Bins, "SET GLOBAL time_zone = '"+zone+"'")
	})
	waitUntil(t, "green's PostgreSQL writing times in its own zone", 30*time.Second, func(ctx context.Context) (bool, error) {
		out, err := greenPG.SQL(ctx, tb.Bins, "postgres", "SHOW TimeZone")
		return strings.TrimSpace(out) == "Asia/Kolkata", err
	})

	dumps := shapesDumps(t, "green", blueNS, greenNS, false)
	report := shapesRun(t, ctx, dumps, store, "settings", false)
	if items := report.Problems(); len(items) > 0 || report.Counts["databases"][snapshot.StatusRestored] != 2 {
		t.Fatalf("the restore lists %+v, counts %v", items, report.Counts)
	}
	// The independent check: the same instants, numbers and bytes, read in one way on both.
	const pgRows = "SET TimeZone = 'UTC'; SELECT id, extract(epoch FROM at), day - date '2000-01-01', extract(epoch FROM span), ratio::text, encode(blob, 'hex') FROM events ORDER BY id"
	if b, g := must(bluePG.SQL(ctx, tb.Bins, pgDB, pgRows)), must(greenPG.SQL(ctx, tb.Bins, pgDB, pgRows)); b != g {
		t.Fatalf("green's PostgreSQL rows are not blue's:\nblue:  %s\ngreen: %s", b, g)
	}
	const myRows = "SELECT id, UNIX_TIMESTAMP(at), ratio FROM " + schema + ".events ORDER BY id"
	if b, g := must(blueDB.SQL(ctx, tb.Bins, myRows)), must(greenDB.SQL(ctx, tb.Bins, myRows)); b != g {
		t.Fatalf("green's MariaDB rows are not blue's:\nblue:  %s\ngreen: %s", b, g)
	}

	verified := shapesRun(t, ctx, dumps, store, "settings", true)
	if items := verified.Problems(); len(items) > 0 || verified.Counts["databases"][snapshot.StatusIdentical] != 2 {
		t.Errorf("verify lists %+v, counts %v", items, verified.Counts)
	}
	// An upgrade's verify compares the rows' digests, value by value.
	dumps.Upgrade = true
	upgraded := shapesRun(t, ctx, dumps, store, "settings", true)
	if items := upgraded.Problems(); len(items) > 0 || upgraded.Counts["databases"][snapshot.StatusIdentical] != 2 {
		t.Errorf("an upgrade's verify lists %+v, counts %v", items, upgraded.Counts)
	}
}

// mustOutput is a function that returns a command's output, or ends t with its error.
func mustOutput(t *testing.T) func(out string, err error) string {
	return func(out string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
}

// TestChecksumsOfEarlierBackupsReadAsTheyWere: a backup made before ferry read checksums in fixed
// settings holds them as its server wrote values as text, in its own settings. Blue's and green's
// PostgreSQL here share settings other than the defaults (a time zone, a date style), as servers
// one operator set up do, and the backup's checksums are made as that ferry made them. Its
// restore and verify must read green as the backup was read, and find the tables restored
// exactly; read in the fixed settings, every table with times or dates would differ.
func TestChecksumsOfEarlierBackupsReadAsTheyWere(t *testing.T) {
	testbed.Require(t, tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const blueNS, greenNS, pgDB, backup = "db-earlier", "db-earlier-green", "zz_earlier", "earlier"
	serveDatabases(t, "blue", blueNS)
	serveDatabases(t, "green", greenNS)
	bluePG, greenPG := tb.Postgres["blue"], tb.Postgres["green"]
	must := mustOutput(t)
	both := []*testbed.PostgreSQL{bluePG, greenPG}
	for _, pg := range both {
		must(pg.SQL(ctx, tb.Bins, "postgres", "DROP DATABASE IF EXISTS "+pgDB))
		for _, set := range []string{"TimeZone = 'America/Sao_Paulo'", "DateStyle = 'SQL, DMY'"} {
			must(pg.SQL(ctx, tb.Bins, "postgres", "ALTER SYSTEM SET "+set))
		}
		must(pg.SQL(ctx, tb.Bins, "postgres", "SELECT pg_reload_conf()"))
	}
	t.Cleanup(func() {
		for _, pg := range both {
			pg.SQL(context.Background(), tb.Bins, "postgres", "DROP DATABASE IF EXISTS "+pgDB)
			pg.SQL(context.Background(), tb.Bins, "postgres", "ALTER SYSTEM RESET ALL")
			pg.SQL(context.Background(), tb.Bins, "postgres", "SELECT pg_reload_conf()")
		}
	})
	for _, pg := range both {
		waitUntil(t, "PostgreSQL writing times in its own zone", 30*time.Second, func(ctx context.Context) (bool, error) {
			out, err := pg.SQL(ctx, tb.Bins, "postgres", "SHOW TimeZone")
			return strings.TrimSpace(out) == "America/Sao_Paulo", err
		})
	}
	must(bluePG.SQL(ctx, tb.Bins, "postgres", "CREATE DATABASE "+pgDB))
	must(bluePG.SQL(ctx, tb.Bins, pgDB, `CREATE TABLE events (id int PRIMARY KEY, at timestamptz, day date);
INSERT INTO events VALUES (1, '2026-03-29 01:30:00+00', '2026-12-07'), (2, '2026-10-25 23:59:59.123456+00', '1999-01-31');
CREATE TABLE plain (id int PRIMARY KEY, name text);
INSERT INTO plain VALUES (1, 'a'), (2, 'b');`))

	dir := t.TempDir()
	store, m := shapesBackup(t, "file://"+dir, "blue", shapesConfig(t, blueNS, []string{}, []string{pgDB}), backup)
	// The backup as the ferry before fixed settings made it: checksums of the rows' text in the
	// server's own settings (pgTableStats' query, without its SET statements), and no marker.
	d := &m.Databases[slices.IndexFunc(m.Databases, func(d snapshot.Database) bool { return d.Engine == "postgresql" })]
	if d.ValuesAsText != snapshot.ValuesAsTextFixed {
		t.Fatalf("database %s was read with values as text %q, want %q", d.Name, d.ValuesAsText, snapshot.ValuesAsTextFixed)
	}
	d.ValuesAsText = ""
	changed := 0
	for i, table := range d.Tables {
		row := `("ferry row".*)::text`
		sum := strings.TrimSpace(must(bluePG.SQL(ctx, tb.Bins, pgDB, `SELECT md5(coalesce(string_agg(md5(`+row+`), '' ORDER BY md5(`+row+`)), '')) FROM public.`+table.Name+` "ferry row"`)))
		if sum != table.Checksum {
			changed++
		}
		d.Tables[i].Checksum, d.Tables[i].BeforeDump = sum, nil
	}
	if changed != 1 {
		t.Fatalf("%d of the tables' checksums read in the server's settings differ from the fixed ones, want 1 (events): the test shows nothing", changed)
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(snapshot.Prefix(backup)+snapshot.ManifestFile)), data, 0o644); err != nil {
		t.Fatal(err)
	}

	dumps := shapesDumps(t, "green", blueNS, greenNS, false)
	if report := shapesRun(t, ctx, dumps, store, backup, false); len(report.Problems()) > 0 || report.Counts["databases"][snapshot.StatusRestored] != 1 {
		t.Fatalf("the restore of the earlier backup lists %+v, counts %v", report.Problems(), report.Counts)
	}
	const rows = "SET TimeZone = 'UTC'; SELECT id, extract(epoch FROM at), day - date '2000-01-01' FROM events ORDER BY id"
	if b, g := must(bluePG.SQL(ctx, tb.Bins, pgDB, rows)), must(greenPG.SQL(ctx, tb.Bins, pgDB, rows)); b != g {
		t.Fatalf("green's rows are not blue's:\nblue:  %s\ngreen: %s", b, g)
	}
	if verified := shapesRun(t, ctx, dumps, store, backup, true); len(verified.Problems()) > 0 || verified.Counts["databases"][snapshot.StatusIdentical] != 2 {
		t.Errorf("verify of the earlier backup lists %+v, counts %v", verified.Problems(), verified.Counts)
	}
}
