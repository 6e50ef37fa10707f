package integration

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/snapshot"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// TestBackupDumpsMySQL runs the platform's MySQL pod on blue (its exec mapped to blue's MariaDB),
// fills a schema and checks that ferry backup dumps it with row counts and checksums.
func TestBackupDumpsMySQL(t *testing.T) {
	blueMySQL(t)

	url := backupMinIO(t, "dbtest")
	code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "--preset", "kubeflow", "--name", "with-db")
	if strings.Contains(out, "database kfp-mysql") {
		t.Fatalf("ferry backup exited %d, skipping kfp-mysql\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	store, m := wantBackupExit(t, url, "with-db", code, out, errOut)
	i := slices.IndexFunc(m.Databases, func(d snapshot.Database) bool { return d.Name == "kfp-mysql" })
	if i < 0 {
		t.Fatalf("manifest has no kfp-mysql dump: %+v", m.Databases)
	}
	d := m.Databases[i]
	if !slices.Equal(d.Schemas, []string{"cachedb", "mlpipeline"}) {
		t.Fatalf("dumped schemas %v, want cachedb and mlpipeline (and no system schema)", d.Schemas)
	}
	want := map[string]int64{"cachedb.execution_caches": 2, "mlpipeline.empty_table": 0, "mlpipeline.run_details": 500}
	for _, tbl := range d.Tables {
		n, ok := want[tbl.Schema+"."+tbl.Name]
		if !ok || n != tbl.Rows || tbl.Checksum == "" {
			t.Errorf("table %s.%s: %d rows, checksum %q; want %d rows and a checksum", tbl.Schema, tbl.Name, tbl.Rows, tbl.Checksum, n)
		}
		delete(want, tbl.Schema+"."+tbl.Name)
	}
	if len(want) > 0 {
		t.Errorf("tables missing from the manifest: %v", want)
	}
	sql := readStored(t, store, "with-db", d.Key, nil)
	if int64(len(sql)) != d.Bytes || !strings.Contains(string(sql), "CREATE TABLE `run_details`") || !strings.Contains(string(sql), "'run-499'") {
		t.Fatalf("the dump (%d bytes, manifest says %d) lacks the table or its rows", len(sql), d.Bytes)
	}
	if _, fixture := kubeflowFixture(); fixture && !strings.Contains(out, "database katib-mysql: no running pod") {
		t.Errorf("katib-mysql has no running pod and must be reported as skipped:\n%s", out)
	}

	// A backup of one tenant's namespace holds none of the platform's databases and buckets, which
	// live in the kubeflow namespace: the selection narrows the data as a restore's does.
	code, out, errOut = runFerry(t, "--storage", url, "backup", "--from", "blue", "--preset", "kubeflow", "--include-namespaces", "alice", "--name", "alice-only")
	_, m = wantBackupExit(t, url, "alice-only", code, out, errOut)
	if len(m.Databases) > 0 || len(m.Buckets) > 0 || slices.ContainsFunc(m.Skipped, func(s snapshot.Skipped) bool { return s.Kind == "database" || s.Kind == "bucket" }) {
		t.Errorf("a backup of namespace alice holds databases %+v and buckets %+v, skipping %+v; want none of the kubeflow namespace's", m.Databases, m.Buckets, m.Skipped)
	}
	code, out, errOut = runFerry(t, "plan", "--from", "blue", "--preset", "kubeflow", "--include-namespaces", "alice")
	if code != 0 || !regexpLine(out, `databases\s+\d+\s+namespace not included`) {
		t.Errorf("ferry plan of namespace alice exited %d, want 0 and the databases listed as not moved\nstdout: %s\nstderr: %s", code, out, lastLines(errOut, 10))
	}
}

// TestBackupDumpsPostgreSQL declares a PostgreSQL of an application in ferry.yaml, runs its pod on
// blue (exec mapped to blue's PostgreSQL server) and checks the dump and the per-table figures.
func TestBackupDumpsPostgreSQL(t *testing.T) {
	pg := bluePostgresApp(t, "team-db", "appdb")
	ctx := context.Background()
	if _, err := pg.SQL(ctx, tb.Bins, "appdb", `CREATE SCHEMA billing;
CREATE TABLE public.users (id int PRIMARY KEY, email text);
INSERT INTO public.users SELECT g, 'user' || g || '@example.com' FROM generate_series(1, 250) g;
CREATE TABLE billing.invoices (id int, amount numeric);
INSERT INTO billing.invoices VALUES (1, 9.99), (2, 19.5);`); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(config, []byte(`databases:
- name: app-db
  engine: postgresql
  namespace: team-db
  workload: deployment/pg
  secret: {name: pg-creds, userKey: user, passwordKey: password}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	storeDir := t.TempDir()
	code, out, errOut := runFerry(t, "--storage", "file://"+storeDir, "backup", "--from", "blue", "-f", config, "--name", "with-pg")
	if (code != 0 && code != 3) || strings.Contains(out, "database app-db") {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	store, m := readManifest(t, "file://"+storeDir, "with-pg")
	i := slices.IndexFunc(m.Databases, func(d snapshot.Database) bool { return d.Name == "app-db" })
	if i < 0 {
		t.Fatalf("manifest has no app-db dump: %+v", m.Databases)
	}
	dump := m.Databases[i]
	if dump.Engine != "postgresql" || !slices.Equal(dump.Schemas, []string{"appdb"}) {
		t.Fatalf("dump %+v, want engine postgresql and database appdb only", dump)
	}
	want := map[string]int64{"appdb.billing.invoices": 2, "appdb.public.users": 250}
	for _, tbl := range dump.Tables {
		n, ok := want[tbl.Schema+"."+tbl.Name]
		if !ok || n != tbl.Rows || len(tbl.Checksum) != 32 {
			t.Errorf("table %s.%s: %d rows, checksum %q", tbl.Schema, tbl.Name, tbl.Rows, tbl.Checksum)
		}
		delete(want, tbl.Schema+"."+tbl.Name)
	}
	if len(want) > 0 {
		t.Errorf("tables missing from the manifest: %v", want)
	}
	sql := readStored(t, store, "with-pg", dump.Key, nil)
	if !strings.Contains(string(sql), "CREATE DATABASE appdb") || !strings.Contains(string(sql), "user250@example.com") {
		t.Fatalf("the dump lacks the database or its rows (%d bytes)", len(sql))
	}
}

// bluePostgresApp runs an application's PostgreSQL pod, deployment/pg, in a new namespace of
// blue, its exec mapped to blue's PostgreSQL server where database db is made anew, and its
// credentials in the Secret pg-creds (keys user and password).
func bluePostgresApp(t *testing.T, ns, db string) *testbed.PostgreSQL {
	t.Helper()
	applyPlatform(t)
	blue, kc := clients(t, "blue")
	pg := tb.Postgres["blue"]
	ctx := context.Background()
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pg-creds", Namespace: ns},
		StringData: map[string]string{"user": pg.User, "password": pg.Password}}
	if _, err := kc.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "pg"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "pg"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "postgres:17"}}}},
		},
	}
	if _, err := kc.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := runningPod(t, kc, ns, "app=pg")
	env := pg.Env()
	delete(env, "PGPASSWORD") // ferry hands the Secret's password over itself
	if err := blue.MapExec(ctx, ns, pod, dataDir(t, "pg"), env); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{"DROP DATABASE IF EXISTS " + db, "CREATE DATABASE " + db} {
		if _, err := pg.SQL(ctx, tb.Bins, "postgres", stmt); err != nil {
			t.Fatal(err)
		}
	}
	return pg
}

// TestDatabaseBackupSurvivesABrokenExec: the connection of the exec that dumps a database is
// reset mid-dump (as an API server restarting, or a load balancer dropping streams, does). The
// backup dumps the database again and completes, the dump whole; before, it failed.
func TestDatabaseBackupSurvivesABrokenExec(t *testing.T) {
	const ns, rows = "reset-db", 20000
	pg := bluePostgresApp(t, ns, "resetdb")
	ctx := context.Background()
	if _, err := pg.SQL(ctx, tb.Bins, "resetdb", fmt.Sprintf(`CREATE TABLE public.notes (id int PRIMARY KEY, body text);
INSERT INTO public.notes SELECT g, 'note ' || g || ' ' || repeat('x', 100) FROM generate_series(1, %d) g;`, rows)); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(config, []byte(`databases:
- name: reset-db
  engine: postgresql
  namespace: `+ns+`
  workload: deployment/pg
  schemas: [resetdb]
  secret: {name: pg-creds, userKey: user, passwordKey: password}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	// The dump is about 2.4 MB; no other exec of the backup prints half a megabyte.
	proxy := startResetProxy(t, apiServerAddr(t, "blue"), 512<<10, 1, 1)
	storeDir := t.TempDir()
	code, out, errOut := runFerry(t, "--storage", "file://"+storeDir, "backup", "--context", "blue", "--server", proxy.URL(),
		"-f", config, "--include-namespaces", ns, "--name", "reset")
	streams, resets := proxy.counts()
	t.Logf("the proxy saw %d exec streams and reset %d", streams, resets)
	if code != 0 {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if resets != 1 {
		t.Fatalf("the proxy reset %d connections, want 1 (the dump's)\nstderr: %s", resets, errOut)
	}
	if !strings.Contains(errOut, "exec broke off; running its dump again") || !strings.Contains(errOut, "database=reset-db") {
		t.Errorf("the backup does not say it dumped reset-db again:\n%s", errOut)
	}
	store, m := readManifest(t, "file://"+storeDir, "reset")
	i := slices.IndexFunc(m.Databases, func(d snapshot.Database) bool { return d.Name == "reset-db" })
	if i < 0 {
		t.Fatalf("manifest has no reset-db dump: %+v", m.Databases)
	}
	dump := m.Databases[i]
	if len(dump.Tables) != 1 || dump.Tables[0].Schema+"."+dump.Tables[0].Name != "resetdb.public.notes" || dump.Tables[0].Rows != rows {
		t.Fatalf("dumped tables %+v, want public.notes of %d rows", dump.Tables, rows)
	}
	sql := readStored(t, store, "reset", dump.Key, nil)
	last := fmt.Sprintf("note %d ", rows)
	if int64(len(sql)) != dump.Bytes || !strings.Contains(string(sql), last) || strings.Count(string(sql), "CREATE TABLE public.notes") != 1 {
		t.Fatalf("the dump (%d bytes, manifest says %d) is not one whole dump of the table", len(sql), dump.Bytes)
	}

	// Restored in place after the table changed, the load's connection reset once: the load
	// runs again from the dump's start, and the table is the backup's.
	if _, err := pg.SQL(ctx, tb.Bins, "resetdb", "DELETE FROM public.notes WHERE id > 100; UPDATE public.notes SET body = 'changed' WHERE id = 1;"); err != nil {
		t.Fatal(err)
	}
	proxy.arm(1, 1)
	code, rep, errOut := runReportCommand(t, "--storage", "file://"+storeDir, "restore", "--context", "blue", "--server", proxy.URL(), "--backup", "reset")
	_, resets = proxy.counts()
	if code != 0 || rep.Counts["databases"][snapshot.StatusRestored] != 1 || resets != 1 {
		t.Fatalf("ferry restore exited %d, reset %d times: %v %+v\nstderr: %s", code, resets, rep.Counts, rep.Items, errOut)
	}
	if !strings.Contains(errOut, "exec broke off; running its restore again") {
		t.Errorf("the restore does not say it loaded reset-db again:\n%s", errOut)
	}
	got, err := pg.SQL(ctx, tb.Bins, "resetdb", "SELECT count(*), count(DISTINCT id), min(body) FROM public.notes WHERE body LIKE 'note ' || id || ' x%';")
	if want := fmt.Sprintf("%d|%d|note 1 %s", rows, rows, strings.Repeat("x", 100)); strings.TrimSpace(got) != want || err != nil {
		t.Errorf("public.notes after the restore: %q (%v), want %q", got, err, want)
	}
}

// apiServerAddr is the host:port of the cluster's API server.
func apiServerAddr(t testing.TB, cluster string) string {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", tb.Clusters[cluster].Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}
