package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/databases"
	"github.com/ferrykube/ferry/storage"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// serveWorkload creates in namespace (made if missing) a Secret and a one-replica Deployment whose
// pods carry app=name, as a platform's manifests or a restore of its objects would, and returns
// the name of its running pod.
func serveWorkload(t *testing.T, kc kubernetes.Interface, namespace, name, secret string, secretData map[string]string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret, Namespace: namespace}, StringData: secretData}
	if _, err := kc.CoreV1().Secrets(namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return serveDeployment(t, kc, namespace, name)
}

// serveDeployment creates in namespace a one-replica Deployment whose pods carry app=name and
// returns the name of its running pod.
func serveDeployment(t *testing.T, kc kubernetes.Interface, namespace, name string) string {
	t.Helper()
	createDeployment(t, kc, namespace, name, corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: name}}})
	return runningPod(t, kc, namespace, "app="+name)
}

// createDeployment creates in namespace a one-replica Deployment whose pods carry app=name and run spec.
func createDeployment(t *testing.T, kc kubernetes.Interface, namespace, name string, spec corev1.PodSpec) {
	t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
	if _, err := kc.AppsV1().Deployments(namespace).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// serveDatabases runs a MySQL and a PostgreSQL workload in namespace on cluster, their exec mapped
// to the cluster's own MariaDB and PostgreSQL servers of the testbed, with credentials in Secrets.
func serveDatabases(t *testing.T, cluster string, namespace string) {
	t.Helper()
	c, kc := clients(t, cluster)
	ctx := context.Background()
	db, pg := tb.MariaDB[cluster], tb.Postgres[cluster]
	pod := serveWorkload(t, kc, namespace, "mysql", "mysql-secret", map[string]string{"username": db.User, "password": db.Password})
	if err := c.MapExec(ctx, namespace, pod, db.ClientHome, db.Env()); err != nil {
		t.Fatal(err)
	}
	pod = serveWorkload(t, kc, namespace, "pg", "pg-creds", map[string]string{"user": pg.User, "password": pg.Password})
	env := pg.Env()
	delete(env, "PGPASSWORD") // ferry hands the Secret's password over itself
	if err := c.MapExec(ctx, namespace, pod, dataDir(t, "pg-"+cluster), env); err != nil {
		t.Fatal(err)
	}
}

// The queries that read every restored table, each the same on blue and green when the restore is
// right; binary columns in hex.
var (
	mysqlReads = []string{
		"SELECT * FROM rs_pipeline.run_details ORDER BY id",
		"SELECT * FROM rs_pipeline.events ORDER BY 1, 2",
		"SELECT COUNT(*) FROM rs_pipeline.empty_table",
		"SELECT * FROM rs_pipeline.recent ORDER BY id",
		"SELECT id, trial, HEX(payload) FROM rs_katib.observation_logs ORDER BY id",
		"SELECT * FROM rs_katib.notes ORDER BY id",
		"SELECT trigger_name, action_statement FROM information_schema.triggers WHERE trigger_schema = 'rs_pipeline'",
		"SELECT routine_name, routine_definition FROM information_schema.routines WHERE routine_schema = 'rs_pipeline'",
		"SELECT event_name, event_definition FROM information_schema.events WHERE event_schema = 'rs_katib'",
	}
	pgReads = []string{
		"SELECT * FROM public.users ORDER BY id",
		"SELECT * FROM billing.invoices ORDER BY 1, 2",
		"SELECT id, encode(blob, 'hex'), note FROM public.files ORDER BY id",
	}
)

const restoredTables = 8 // 5 MySQL tables (the view is not one), 3 PostgreSQL tables

// TestRestoreDatabases backs up a MySQL and a PostgreSQL database of blue (several schemas, BLOBs,
// unicode, a table without a key, a view), restores them onto green's servers, found through
// green's own pods in a mapped namespace, and checks green's data with plain SQL; then verify,
// restoring twice, a deleted row and a tampered dump.
func TestRestoreDatabases(t *testing.T) {
	testbed.Require(t, tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const blueNS, greenNS = "db-restore", "db-restore-green"
	serveDatabases(t, "blue", blueNS)
	serveDatabases(t, "green", greenNS)
	blueDB, greenDB := tb.MariaDB["blue"], tb.MariaDB["green"]
	bluePG, greenPG := tb.Postgres["blue"], tb.Postgres["green"]

	// Other tests dump every schema of blue's servers and expect only their own: leave none behind.
	t.Cleanup(func() {
		for _, db := range []*testbed.MariaDB{blueDB, greenDB} {
			if _, err := db.SQL(context.Background(), tb.Bins, "DROP DATABASE IF EXISTS rs_pipeline; DROP DATABASE IF EXISTS rs_katib;"); err != nil {
				t.Error(err)
			}
		}
		for _, pg := range []*testbed.PostgreSQL{bluePG, greenPG} {
			if _, err := pg.SQL(context.Background(), tb.Bins, "postgres", "DROP DATABASE IF EXISTS rs_appdb WITH (FORCE)"); err != nil {
				t.Error(err)
			}
		}
	})
	var runs strings.Builder
	for i := range 500 {
		fmt.Fprintf(&runs, "(%d, 'run-%d ✓', %d.25),", i, i, i)
	}
	if _, err := blueDB.SQL(ctx, tb.Bins, `SET NAMES utf8mb4; DROP DATABASE IF EXISTS rs_pipeline; CREATE DATABASE rs_pipeline CHARACTER SET utf8mb4;
CREATE TABLE rs_pipeline.run_details (id INT PRIMARY KEY, name VARCHAR(64), score DOUBLE);
INSERT INTO rs_pipeline.run_details VALUES `+strings.TrimSuffix(runs.String(), ",")+`;
CREATE TABLE rs_pipeline.events (run INT, kind VARCHAR(16));
INSERT INTO rs_pipeline.events VALUES (1, 'start'), (1, 'start'), (2, 'end');
CREATE TABLE rs_pipeline.empty_table (id INT PRIMARY KEY);
CREATE VIEW rs_pipeline.recent AS SELECT id, name FROM rs_pipeline.run_details WHERE id >= 495;
DROP DATABASE IF EXISTS rs_katib; CREATE DATABASE rs_katib CHARACTER SET utf8mb4;
CREATE TABLE rs_katib.observation_logs (id INT PRIMARY KEY, trial VARCHAR(64), payload LONGBLOB);
INSERT INTO rs_katib.observation_logs VALUES (1, 'trial-α', RANDOM_BYTES(1024)), (2, 'испытание', UNHEX(REPEAT('00FF0D0A5C27', 4096))), (3, '試行', NULL);
CREATE TABLE rs_katib.notes (id INT AUTO_INCREMENT PRIMARY KEY, body TEXT) CHARACTER SET utf8mb4;
INSERT INTO rs_katib.notes (body) VALUES ('naïve — 日本語 — 🚀'), ('quotes '' " and \\ backslash'), ('line\nbreak\ttab');
CREATE TRIGGER rs_pipeline.shout BEFORE INSERT ON rs_pipeline.events FOR EACH ROW SET NEW.kind = UPPER(NEW.kind);
CREATE PROCEDURE rs_pipeline.count_runs() SELECT COUNT(*) FROM rs_pipeline.run_details;
CREATE EVENT rs_katib.nightly ON SCHEDULE EVERY 1 DAY DISABLE DO DELETE FROM rs_katib.notes WHERE id < 0;`); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{"DROP DATABASE IF EXISTS rs_appdb", "CREATE DATABASE rs_appdb"} {
		if _, err := bluePG.SQL(ctx, tb.Bins, "postgres", stmt); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := bluePG.SQL(ctx, tb.Bins, "rs_appdb", `CREATE SCHEMA billing;
CREATE TABLE public.users (id int PRIMARY KEY, email text);
INSERT INTO public.users SELECT g, 'usér' || g || '@example.com' FROM generate_series(1, 250) g;
CREATE TABLE billing.invoices (id int, amount numeric);
INSERT INTO billing.invoices VALUES (1, 9.99), (1, 9.99), (2, 19.5);
CREATE TABLE public.files (id int PRIMARY KEY, blob bytea, note text);
INSERT INTO public.files VALUES (1, decode(repeat('00ff0d0a5c27', 2048), 'hex'), 'ファイル'), (2, NULL, E'tab\there');`); err != nil {
		t.Fatal(err)
	}
	// green's servers start without the backed-up schemas, as a new cluster's would.
	if _, err := greenDB.SQL(ctx, tb.Bins, "DROP DATABASE IF EXISTS rs_pipeline; DROP DATABASE IF EXISTS rs_katib;"); err != nil {
		t.Fatal(err)
	}
	if _, err := greenPG.SQL(ctx, tb.Bins, "postgres", "DROP DATABASE IF EXISTS rs_appdb"); err != nil {
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
  schemas: [rs_pipeline, rs_katib]
- name: app-pg
  engine: postgresql
  namespace: `+blueNS+`
  workload: deployment/pg
  secret: {name: pg-creds, userKey: user, passwordKey: password}
  schemas: [rs_appdb]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	url := backupMinIO(t, "dbrestore")
	const backup = "db-restore"
	code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "-f", config, "--name", backup)
	if code != 0 {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	store, m := readManifest(t, url, backup)
	if len(m.Databases) != 2 {
		t.Fatalf("the backup holds %d databases, want 2: %+v", len(m.Databases), m.Databases)
	}

	greenCluster, greenKC := clients(t, "green")
	cfg, err := greenCluster.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	dumps := databases.Dumps{Config: cfg, Client: greenKC, Mapping: snapshot.Mapping{Namespaces: map[string]string{blueNS: greenNS}}}
	restore := func() *snapshot.Report {
		t.Helper()
		r, err := snapshot.Open(ctx, store, backup, nil)
		if err != nil {
			t.Fatal(err)
		}
		var report snapshot.Report
		start := time.Now()
		if err := dumps.Restore(ctx, r, &report); err != nil {
			t.Fatalf("restore: %v", err)
		}
		t.Logf("restore took %s", time.Since(start).Round(time.Millisecond))
		return &report
	}
	verify := func() *snapshot.Report {
		t.Helper()
		r, err := snapshot.Open(ctx, store, backup, nil)
		if err != nil {
			t.Fatal(err)
		}
		var report snapshot.Report
		if err := dumps.Verify(ctx, r, &report); err != nil {
			t.Fatalf("verify: %v", err)
		}
		return &report
	}
	sameAsBlue := func(when string) {
		t.Helper()
		for _, q := range mysqlReads {
			b, errB := blueDB.SQL(ctx, tb.Bins, "SET NAMES utf8mb4; "+q)
			g, errG := greenDB.SQL(ctx, tb.Bins, "SET NAMES utf8mb4; "+q)
			if errB != nil || errG != nil || b != g || b == "" {
				t.Errorf("%s: %s: blue and green differ (%v, %v):\nblue:  %.300q\ngreen: %.300q", when, q, errB, errG, b, g)
			}
		}
		for _, q := range pgReads {
			b, errB := bluePG.SQL(ctx, tb.Bins, "rs_appdb", q)
			g, errG := greenPG.SQL(ctx, tb.Bins, "rs_appdb", q)
			if errB != nil || errG != nil || b != g || b == "" {
				t.Errorf("%s: %s: blue and green differ (%v, %v):\nblue:  %.300q\ngreen: %.300q", when, q, errB, errG, b, g)
			}
		}
		if n, err := greenDB.SQL(ctx, tb.Bins, "SELECT COUNT(*) FROM rs_pipeline.run_details"); err != nil || strings.TrimSpace(n) != "500" {
			t.Errorf("%s: green counts %q rows in rs_pipeline.run_details, want 500 (%v)", when, n, err)
		}
	}
	clean := func(what string, report *snapshot.Report, status string, n int) {
		t.Helper()
		if items := report.Problems(); len(items) > 0 {
			t.Fatalf("%s lists problems: %+v", what, items)
		}
		if got := report.Counts["databases"][status]; got != n {
			t.Fatalf("%s counts %v, want %d %s", what, report.Counts, n, status)
		}
	}

	clean("the restore", restore(), snapshot.StatusRestored, 2)
	sameAsBlue("after a restore")
	clean("verify", verify(), snapshot.StatusIdentical, restoredTables)

	// Twice: the same data, no duplicates (events and invoices have no key that would refuse them),
	// also with a client still connected to the PostgreSQL database the dump replaces.
	idle := exec.CommandContext(ctx, tb.Bins["psql"], "-X", "-d", "rs_appdb", "-c", "SELECT pg_sleep(600)")
	idle.Env = os.Environ()
	for k, v := range greenPG.Env() {
		idle.Env = append(idle.Env, k+"="+v)
	}
	if err := idle.Start(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a session on green's rs_appdb", 30*time.Second, func(ctx context.Context) (bool, error) {
		n, err := greenPG.SQL(ctx, tb.Bins, "postgres", "SELECT count(*) FROM pg_stat_activity WHERE datname = 'rs_appdb'")
		return err == nil && strings.TrimSpace(n) != "0", nil
	})
	clean("a second restore", restore(), snapshot.StatusRestored, 2)
	if err := idle.Wait(); err == nil {
		t.Error("the session on the replaced database was not ended")
	}
	sameAsBlue("after a second restore")
	clean("verify after a second restore", verify(), snapshot.StatusIdentical, restoredTables)

	// One row less on green: verify names that table and nothing else, in each engine.
	if _, err := greenDB.SQL(ctx, tb.Bins, "DELETE FROM rs_pipeline.run_details WHERE id = 7"); err != nil {
		t.Fatal(err)
	}
	onlyOne(t, verify(), snapshot.StatusDifferent, "kfp-mysql/rs_pipeline.run_details", "rows: backup 500, target 499")
	clean("a restore over a changed table", restore(), snapshot.StatusRestored, 2)
	if _, err := greenPG.SQL(ctx, tb.Bins, "rs_appdb", "UPDATE billing.invoices SET amount = 10 WHERE id = 2"); err != nil {
		t.Fatal(err)
	}
	onlyOne(t, verify(), snapshot.StatusDifferent, "app-pg/rs_appdb.billing.invoices", "checksum: backup ")
	clean("a restore over a changed PostgreSQL table", restore(), snapshot.StatusRestored, 2)

	// A table green has and the backup does not, in a backed-up schema.
	if _, err := greenDB.SQL(ctx, tb.Bins, "CREATE TABLE rs_katib.green_only (id INT)"); err != nil {
		t.Fatal(err)
	}
	onlyOne(t, verify(), snapshot.StatusDifferent, "kfp-mysql/rs_katib.green_only", "not in the backup")
	if _, err := greenDB.SQL(ctx, tb.Bins, "DROP TABLE rs_katib.green_only"); err != nil {
		t.Fatal(err)
	}

	// A tampered dump in storage: the restore fails naming the database; the other one restores.
	var key string
	for _, d := range m.Databases {
		if d.Name == "kfp-mysql" {
			key = snapshot.Prefix(backup) + d.Key
		}
	}
	tamper(t, store, key)
	report := restore()
	failed := report.Problems()
	if len(failed) != 1 || failed[0].Name != "kfp-mysql" || failed[0].Status != snapshot.StatusFailed {
		t.Fatalf("a restore from a tampered dump lists %+v; want kfp-mysql failed and nothing else", failed)
	}
	t.Logf("tampered dump: %s", failed[0].Detail)
	if report.Counts["databases"][snapshot.StatusRestored] != 1 {
		t.Errorf("app-pg is not restored beside the tampered dump: %v", report.Counts)
	}
}

// onlyOne checks that a verify lists exactly one item, with this status and name and a detail
// starting so.
func onlyOne(t *testing.T, report *snapshot.Report, status, name, detail string) {
	t.Helper()
	items := report.Problems()
	if len(items) != 1 || items[0].Status != status || items[0].Name != name || !strings.HasPrefix(items[0].Detail, detail) {
		t.Fatalf("verify lists %+v; want exactly %s %s: %s...", items, status, name, detail)
	}
}

// tamper changes one byte in the middle of a stored file, keeping its size.
func tamper(t *testing.T, store storage.Backend, key string) {
	t.Helper()
	ctx := context.Background()
	rc, err := store.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || len(data) == 0 {
		t.Fatalf("read %s: %d bytes, %v", key, len(data), err)
	}
	data[len(data)/2] ^= 0x5a
	if err := store.Put(ctx, key, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
}

// TestDatabaseRestoreSurvivesABrokenExec: the exec that loads a MariaDB dump into green breaks off
// part way, while its client holds a table locked (mysqldump's LOCK TABLES ... WRITE), and that
// client does not end with it: its stdin stays open (kwok never closes it; nothing says a
// container runtime must). The restore runs again, and must not wait behind the first client's
// lock until its exec times out: green then holds every row.
func TestDatabaseRestoreSurvivesABrokenExec(t *testing.T) {
	testbed.Require(t, tb)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const blueNS, greenNS, schema, rows = "reset-load", "reset-load-green", "rs_resetload", 20000
	serveDatabases(t, "blue", blueNS)
	serveDatabases(t, "green", greenNS)
	blueDB, greenDB := tb.MariaDB["blue"], tb.MariaDB["green"]
	t.Cleanup(func() {
		ctx := context.Background()
		// A client left holding a lock would keep the schema from being dropped.
		ids, _ := greenDB.SQL(ctx, tb.Bins, "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = '"+schema+"' AND ID <> CONNECTION_ID()")
		for _, id := range strings.Fields(ids) {
			greenDB.SQL(ctx, tb.Bins, "KILL "+id)
		}
		for _, db := range []*testbed.MariaDB{blueDB, greenDB} {
			if _, err := db.SQL(ctx, tb.Bins, "DROP DATABASE IF EXISTS "+schema); err != nil {
				t.Error(err)
			}
		}
	})
	if _, err := blueDB.SQL(ctx, tb.Bins, fmt.Sprintf(`DROP DATABASE IF EXISTS %[1]s; CREATE DATABASE %[1]s;
CREATE TABLE %[1]s.notes (id INT PRIMARY KEY, body TEXT);
USE %[1]s;
INSERT INTO %[1]s.notes SELECT seq, CONCAT('note ', seq, ' ', REPEAT('x', 100)) FROM seq_1_to_%[2]d;`, schema, rows)); err != nil {
		t.Fatal(err)
	}
	if _, err := greenDB.SQL(ctx, tb.Bins, "DROP DATABASE IF EXISTS "+schema); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(config, []byte(`include: {namespaces: [`+blueNS+`]}
databases:
- name: reset-load
  engine: mysql
  namespace: `+blueNS+`
  workload: deployment/mysql
  secret: {name: mysql-secret, userKey: username, passwordKey: password}
  schemas: [`+schema+`]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	url := "file://" + t.TempDir()
	const backup = "reset-load"
	if code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "-f", config, "--name", backup); code != 0 {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	store, m := readManifest(t, url, backup)
	if len(m.Databases) != 1 || m.Databases[0].Bytes < 1<<20 {
		t.Fatalf("the backup holds %+v; want one dump of more than 1 MiB", m.Databases)
	}

	// The dump is about 2.5 MB; no other exec of the restore carries half a megabyte.
	proxy := startResetProxy(t, apiServerAddr(t, "green"), 512<<10, 1, 1)
	greenCluster, _ := clients(t, "green")
	cfg, err := greenCluster.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Host = proxy.URL()
	proxied, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dumps := databases.Dumps{Config: cfg, Client: proxied, Mapping: snapshot.Mapping{Namespaces: map[string]string{blueNS: greenNS}}}
	r, err := snapshot.Open(ctx, store, backup, nil)
	if err != nil {
		t.Fatal(err)
	}
	var report snapshot.Report
	start := time.Now()
	if err := dumps.Restore(ctx, r, &report); err != nil {
		t.Fatalf("restore: %v", err)
	}
	streams, resets := proxy.counts()
	t.Logf("restore took %s; the proxy saw %d exec streams and reset %d; report %v", time.Since(start).Round(time.Millisecond), streams, resets, report.Counts)
	if resets != 1 {
		t.Fatalf("the proxy reset %d streams, want 1 (the load's)", resets)
	}
	if failed := report.Problems(snapshot.StatusFailed); len(failed) > 0 {
		t.Fatalf("the restore failed after the load broke off: %+v", failed)
	}
	const sum = "SET SESSION group_concat_max_len = 1 << 26; SELECT COUNT(*), MD5(GROUP_CONCAT(body ORDER BY id SEPARATOR '')) FROM " + schema + ".notes"
	got, err := greenDB.SQL(ctx, tb.Bins, sum)
	if err != nil {
		t.Fatal(err)
	}
	want, err := blueDB.SQL(ctx, tb.Bins, sum)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("green's %s.notes: %q; blue's %q", schema, got, want)
	}
}
