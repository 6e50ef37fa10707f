package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/integration/testbed"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestDatabasePasswordsOfAnyBytes backs up and restores a MySQL and a PostgreSQL database as
// users whose passwords hold what a Secret made from a file holds: a trailing newline (kubectl
// create secret --from-file keeps the file's), and quotes, a backslash, a dollar sign, a
// backtick and non-ASCII letters, which a shell would read. The server took each password as it
// is, as a database image does from its variable; ferry must hand it over unchanged.
func TestDatabasePasswordsOfAnyBytes(t *testing.T) {
	testbed.Require(t, tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const blueNS, greenNS, user = "db-passwords", "db-passwords-green", "pw_admin"
	const password = "Pässwörd with 'single' \"double\" $HOME `id` back\\slash\nand a second line\n"
	// The password as a string literal of each server (backslash escapes: MariaDB's, PostgreSQL's E'').
	literal := strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`).Replace(password)
	serveDatabases(t, "blue", blueNS)
	serveDatabases(t, "green", greenNS)
	sql := func(what string, f func() (string, error)) string {
		t.Helper()
		out, err := f()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return out
	}
	for _, side := range []string{"blue", "green"} {
		db, pg := tb.MariaDB[side], tb.Postgres[side]
		sql(side+"'s MariaDB user", func() (string, error) {
			return db.SQL(ctx, tb.Bins, "CREATE USER '"+user+"'@'%' IDENTIFIED BY '"+literal+"'; GRANT ALL PRIVILEGES ON *.* TO '"+user+"'@'%' WITH GRANT OPTION;")
		})
		sql(side+"'s PostgreSQL role", func() (string, error) {
			return pg.SQL(ctx, tb.Bins, "postgres", "CREATE ROLE "+user+" LOGIN SUPERUSER PASSWORD E'"+literal+"'")
		})
		t.Cleanup(func() {
			ctx := context.Background()
			if _, err := db.SQL(ctx, tb.Bins, "DROP DATABASE IF EXISTS pw_shop; DROP USER IF EXISTS '"+user+"'@'%';"); err != nil {
				t.Error(err)
			}
			if _, err := pg.SQL(ctx, tb.Bins, "postgres", "DROP DATABASE IF EXISTS pw_appdb WITH (FORCE)"); err != nil {
				t.Error(err)
			}
			if _, err := pg.SQL(ctx, tb.Bins, "postgres", "DROP ROLE IF EXISTS "+user); err != nil {
				t.Error(err)
			}
		})
		_, kc := clients(t, side)
		ns := map[string]string{"blue": blueNS, "green": greenNS}[side]
		for name, data := range map[string]map[string][]byte{
			"mysql-secret": {"username": []byte(user), "password": []byte(password)},
			"pg-creds":     {"user": []byte(user), "password": []byte(password)},
		} {
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: data}
			if _, err := kc.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	blueDB, bluePG := tb.MariaDB["blue"], tb.Postgres["blue"]
	sql("blue's schema", func() (string, error) {
		return blueDB.SQL(ctx, tb.Bins, "CREATE DATABASE pw_shop; CREATE TABLE pw_shop.orders (id INT PRIMARY KEY, item TEXT); INSERT INTO pw_shop.orders VALUES (1, 'tea'), (2, 'cake');")
	})
	sql("blue's database", func() (string, error) { return bluePG.SQL(ctx, tb.Bins, "postgres", "CREATE DATABASE pw_appdb") })
	sql("blue's table", func() (string, error) {
		return bluePG.SQL(ctx, tb.Bins, "pw_appdb", "CREATE TABLE notes (id INT PRIMARY KEY, body TEXT); INSERT INTO notes VALUES (1, 'first'), (2, 'second')")
	})

	url := backupMinIO(t, "dbpasswords")
	const backup = "db-passwords"
	code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "-f", integrityConfig(t, blueNS, "pw_shop", "pw_appdb"), "--name", backup)
	if code != 0 {
		t.Fatalf("ferry backup exited %d\nstdout: %.2000s\nstderr: %.3000s", code, out, errOut)
	}
	code, rep, errOut := runReportCommand(t, "--storage", url, "restore", "--to", "green", "--backup", backup, "--namespace-map", blueNS+"="+greenNS)
	if code != 0 {
		t.Fatalf("ferry restore exited %d: %s %s %+v\n%.3000s", code, rep.Result, rep.Error, rep.Items, errOut)
	}
	same := func(what, query string, blue, green func(string) (string, error), word string) {
		t.Helper()
		b, g := sql("blue's "+what, func() (string, error) { return blue(query) }), sql("green's "+what, func() (string, error) { return green(query) })
		if b != g || !strings.Contains(g, word) {
			t.Errorf("%s: green %q, blue %q", query, g, b)
		}
	}
	mysqlOn := func(side string) func(string) (string, error) {
		return func(q string) (string, error) { return tb.MariaDB[side].SQL(ctx, tb.Bins, q) }
	}
	pgOn := func(side string) func(string) (string, error) {
		return func(q string) (string, error) { return tb.Postgres[side].SQL(ctx, tb.Bins, "pw_appdb", q) }
	}
	same("orders", "SELECT * FROM pw_shop.orders ORDER BY id", mysqlOn("blue"), mysqlOn("green"), "cake")
	same("notes", "SELECT * FROM notes ORDER BY id", pgOn("blue"), pgOn("green"), "second")
	if strings.Contains(errOut, "second line") {
		t.Error("ferry's output shows the password")
	}
}
