package integration

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"github.com/klauspost/compress/zstd"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// TestBackupDumpsMySQL runs the platform's MySQL pod on blue (its exec mapped to blue's MariaDB),
// fills a schema and checks that ferry backup dumps it with row counts and checksums.
func TestBackupDumpsMySQL(t *testing.T) {
	applyPlatform(t)
	blue, kc := clients(t, "blue")
	db := tb.MariaDB["blue"]
	ctx := context.Background()

	// The claim gets a volume, so the Deployment's pod is scheduled and runs.
	if err := blue.BindClaim(ctx, "kubeflow", "mysql-pv-claim", dataDir(t, "mysql")); err != nil {
		t.Fatal(err)
	}
	var pod string
	waitUntil(t, "a running mysql pod", 60*time.Second, func(ctx context.Context) (bool, error) {
		pods, err := kc.CoreV1().Pods("kubeflow").List(ctx, metav1.ListOptions{LabelSelector: labels.Set{"app": "mysql"}.String()})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				pod = p.Name
				return true, nil
			}
		}
		return false, nil
	})
	// The mapping outlives this test: later backups of blue dump this database too.
	if err := blue.MapExec(ctx, "kubeflow", pod, db.ClientHome, db.Env()); err != nil {
		t.Fatal(err)
	}
	secret, err := kc.CoreV1().Secrets("kubeflow").Get(ctx, "mysql-secret", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret.Data = map[string][]byte{"username": []byte(db.User), "password": []byte(db.Password)}
	secret.StringData = nil
	if _, err := kc.CoreV1().Secrets("kubeflow").Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var rows strings.Builder
	for i := range 500 {
		fmt.Fprintf(&rows, "(%d, 'run-%d', %d.5),", i, i, i)
	}
	_, err = db.SQL(ctx, tb.Bins, `DROP DATABASE IF EXISTS mlpipeline; CREATE DATABASE mlpipeline;
CREATE TABLE mlpipeline.run_details (id INT PRIMARY KEY, name VARCHAR(64), score DOUBLE);
INSERT INTO mlpipeline.run_details VALUES `+strings.TrimSuffix(rows.String(), ",")+`;
CREATE TABLE mlpipeline.empty_table (id INT PRIMARY KEY);
DROP DATABASE IF EXISTS cachedb; CREATE DATABASE cachedb; CREATE TABLE cachedb.execution_caches (k VARCHAR(10)); INSERT INTO cachedb.execution_caches VALUES ('a'),('b');`)
	if err != nil {
		t.Fatal(err)
	}

	minio := tb.MinIO["backup"]
	if err := minio.CreateBucket(ctx, "backups"); err != nil {
		t.Fatal(err)
	}
	for _, kv := range minio.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	url := "s3://backups/dbtest?endpoint=" + minio.Endpoint + "&path-style=true"
	code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "--preset", "kubeflow", "--name", "with-db")
	if code != 3 || strings.Contains(out, "database kfp-mysql") {
		t.Fatalf("ferry backup exited %d (want 3: volumes and the bucket are skipped, kfp-mysql is not)\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	store, err := storage.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	m, err := snapshot.ReadManifest(ctx, store, "with-db")
	if err != nil {
		t.Fatal(err)
	}
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
	rc, err := store.Get(ctx, snapshot.Prefix("with-db")+d.Key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	dec, err := zstd.NewReader(rc)
	if err != nil {
		t.Fatal(err)
	}
	sql, err := io.ReadAll(dec)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(sql)) != d.Bytes || !strings.Contains(string(sql), "CREATE TABLE `run_details`") || !strings.Contains(string(sql), "'run-499'") {
		t.Fatalf("the dump (%d bytes, manifest says %d) lacks the table or its rows", len(sql), d.Bytes)
	}
	if _, fixture := kubeflowFixture(); fixture && !strings.Contains(out, "database katib-mysql: no running pod") {
		t.Errorf("katib-mysql has no running pod and must be reported as skipped:\n%s", out)
	}
}
