package databases

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
)

func dumpOf(sql string) snapshot.Database {
	sum := sha256.Sum256([]byte(sql))
	return snapshot.Database{Name: "kfp-mysql", Bytes: int64(len(sql)), SHA256: hex.EncodeToString(sum[:])}
}

func TestSQLStreamChecksTheDump(t *testing.T) {
	const sql = "DROP TABLE IF EXISTS `t`;\nCREATE TABLE `t` (id int);\nINSERT INTO `t` VALUES (1),(2);\n"
	for _, tc := range []struct {
		name, stream string
		want         string // in the error; "" for none
	}{
		{"intact", sql, ""},
		{"truncated", sql[:len(sql)-5], "bytes of SQL, the manifest says"},
		{"longer", sql + "DROP TABLE `t`;\n", "longer than"},
		{"changed", strings.Replace(sql, "(2)", "(3)", 1), "SHA-256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cancelled := false
			s := newSQLStream(iotestOneByte(tc.stream), dumpOf(sql), func() { cancelled = true })
			var got bytes.Buffer
			_, err := io.Copy(&got, s)
			if tc.want == "" {
				if err != nil || !s.finished() || got.String() != sql || cancelled {
					t.Fatalf("err %v, finished %v, cancelled %v, passed on %q", err, s.finished(), cancelled, got.String())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "database kfp-mysql") || !errors.Is(err, snapshot.ErrCorrupt) {
				t.Fatalf("error %v, want one naming the database and saying %q", err, tc.want)
			}
			if !cancelled || s.finished() || s.failure() == nil {
				t.Fatalf("cancelled %v, finished %v, failure %v: the client must be stopped", cancelled, s.finished(), s.failure())
			}
			if int64(got.Len()) > dumpOf(sql).Bytes {
				t.Fatalf("passed on %d bytes, more than the dump's %d", got.Len(), len(sql))
			}
		})
	}
}

// iotestOneByte reads s in small pieces, as a network stream would deliver it.
func iotestOneByte(s string) io.Reader {
	return &smallReader{s: s}
}

type smallReader struct{ s string }

func (r *smallReader) Read(p []byte) (int, error) {
	if r.s == "" {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), 7)], r.s)
	r.s = r.s[n:]
	return n, nil
}

func TestTerminateSessionsQuotes(t *testing.T) {
	got := terminateSessions([]string{"appdb", "o'neil"})
	if !strings.Contains(got, "IN ('appdb', 'o''neil')") || !strings.Contains(got, "pid <> pg_backend_pid()") {
		t.Fatalf("SQL %q", got)
	}
}

func TestCompareTables(t *testing.T) {
	d := snapshot.Database{Name: "app-db", Tables: []snapshot.Table{
		{Schema: "appdb.public", Name: "users", Rows: 500, Checksum: "a"},
		{Schema: "appdb.public", Name: "same", Rows: 2, Checksum: "s"},
		{Schema: "appdb.billing", Name: "invoices", Rows: 2, Checksum: "b"},
		{Schema: "appdb.billing", Name: "gone", Rows: 1, Checksum: "g"},
	}}
	target := []snapshot.Table{
		{Schema: "appdb.billing", Name: "invoices", Rows: 2, Checksum: "c"},
		{Schema: "appdb.public", Name: "users", Rows: 499, Checksum: "x"},
		{Schema: "appdb.public", Name: "same", Rows: 2, Checksum: "s"},
		{Schema: "appdb.public", Name: "new", Rows: 3, Checksum: "n"},
	}
	want := []difference{
		{status: snapshot.StatusDifferent, name: "app-db/appdb.public.users", detail: "rows: backup 500, target 499"},
		{status: snapshot.StatusDifferent, name: "app-db/appdb.billing.invoices", detail: "checksum: backup b, target c"},
		{status: snapshot.StatusMissing, name: "app-db/appdb.billing.gone", detail: "not on the target (backup: 1 rows)"},
		{status: snapshot.StatusDifferent, name: "app-db/appdb.public.new", detail: "not in the backup (target: 3 rows)", extra: true},
	}
	got := compareTables(d, target)
	if len(got) != len(want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("difference %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if diffs := compareTables(d, d.Tables); len(diffs) != 0 {
		t.Errorf("identical tables differ: %+v", diffs)
	}
}

func TestCompareBeyondTables(t *testing.T) {
	d := snapshot.Database{Name: "app-db", LargeObjects: []snapshot.LargeObjects{
		{Database: "same", Count: 2, Checksum: "s"},
		{Database: "fewer", Count: 3, Checksum: "f"},
		{Database: "changed", Count: 1, Checksum: "a"},
		{Database: "gone", Count: 4, Checksum: "g"},
		{Database: "gone-empty", Count: 0, Checksum: "e"},
		{Database: "none-now", Count: 0, Checksum: "e"},
	}, Sequences: []snapshot.Sequence{
		{Schema: "same.public", Name: "ids", Next: 13},
		{Schema: "same.public", Name: "ahead", Next: 13},
		{Schema: "same.public", Name: "behind", Next: 13},
		{Schema: "same.public", Name: "dropped", Next: 2},
	}}
	target := beyondTables{largeObjects: []snapshot.LargeObjects{
		{Database: "changed", Count: 1, Checksum: "b"},
		{Database: "same", Count: 2, Checksum: "s"},
		{Database: "fewer", Count: 2, Checksum: "x"},
		{Database: "none-now", Count: 1, Checksum: "n"},
	}, sequences: []snapshot.Sequence{
		{Schema: "same.public", Name: "ids", Next: 13},
		{Schema: "same.public", Name: "ahead", Next: 20},
		{Schema: "same.public", Name: "behind", Next: 11},
		{Schema: "same.public", Name: "new", Next: 5},
	}}
	objects := []difference{
		{status: snapshot.StatusDifferent, name: "app-db/fewer.pg_catalog.pg_largeobject", detail: "large objects: backup 3, target 2"},
		{status: snapshot.StatusDifferent, name: "app-db/changed.pg_catalog.pg_largeobject", detail: "checksum: backup a, target b"},
		{status: snapshot.StatusMissing, name: "app-db/gone.pg_catalog.pg_largeobject", detail: "not on the target (backup: 4 large objects)"},
		{status: snapshot.StatusDifferent, name: "app-db/none-now.pg_catalog.pg_largeobject", detail: "large objects: backup 0, target 1"},
	}
	behind := difference{status: snapshot.StatusDifferent, name: "app-db/same.public.behind",
		detail: "sequence behind the backup's: next value backup 13, target 11; the next inserts would take numbers the rows hold"}
	dropped := difference{status: snapshot.StatusMissing, name: "app-db/same.public.dropped", detail: "sequence not on the target, or never used there (backup: next value 2)"}
	if got, want := compareBeyondTables(d, target, false), append(slices.Clone(objects), behind, dropped); !slices.Equal(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	// After a schema upgrade, a release may drop a sequence; none may be behind.
	if got, want := compareBeyondTables(d, target, true), append(slices.Clone(objects), behind); !slices.Equal(got, want) {
		t.Fatalf("upgrade: got %+v\nwant %+v", got, want)
	}
	// A backup made before these were recorded compares none.
	if got := compareBeyondTables(snapshot.Database{Name: "old"}, target, false); len(got) != 0 {
		t.Fatalf("an older backup's large objects and sequences differ: %+v", got)
	}
}

func TestLocateOnTheMappedNamespace(t *testing.T) {
	labels := map[string]string{"app": "mysql"}
	deploy := &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "mysql", Namespace: "kubeflow-green"},
		Spec:       appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	pod := func(name string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kubeflow-green", Labels: labels}, Status: corev1.PodStatus{Phase: phase}}
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "mysql-secret", Namespace: "kubeflow-green"},
		Data: map[string][]byte{"username": []byte("kfp"), "password": []byte("s3cret")}}
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		{Version: "v1", Resource: "pods"}: "PodList", {Group: "apps", Version: "v1", Resource: "deployments"}: "DeploymentList",
	}, toUnstructured(t, deploy), toUnstructured(t, pod("mysql-b", corev1.PodPending)), toUnstructured(t, pod("mysql-c", corev1.PodRunning)))
	c := Dumps{Client: fake.NewClientset(secret), Mapping: snapshot.Mapping{Namespaces: map[string]string{"kubeflow": "kubeflow-green"}}}
	cfg := config.Database{Name: "kfp-mysql", Engine: "mysql", Namespace: "kubeflow", Workload: "deployment/mysql",
		Secret: &config.SecretRef{Name: "mysql-secret", UserKey: "username", PasswordKey: "password"}}
	r := &snapshot.Reader{Manifest: &snapshot.Manifest{Plan: &plans.Plan{Config: config.Planning{Databases: []config.Database{cfg}}}}}
	got, err := c.locate(context.Background(), dyn, r, snapshot.Database{Name: "kfp-mysql", Engine: "mysql"})
	if err != nil {
		t.Fatal(err)
	}
	if got.item.Namespace != "kubeflow-green" || got.item.Pod != "mysql-c" || got.cred != (credentials{user: "kfp", password: "s3cret"}) {
		t.Fatalf("located %+v, %+v", got.item, got.cred.user)
	}

	c.Mapping = snapshot.Mapping{}
	if _, err := c.locate(context.Background(), dyn, r, snapshot.Database{Name: "kfp-mysql"}); err == nil || !strings.Contains(err.Error(), "no deployment/mysql in namespace kubeflow") {
		t.Fatalf("unmapped: %v", err)
	}
	if _, err := c.locate(context.Background(), dyn, r, snapshot.Database{Name: "other"}); err == nil || !strings.Contains(err.Error(), "database other") {
		t.Fatalf("unknown database: %v", err)
	}
}

func toUnstructured(t *testing.T, obj runtime.Object) runtime.Object {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func TestRestoreAndVerifyReportDatabasesTheyCannotReach(t *testing.T) {
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		{Version: "v1", Resource: "pods"}: "PodList", {Group: "apps", Version: "v1", Resource: "deployments"}: "DeploymentList",
	})
	cfg := config.Database{Name: "kfp-mysql", Engine: "mysql", Namespace: "kubeflow", Workload: "deployment/mysql"}
	r := &snapshot.Reader{Manifest: &snapshot.Manifest{
		Plan: &plans.Plan{Config: config.Planning{Databases: []config.Database{cfg}}},
		Databases: []snapshot.Database{
			{Name: "kfp-mysql", Engine: "mysql", Schemas: []string{"mlpipeline"}, Tables: []snapshot.Table{{Schema: "mlpipeline", Name: "runs"}, {Schema: "mlpipeline", Name: "jobs"}}},
			{Name: "unknown", Engine: "postgresql", Schemas: []string{"appdb"}},
			{Name: "nothing-dumped", Engine: "mysql"},
		},
	}}
	c := Dumps{Client: fake.NewClientset(), dyn: dyn, Mapping: snapshot.Mapping{Namespaces: map[string]string{"kubeflow": "kf"}}}

	var restored snapshot.Report
	if err := c.Restore(context.Background(), r, &restored); err != nil {
		t.Fatal(err)
	}
	restored.Sort()
	want := []snapshot.ReportItem{
		{Kind: "databases", Status: snapshot.StatusFailed, Name: "kfp-mysql", Detail: "no deployment/mysql in namespace kf on the target"},
		{Kind: "databases", Status: snapshot.StatusFailed, Name: "unknown", Detail: "the backup's configuration does not say where database unknown runs"},
	}
	if len(restored.Items) != len(want) || restored.Items[0] != want[0] || restored.Items[1] != want[1] {
		t.Fatalf("restore report %+v\nwant %+v", restored.Items, want)
	}
	if restored.Counts["databases"][snapshot.StatusUnchanged] != 1 {
		t.Errorf("the database with nothing dumped is not counted: %v", restored.Counts)
	}

	var verified snapshot.Report
	if err := c.Verify(context.Background(), r, &verified); err != nil {
		t.Fatal(err)
	}
	verified.Sort()
	if len(verified.Items) != 2 || verified.Items[0].Name != "kfp-mysql" || verified.Items[0].Status != snapshot.StatusFailed ||
		!strings.HasPrefix(verified.Items[0].Detail, "cannot verify its 2 tables: no deployment/mysql") {
		t.Fatalf("verify report %+v", verified.Items)
	}
}
