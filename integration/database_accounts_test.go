package integration

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/snapshot"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestDatabaseAccountsTheTargetLacks restores databases whose objects name accounts of their
// server, as most applications' do, onto servers that lack them or onto a server ferry reaches
// only as the application: a PostgreSQL database owned by its application's role (not a
// superuser) with a grant to a read-only role, and a MariaDB schema whose trigger and view run as
// an account of their own (DEFINER). green's servers start with neither account, and with
// databases of the same names that green's own release made. ferry plan --to green must name
// the accounts (a migration's preflight does the same) and the restore must refuse each
// database before anything of it runs, naming the accounts, and leave green's databases as they
// were; once the accounts are made, restore exactly, the trigger working on green; and with only
// the application role's credentials, which may not recreate the database, refuse again and keep
// green's database; and as a MySQL user that may not create objects for other accounts, refuse
// before any table is replaced.
func TestDatabaseAccountsTheTargetLacks(t *testing.T) {
	testbed.Require(t, tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const blueNS, greenNS = "db-accounts", "db-accounts-green"
	serveDatabases(t, "blue", blueNS)
	serveDatabases(t, "green", greenNS)
	blueDB, greenDB := tb.MariaDB["blue"], tb.MariaDB["green"]
	bluePG, greenPG := tb.Postgres["blue"], tb.Postgres["green"]
	sql := func(what string, run func() (string, error)) string {
		t.Helper()
		out, err := run()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return out
	}
	pgSQL := func(pg *testbed.PostgreSQL, db string, stmts ...string) {
		t.Helper()
		for _, s := range stmts {
			sql(s, func() (string, error) { return pg.SQL(ctx, tb.Bins, db, s) })
		}
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for _, db := range []*testbed.MariaDB{blueDB, greenDB} {
			if _, err := db.SQL(ctx, tb.Bins, "DROP DATABASE IF EXISTS ac_shop; DROP USER IF EXISTS 'ac_definer'@'%', 'ac_app'@'%';"); err != nil {
				t.Error(err)
			}
		}
		for _, pg := range []*testbed.PostgreSQL{bluePG, greenPG} {
			for _, s := range []string{"DROP DATABASE IF EXISTS ac_appdb WITH (FORCE)", "DROP ROLE IF EXISTS ac_reader", "DROP ROLE IF EXISTS ac_owner"} {
				if _, err := pg.SQL(ctx, tb.Bins, "postgres", s); err != nil {
					t.Error(err)
				}
			}
		}
	})

	// blue: the application's role owns its database; a reporting role may read a table. MariaDB:
	// the trigger and the view run as an account of their own, which logs in nowhere.
	pgSQL(bluePG, "postgres", "CREATE ROLE ac_owner LOGIN PASSWORD 'owner-pw'", "CREATE ROLE ac_reader",
		"CREATE DATABASE ac_appdb OWNER ac_owner")
	pgSQL(bluePG, "ac_appdb", `CREATE TABLE public.items (id int PRIMARY KEY, name text);
INSERT INTO public.items SELECT g, 'item ' || g FROM generate_series(1, 100) g;
ALTER TABLE public.items OWNER TO ac_owner;
GRANT SELECT ON public.items TO ac_reader;`)
	sql("blue's MariaDB", func() (string, error) {
		return blueDB.SQL(ctx, tb.Bins, `CREATE USER 'ac_definer'@'%' ACCOUNT LOCK;
CREATE DATABASE ac_shop;
GRANT SELECT, INSERT, TRIGGER ON ac_shop.* TO 'ac_definer'@'%';
CREATE TABLE ac_shop.orders (id INT PRIMARY KEY, total INT);
CREATE TABLE ac_shop.audit (id INT AUTO_INCREMENT PRIMARY KEY, orders_id INT);
INSERT INTO ac_shop.orders VALUES (1, 10), (2, 2000);
CREATE DEFINER='ac_definer'@'%' TRIGGER ac_shop.orders_audit AFTER INSERT ON ac_shop.orders FOR EACH ROW INSERT INTO ac_shop.audit (orders_id) VALUES (NEW.id);
CREATE DEFINER='ac_definer'@'%' SQL SECURITY DEFINER VIEW ac_shop.big_orders AS SELECT id, total FROM ac_shop.orders WHERE total > 1000;
INSERT INTO ac_shop.orders VALUES (3, 3000);`)
	})
	// green: databases of the same names, as green's own release made them, and no such accounts.
	pgSQL(greenPG, "postgres", "DROP DATABASE IF EXISTS ac_appdb WITH (FORCE)", "DROP ROLE IF EXISTS ac_reader", "DROP ROLE IF EXISTS ac_owner",
		"CREATE DATABASE ac_appdb")
	pgSQL(greenPG, "ac_appdb", "CREATE TABLE public.green_release (id int); INSERT INTO public.green_release VALUES (1), (2)")
	sql("green's MariaDB", func() (string, error) {
		return greenDB.SQL(ctx, tb.Bins, `DROP DATABASE IF EXISTS ac_shop; DROP USER IF EXISTS 'ac_definer'@'%', 'ac_app'@'%';
CREATE DATABASE ac_shop; CREATE TABLE ac_shop.green_release (id INT); INSERT INTO ac_shop.green_release VALUES (1);`)
	})
	const pgState = "SELECT string_agg(c.relname || ':' || pg_get_userbyid(c.relowner), ',' ORDER BY c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r'"
	greenPGState := func() string {
		t.Helper()
		out, err := greenPG.SQL(ctx, tb.Bins, "ac_appdb", pgState)
		if err != nil {
			return "no database ac_appdb: " + err.Error()
		}
		return strings.TrimSpace(out)
	}
	pgBefore, mysqlBefore := greenPGState(), mysqlState(t, greenDB, "ac_shop")

	untouched := func(t *testing.T, when string) {
		t.Helper()
		if got := greenPGState(); got != pgBefore {
			t.Errorf("%s: green's ac_appdb changed: before %q, after %q", when, pgBefore, got)
		}
		if got := mysqlState(t, greenDB, "ac_shop"); got != mysqlBefore {
			t.Errorf("%s: green's ac_shop changed:\nbefore: %s\nafter:  %s", when, mysqlBefore, got)
		}
	}

	// Before anything is stopped or dumped: ferry plan --to green finds the same from a dump of
	// blue's schemas, as a migration's preflight does.
	planConfig := integrityConfig(t, blueNS, "ac_shop", "ac_appdb")
	f, err := os.OpenFile(planConfig, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("namespaceMap: {" + blueNS + ": " + greenNS + "}\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// plan runs ferry plan --to green and checks its findings, a line each: severity, subject and
	// message (patterns).
	plan := func(t *testing.T, wantCode int, findings ...string) {
		t.Helper()
		code, out, errOut := runFerry(t, "plan", "--from", "blue", "--to", "green", "-f", planConfig)
		if code != wantCode {
			t.Errorf("ferry plan exited %d, want %d\nstderr: %.2000s", code, wantCode, errOut)
		}
		for _, want := range findings {
			if !regexpLine(out, want) {
				t.Errorf("the plan has no finding like %q:\n%s", want, out)
			}
		}
	}
	t.Run("plan --to names the accounts green lacks", func(t *testing.T) {
		// Warnings: objects the restore makes before the databases (an operator's users) may
		// make the accounts; the restore refuses the dumps if they do not.
		plan(t, 0, `warning\s+database ig-pg\s.*ac_owner \(owns objects\), ac_reader \(granted privileges\)`,
			`warning\s+database ig-mysql\s.*'ac_definer'@'%'`)
		untouched(t, "after the plan")
	})

	url := backupMinIO(t, "dbaccounts")
	const backup = "db-accounts"
	if code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "-f", integrityConfig(t, blueNS, "ac_shop", "ac_appdb"), "--name", backup); code != 0 {
		t.Fatalf("ferry backup exited %d\nstdout: %.2000s\nstderr: %.2000s", code, out, errOut)
	}
	restore := func() (int, restoreReport) {
		t.Helper()
		start := time.Now()
		code, rep, errOut := runReportCommand(t, "--storage", url, "restore", "--to", "green", "--backup", backup,
			"--namespace-map", blueNS+"="+greenNS, "--include-resources", "limitranges")
		t.Logf("restore took %s: exit %d, %s %s", time.Since(start).Round(time.Millisecond), code, rep.Result, strings.TrimSpace(errOut[max(0, len(errOut)-300):]))
		return code, rep
	}
	failed := func(rep restoreReport, name string) string {
		for _, it := range rep.Items {
			if it.Kind == "databases" && it.Name == name && it.Status == snapshot.StatusFailed {
				return it.Detail
			}
		}
		return ""
	}
	wants := func(t *testing.T, what, detail string, words ...string) {
		t.Helper()
		for _, w := range words {
			if !strings.Contains(detail, w) {
				t.Errorf("%s: %q does not say %q", what, detail, w)
			}
		}
	}

	t.Run("accounts the target lacks are named before anything runs", func(t *testing.T) {
		code, rep := restore()
		pg, my := failed(rep, "ig-pg"), failed(rep, "ig-mysql")
		t.Logf("ig-pg: %s", pg)
		t.Logf("ig-mysql: %s", my)
		if code == 0 {
			t.Errorf("the restore exited 0")
		}
		wants(t, "ig-pg", pg, "ac_owner", "ac_reader", "nothing was loaded")
		wants(t, "ig-mysql", my, "ac_definer", "nothing was loaded")
		untouched(t, "after the refused restore")
	})

	t.Run("with the accounts made the restore is exact and the trigger runs", func(t *testing.T) {
		pgSQL(greenPG, "postgres", "CREATE ROLE ac_owner LOGIN PASSWORD 'owner-pw'", "CREATE ROLE ac_reader")
		sql("green's account", func() (string, error) {
			return greenDB.SQL(ctx, tb.Bins, "CREATE USER 'ac_definer'@'%' ACCOUNT LOCK; GRANT SELECT, INSERT, TRIGGER ON ac_shop.* TO 'ac_definer'@'%';")
		})
		code, rep := restore()
		if code != 0 || rep.Counts["databases"][snapshot.StatusRestored] != 2 {
			t.Fatalf("ferry restore exited %d: %s %+v %v", code, rep.Error, rep.Items, rep.Counts)
		}
		for _, q := range []string{"SELECT * FROM ac_shop.orders ORDER BY id", "SELECT * FROM ac_shop.audit ORDER BY id", "SELECT * FROM ac_shop.big_orders ORDER BY id",
			"SELECT definer FROM information_schema.triggers WHERE trigger_schema = 'ac_shop'"} {
			b, errB := blueDB.SQL(ctx, tb.Bins, q)
			g, errG := greenDB.SQL(ctx, tb.Bins, q)
			if errB != nil || errG != nil || b != g || b == "" {
				t.Errorf("%s: blue and green differ (%v, %v):\nblue:  %q\ngreen: %q", q, errB, errG, b, g)
			}
		}
		for _, q := range []string{pgState, "SELECT count(*), sum(id) FROM public.items", "SELECT has_table_privilege('ac_reader', 'public.items', 'SELECT')",
			"SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'ac_appdb'"} {
			b, errB := bluePG.SQL(ctx, tb.Bins, "ac_appdb", q)
			g, errG := greenPG.SQL(ctx, tb.Bins, "ac_appdb", q)
			if errB != nil || errG != nil || b != g || b == "" {
				t.Errorf("%s: blue and green differ (%v, %v):\nblue:  %q\ngreen: %q", q, errB, errG, b, g)
			}
		}
		// The application's next order on green: its trigger runs as its definer.
		if _, err := greenDB.SQL(ctx, tb.Bins, "INSERT INTO ac_shop.orders VALUES (4, 40)"); err != nil {
			t.Errorf("an order on green: %v", err)
		}
		if n, err := greenDB.SQL(ctx, tb.Bins, "SELECT COUNT(*) FROM ac_shop.audit WHERE orders_id = 4"); err != nil || strings.TrimSpace(n) != "1" {
			t.Errorf("the trigger on green audited %q orders 4 (%v)", n, err)
		}
	})

	// asUser makes green's Secret name hold other credentials until t ends.
	asUser := func(t *testing.T, name string, data map[string][]byte) {
		t.Helper()
		_, kc := clients(t, "green")
		secrets := kc.CoreV1().Secrets(greenNS)
		secret, err := secrets.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		saved := secret.Data
		secret.Data = data
		if secret, err = secrets.Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			secret.Data = saved
			if _, err := secrets.Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
				t.Error(err)
			}
		})
	}

	t.Run("a MySQL user that may not create objects for other accounts", func(t *testing.T) {
		sql("green's application account", func() (string, error) {
			return greenDB.SQL(ctx, tb.Bins, "CREATE USER 'ac_app'@'%' IDENTIFIED BY 'app-pw'; GRANT ALL PRIVILEGES ON ac_shop.* TO 'ac_app'@'%';")
		})
		asUser(t, "mysql-secret", map[string][]byte{"username": []byte("ac_app"), "password": []byte("app-pw")})
		before := mysqlState(t, greenDB, "ac_shop")
		code, rep := restore()
		my := failed(rep, "ig-mysql")
		t.Logf("ig-mysql: %s", my)
		if code == 0 {
			t.Errorf("the restore exited 0")
		}
		wants(t, "ig-mysql", my, "'ac_definer'@'%'", "ac_app", "SUPER", "nothing was loaded")
		if got := mysqlState(t, greenDB, "ac_shop"); got != before {
			t.Errorf("green's ac_shop changed:\nbefore: %s\nafter:  %s", before, got)
		}
	})

	t.Run("the application role may not recreate its database", func(t *testing.T) {
		asUser(t, "pg-creds", map[string][]byte{"user": []byte("ac_owner"), "password": []byte("owner-pw")})
		before := greenPGState()
		plan(t, 3, `blocking\s+database ig-pg\s.*role ac_owner may not create databases`)
		code, rep := restore()
		pg := failed(rep, "ig-pg")
		t.Logf("ig-pg: %s", pg)
		if code == 0 {
			t.Errorf("the restore exited 0")
		}
		wants(t, "ig-pg", pg, "ac_owner", "CREATEDB", "nothing was loaded")
		if got := greenPGState(); got != before {
			t.Errorf("green's ac_appdb changed: before %q, after %q", before, got)
		}
		if n, err := greenPG.SQL(ctx, tb.Bins, "ac_appdb", "SELECT count(*) FROM public.items"); err != nil || strings.TrimSpace(n) != "100" {
			t.Errorf("green's ac_appdb holds %q items (%v), want its 100", n, err)
		}
	})
}
