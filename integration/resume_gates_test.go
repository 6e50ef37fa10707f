package integration

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/migrate"
	"github.com/ferrykube/ferry/snapshot"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// resumeTable is the table of TestCarryBackBacksUpAgainWhatItSkipped, in the platform's
// mlpipeline schema (database kfp-mysql) on blue's and green's MariaDB.
const resumeTable = "mlpipeline.resume_gate_rows"

// TestCarryBackBacksUpAgainWhatItSkipped: blue moves to green, green takes writes in a table of
// database kfp-mysql, and then green's database has no running pod. rollback --carry-back backs
// green up, finds the database skipped and stops before touching blue. Once the pod is back, the
// same command does not reuse that backup: it backs green up again, carries the rows to blue
// (read back from blue's MariaDB with SQL), and the report says carried back only now.
func TestCarryBackBacksUpAgainWhatItSkipped(t *testing.T) {
	blueMySQL(t)
	blueMinIO(t)
	_, greenKC := cutover(t)
	ctx := context.Background()
	blueDB, greenDB := tb.MariaDB["blue"], tb.MariaDB["green"]
	dropTable := func() {
		for _, name := range []string{"blue", "green"} {
			if _, err := tb.MariaDB[name].SQL(context.Background(), tb.Bins, "DROP TABLE IF EXISTS "+resumeTable); err != nil {
				t.Logf("clean up %s's MariaDB: %v", name, err)
			}
		}
	}
	dropTable()
	t.Cleanup(dropTable)
	// Green's database pod comes back whatever happens: later tests dump it.
	t.Cleanup(func() { scaleMySQL(t, greenKC, 1) })

	if _, err := blueDB.SQL(ctx, tb.Bins, `CREATE TABLE `+resumeTable+` (id INT PRIMARY KEY, note VARCHAR(64));
INSERT INTO `+resumeTable+` VALUES (1, 'one, deleted on green'), (2, 'two');`); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(config, []byte("preset: kubeflow\nstorageClassMap: {gp3: standard, nfs-client: standard}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	url := backupMinIO(t, "carry-back-resume-gates")
	start := time.Now()
	code, out, errOut := runFerry(t, "--storage", url, "migrate", "--from", "blue", "--to", "cutover", "-f", config, "--allow-skipped", "--lease-ttl", testLeaseTTL.String())
	id := runID(t, errOut)
	wantEnded(t, url, id, "ferry migrate", code, out, errOut)
	if !strings.Contains(out, "shifted") {
		t.Fatalf("ferry migrate did not shift\nstdout: %s\nstderr: %s", out, errOut)
	}
	rolledBack := false
	t.Cleanup(func() {
		if !rolledBack { // blue's writers run again whatever happens
			runFerry(t, "--storage", url, "rollback", "--run", id, "--discard-green-writes")
		}
	})
	migrated := time.Since(start)

	// Green takes writes; then its database has no running pod.
	if _, err := greenDB.SQL(ctx, tb.Bins, `INSERT INTO `+resumeTable+` VALUES (3, 'three, written on green');
DELETE FROM `+resumeTable+` WHERE id = 1;`); err != nil {
		t.Fatal(err)
	}
	wantRows := "2\ttwo\n3\tthree, written on green\n"
	if got := rows(t, greenDB, resumeTable); got != wantRows {
		t.Fatalf("green's rows: %q, want %q", got, wantRows)
	}
	scaleMySQL(t, greenKC, 0)

	carryBack := []string{"--storage", url, "rollback", "--run", id, "--carry-back", "--lease-ttl", testLeaseTTL.String()}
	code, out, errOut = runFerry(t, carryBack...)
	if code != 3 || !strings.Contains(out, "database kfp-mysql") || !strings.Contains(out, "--allow-skipped") {
		t.Fatalf("the carry-back whose backup of green skipped database kfp-mysql exited %d, want 3 (stopped) naming it and --allow-skipped\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if e, ok := journal(t, url, id).Last(migrate.GreenBackedUp, migrate.Failed, 0); !ok || !strings.Contains(e.Detail, "database kfp-mysql") {
		t.Errorf("the journal should say green's backup stopped on database kfp-mysql: %+v", e)
	}
	if got := rows(t, blueDB, resumeTable); got != "1\tone, deleted on green\n2\ttwo\n" {
		t.Errorf("blue's rows after the stopped carry-back: %q, want blue's own (nothing applied)", got)
	}
	_, skipped := readManifest(t, url, migrate.CarryBackName(id))

	// The pod is back: the same command backs green up again, and carries the rows back.
	scaleMySQL(t, greenKC, 1)
	code, out, errOut = runFerry(t, carryBack...)
	if code != 0 {
		t.Fatalf("the carry-back once green's database runs again exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	rolledBack = true
	if got := rows(t, blueDB, resumeTable); got != wantRows {
		t.Errorf("blue's rows after the carry-back (read with SQL): %q, want green's %q", got, wantRows)
	}
	_, m := readManifest(t, url, migrate.CarryBackName(id))
	if !m.StartedAt.After(skipped.StartedAt) || !slices.ContainsFunc(m.Databases, func(d snapshot.Database) bool { return d.Name == "kfp-mysql" }) {
		t.Errorf("the backup of green the carry-back used: started %s (the one that skipped: %s), databases %d; want a new one holding kfp-mysql",
			m.StartedAt, skipped.StartedAt, len(m.Databases))
	}

	j := journal(t, url, id)
	e, ok := j.Last(migrate.GreenBackedUp, migrate.Done, 0)
	if !ok || !strings.Contains(e.Detail, "made again") || strings.Contains(e.Detail, "finished before the run was interrupted") {
		t.Errorf("green's backup step: %q, want it made again", e.Detail)
	}
	rep := migrate.BuildReport(j)
	cb := rep.CarryBack
	if rep.State != migrate.RolledBack || cb == nil || cb.Verification == nil || rep.Rollback == nil {
		t.Fatalf("the report should say rolled back with a verified carry-back: %+v", rep)
	}
	if n := cb.Verification.Counts["databases"][snapshot.StatusIdentical]; n == 0 || len(cb.Verification.Items) > 0 {
		t.Errorf("blue's verification: %+v, want database kfp-mysql identical and nothing listed", cb.Verification)
	}
	if !strings.Contains(rep.Rollback.Why, "carried back") {
		t.Errorf("the rollback's reason %q should say green's writes were carried back", rep.Rollback.Why)
	}
	t.Logf("run %s: migrated in %s, the whole test took %s; green's backup: %s", id, migrated.Round(time.Second), time.Since(start).Round(time.Second), e.Detail)
}

// scaleMySQL scales the platform's MariaDB Deployment on a cluster and waits until it runs a pod,
// or none.
func scaleMySQL(t *testing.T, kc kubernetes.Interface, replicas int32) {
	t.Helper()
	ctx := context.Background()
	if _, err := kc.AppsV1().Deployments("kubeflow").UpdateScale(ctx, "mysql", &autoscalingv1.Scale{
		ObjectMeta: metav1.ObjectMeta{Name: "mysql", Namespace: "kubeflow"}, Spec: autoscalingv1.ScaleSpec{Replicas: replicas}}, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("scale kubeflow/mysql to %d: %v", replicas, err)
	}
	if replicas > 0 {
		runningPod(t, kc, "kubeflow", "app=mysql")
		return
	}
	waitUntil(t, "no running pod of kubeflow/mysql", 60*time.Second, func(ctx context.Context) (bool, error) {
		pods, err := kc.CoreV1().Pods("kubeflow").List(ctx, metav1.ListOptions{LabelSelector: "app=mysql"})
		if err != nil {
			return false, err
		}
		return !slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil }), nil
	})
}

// rows reads a table of a testbed MariaDB, one tab-separated line per row, by id.
func rows(t *testing.T, db *testbed.MariaDB, table string) string {
	t.Helper()
	out, err := db.SQL(context.Background(), tb.Bins, "SELECT id, note FROM "+table+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	return out
}
