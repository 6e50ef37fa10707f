package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/migrate"
	"github.com/ferrykube/ferry/snapshot"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// upgradePair readies an upgrade, once per test run: blue runs blueFiles (a release with its
// profiles), the platform's data (SeedPlatform, served by the testbed's servers named after
// blue), a file in each of claims and job, a user's PyTorchJob; green runs greenFiles (the next
// release without profiles), its database and MinIO served by servers of its own, with its own
// credentials.
func upgradePair(t *testing.T, blueName, greenName string, blueFiles, greenFiles []string, claims [][2]string, job [2]string) (blue, green side) {
	t.Helper()
	ctx := context.Background()
	bc, gc := upgradeCluster(t, blueName), upgradeCluster(t, greenName)
	for _, name := range []string{bc.Name, gc.Name} {
		if err := tb.AddServers(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	if err := gc.ApplyStandardStorageClass(ctx); err != nil {
		t.Fatal(err)
	}
	applyReleases(t, bc, blueFiles, gc, greenFiles)
	upgradeMu.Lock()
	defer upgradeMu.Unlock()
	if !upgradeSeeded[bc.Name] {
		if err := seedUpgradeBlue(ctx, bc, gc, claims); err != nil {
			t.Fatal(err)
		}
		upgradeSeeded[bc.Name] = true
	}
	_, bkc := clients(t, bc.Name)
	runningPod(t, bkc, "kubeflow", "app=mysql")
	runningPod(t, bkc, "kubeflow", "app=minio")
	ensurePyTorchJob(t, bc, job[0], job[1])
	return serversOf(bc), serversOf(gc)
}

// seedUpgradeBlue puts the data on blue (once per test run), a file in each of the tenants'
// claims, and serves green's platform pods.
func seedUpgradeBlue(ctx context.Context, bc, gc *testbed.Cluster, claims [][2]string) error {
	if _, err := tb.SeedPlatform(ctx, bc, tb.DataDir); err != nil {
		return err
	}
	for _, claim := range claims {
		dir, err := tb.DataDir(bc.Name + "-" + claim[1])
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dir, "notebooks"), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "notebooks", "train.ipynb"), []byte(`{"cells": ["`+claim[0]+`"]}`), 0o644); err != nil {
			return err
		}
		if err := bc.BindClaim(ctx, claim[0], claim[1], dir); err != nil {
			return err
		}
	}
	if err := tb.ServePlatform(ctx, gc, gc.Name); err != nil {
		return err
	}
	return tb.SetPlatformCredentials(ctx, gc, gc.Name)
}

var (
	upgradeMu sync.Mutex
	// upgradeSeeded are the blue clusters whose data seedUpgradeBlue put there.
	upgradeSeeded = map[string]bool{}
)

// upgradeClassMap is how the checker names blue's storage classes on green: the Kubeflow
// fixture's are mapped to the testbed's standard (--storage-class-map).
var upgradeClassMap = map[string]string{"gp3": "standard", "nfs-client": "standard"}

// upgradePlatformNamespaces are the namespaces of the sample platform's releases.
var upgradePlatformNamespaces = []string{"kubeflow", "kubeflow-system", "istio-system"}

// clusterState is every object of a cluster in namespaces, and every cluster-scoped one,
// normalized by the checker's rules, by "apiVersion Kind namespace/name".
func clusterState(t *testing.T, s side, namespaces []string) map[string]map[string]any {
	t.Helper()
	types, problems := listableTypes(t, s)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	_, dyn, err := s.cluster.Clients()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, lt := range types {
		objs, err := listObjects(context.Background(), dyn, lt, namespaces)
		if err != nil {
			t.Fatal(err)
		}
		for id, o := range objs {
			out[id] = normalize(o, checkScope{}, false)
		}
	}
	return out
}

// upgradeCase is an upgrade of one platform's release on blue to the next on green.
type upgradeCase struct {
	blue, green side
	// platform are the releases' namespaces; tenants the users' namespaces (and Profiles), claims
	// those of the tenants' claims that hold files.
	platform, tenants []string
	claims            [][2]string
	// job is the user's PyTorchJob (namespace, name), a kind green's release removed.
	job [2]string
	// flags are more flags of ferry migrate; removedCRDs how many CRDs green's release removed;
	// gone names objects of blue's release that must not be on green.
	flags       []string
	removedCRDs int
	gone        []string
	// carryBack goes on after the upgrade with writes on green carried back (carryBack).
	carryBack bool
}

// TestMigrateUpgrade is the blue-green upgrade of a platform: ferry migrate --upgrade refuses while
// a user's PyTorchJob has no place in green's release, naming it, and changes nothing; with
// --leave-behind it moves the state only. After it, green's release is exactly as installed
// (nothing of blue's leaked: no Training Operator, no PyTorchJob CRD, CRDs as green stores them),
// and the tenants' objects, their volumes' files, the database's rows and the bucket are on green,
// by the independent checker; the report has the upgrade's section. First with the sample's two
// releases (examples/platform, platform-v2), then, when FERRY_FIXTURES names the Kubeflow
// fixtures (make test-kubeflow; README.md, Notes on the testbed), with Kubeflow v1.10.2 and v1.11.0.
func TestMigrateUpgrade(t *testing.T) {
	testbed.Require(t, tb)
	// The last test of the upgrade clusters (TestPlanUpgrade runs before it).
	removeClustersAfter(t, "upgrade-blue", "upgrade-green", "kf110-blue", "kf111-green")
	t.Run("sample", func(t *testing.T) {
		v1, v2 := filepath.Join(repoDir(), "examples", "platform"), filepath.Join(repoDir(), "examples", "platform-v2")
		claims, job := [][2]string{{"alice", "workspace-alice-nb"}, {"bob", "workspace-bob-nb"}}, [2]string{"alice", "train"}
		blue, green := upgradePair(t, "upgrade-blue", "upgrade-green",
			[]string{filepath.Join(v1, "00-crds.yaml"), filepath.Join(v1, "10-platform.yaml"), filepath.Join(v1, "20-profiles.yaml")},
			[]string{filepath.Join(v2, "00-crds.yaml"), filepath.Join(v2, "10-platform.yaml")}, claims, job)
		upgradeCase{blue: blue, green: green, platform: upgradePlatformNamespaces, tenants: []string{"alice", "bob"},
			claims: claims, job: job, removedCRDs: 1, carryBack: true,
			gone: []string{"apps/v1 Deployment kubeflow/training-operator", "apiextensions.k8s.io/v1 CustomResourceDefinition pytorchjobs.kubeflow.org",
				"rbac.authorization.k8s.io/v1 ClusterRole training-operator"}}.run(t)
	})
	t.Run("kubeflow", func(t *testing.T) {
		older, newer, ok := kubeflowPair()
		if !ok {
			t.Skip("the Kubeflow fixtures v1.10.2 and v1.11.0: FERRY_FIXTURES does not name them (make test-kubeflow; README.md, Notes on the testbed)")
		}
		claims, job := [][2]string{{"kubeflow-user-example-com", "test-workspace"}}, [2]string{"ml-team-vision", "resnet-ddp"}
		blue, green := upgradePair(t, "kf110-blue", "kf111-green",
			[]string{filepath.Join(older, "crds.yaml"), filepath.Join(older, "platform.yaml"), filepath.Join(older, "profiles.yaml")},
			[]string{filepath.Join(newer, "crds.yaml"), filepath.Join(newer, "platform.yaml")}, claims, job)
		var gone []string
		for _, kind := range []string{"jax", "mpi", "paddle", "pytorch", "tf", "xgboost"} {
			gone = append(gone, "apiextensions.k8s.io/v1 CustomResourceDefinition "+kind+"jobs.kubeflow.org")
		}
		upgradeCase{blue: blue, green: green, platform: []string{"kubeflow", "kubeflow-system", "istio-system", "auth", "cert-manager", "knative-serving", "oauth2-proxy"},
			tenants: []string{"kubeflow-user-example-com", "ml-team-vision", "dkim-research"}, claims: claims, job: job, removedCRDs: 6, gone: append(gone, "apps/v1 Deployment kubeflow/training-operator"), carryBack: true,
			// Katib's database and the claims of the other notebooks are not served by the testbed.
			flags: []string{"--storage-class-map", "gp3=standard,nfs-client=standard", "--allow-skipped"}}.run(t)
	})
}

func serversOf(c *testbed.Cluster) side {
	return side{name: c.Name, cluster: c, mariadb: tb.MariaDB[c.Name], minio: tb.MinIO[c.Name]}
}

// ensurePyTorchJob puts a PyTorchJob on the cluster unless it is there.
func ensurePyTorchJob(t *testing.T, c *testbed.Cluster, namespace, name string) {
	t.Helper()
	_, dyn, err := c.Clients()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(testbed.PyTorchJobs).Namespace(namespace).Get(context.Background(), name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		addPyTorchJob(t, c, namespace, name)
	}
}

func (c upgradeCase) run(t *testing.T) {
	blue, green := c.blue, c.green
	url := backupMinIO(t, "migrate-upgrade-"+blue.name)
	before, blueBefore := clusterState(t, green, c.platform), clusterState(t, blue, c.platform)
	args := append([]string{"--storage", url, "migrate", "--upgrade", "--preset", "kubeflow", "--from", blue.name, "--to", green.name}, c.flags...)
	job := "PyTorchJob " + c.job[0] + "/" + c.job[1]

	code, out, errOut := runFerry(t, args...)
	if code != 3 || !strings.Contains(out+errOut, job) || !strings.Contains(out+errOut, "--leave-behind pytorchjobs.kubeflow.org") {
		t.Fatalf("ferry migrate --upgrade with %s exited %d, want 3 naming it\nstdout: %s\nstderr: %s", job, code, out, errOut)
	}
	if diffs := stateDiffs(before, clusterState(t, green, c.platform)); len(diffs) > 0 {
		t.Fatalf("the refused upgrade changed green: %s", strings.Join(diffs, "; "))
	}

	code, out, errOut = runFerry(t, append(args, "--leave-behind", "pytorchjobs.kubeflow.org", "-o", "json")...)
	wantEnded(t, url, runID(t, errOut), "ferry migrate --upgrade --leave-behind", code, out, errOut)
	var rep migrate.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("the report is not JSON (%v): %s", err, out)
	}
	if rep.State != migrate.Shifted || rep.Upgrade == nil || !slices.Equal(rep.Upgrade.LeaveBehind, []string{"pytorchjobs.kubeflow.org"}) ||
		len(rep.Upgrade.Release.CRDsRemoved) != c.removedCRDs || len(rep.Upgrade.Release.ComponentsAdded) == 0 {
		t.Fatalf("the report: state %s, upgrade %+v", rep.State, rep.Upgrade)
	}
	// Each database's schema after (green's at the shift; its release did not migrate it here)
	// is reported beside blue's before.
	if len(rep.Schemas) == 0 || rep.SchemasUnread != "" || slices.ContainsFunc(rep.Schemas, func(c snapshot.SchemaChange) bool { return !c.Unchanged() }) {
		t.Errorf("the report's schemas: %+v (%s), want each database's, unchanged", rep.Schemas, rep.SchemasUnread)
	}
	if v := rep.Verification; v == nil || v.Counts["objects"]["left"] == 0 || v.Counts["objects"]["identical"] == 0 || len(v.Items) > 0 {
		t.Errorf("the verification: %+v, want objects identical and left to the release, nothing listed", v)
	}

	// Green's release is as installed: everything of its namespaces and every cluster-scoped
	// object but the tenants' Namespaces and Profiles.
	after := clusterState(t, green, c.platform)
	for id := range after {
		if _, ok := before[id]; !ok && c.tenantObject(id) {
			delete(after, id)
		}
	}
	for _, d := range stateDiffs(before, after) {
		t.Errorf("green's release changed: %s", d)
	}
	for _, id := range c.gone {
		if _, ok := after[id]; ok {
			t.Errorf("blue's release's %s is on green", id)
		}
	}

	// The state is on green, by the independent checker: the tenants' namespaces (but the
	// PyTorchJob, left on blue), their files, the database and the bucket.
	scope := checkScope{namespaces: c.tenants, claims: c.claims, mysqlSchemas: []string{"mlpipeline", "cachedb"}, buckets: []string{testbed.PlatformBucket},
		storageClassMap: upgradeClassMap}
	for _, d := range checkDifferences(t, blue, green, scope) {
		switch {
		case d == "type kubeflow.org/v1, Resource=pytorchjobs (1 objects on blue) is not served on green":
		case strings.HasPrefix(d, "object ") && !c.tenantObject(strings.SplitN(strings.TrimPrefix(d, "object "), ":", 2)[0]):
			// Cluster-scoped objects of the releases, which differ by design.
		case allowedBy(d) != nil:
		default:
			t.Errorf("after the upgrade: %s", d)
		}
	}
	// Green's release's writers were stopped while blue's data loaded (the journal says so) and
	// run again as they were (the release unchanged, above).
	var rec struct {
		GreenStopped []migrate.QuiesceItem `json:"greenStopped"`
	}
	if e, ok := journal(t, url, rep.Run).Last(migrate.Quiesced, migrate.Done, 0); !ok || json.Unmarshal(e.Data, &rec) != nil ||
		!slices.ContainsFunc(rec.GreenStopped, func(i migrate.QuiesceItem) bool { return i.Namespace == "kubeflow" && i.Name == "ml-pipeline" }) {
		t.Errorf("the quiesce step did not stop green's ml-pipeline: %+v", rec.GreenStopped)
	}
	if c.carryBack && !t.Failed() {
		c.carryBackAfter(t, url, rep.Run, blueBefore)
	}
}

// carryBackAfter is the rollback of an upgrade that took writes: green's release migrates the
// database's schema (as release 2's MySQL does on its first start: its ConfigMap's migrate.sql),
// then green takes writes (a row, a file, a bucket object, a ConfigMap and a TrainJob, a kind
// only release 2 has), and ferry rollback --carry-back brings them to blue: blue's rows equal
// green's on the columns both schemas have, blue's schema and release are as before the upgrade,
// and the TrainJob is listed and stays on green.
func (c upgradeCase) carryBackAfter(t *testing.T, url, run string, blueBefore map[string]map[string]any) {
	ctx := context.Background()
	blue, green := c.blue, c.green
	gkc, gdyn, err := green.cluster.Clients()
	if err != nil {
		t.Fatal(err)
	}
	// The sample's release 2 declares its migration; for the Kubeflow fixtures, the same change
	// stands for KFP's own.
	migrateSQL := sampleMigration
	if cm, err := gkc.CoreV1().ConfigMaps("kubeflow").Get(ctx, "mlpipeline-schema-migration", metav1.GetOptions{}); err == nil {
		migrateSQL = cm.Data["migrate.sql"]
	} else if !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	blueSchema := mysqlColumns(t, blue)
	if _, err := green.mariadb.SQL(ctx, tb.Bins, migrateSQL+`
INSERT INTO mlpipeline.run_details (id, name, score, state) VALUES (9001, 'green-run', 0.5, 'RUNNING');
UPDATE mlpipeline.run_details SET score = 1.25 WHERE id = 7;
DELETE FROM mlpipeline.run_details WHERE id = 8;
INSERT INTO mlpipeline.run_metrics VALUES (9001, 'loss', 0.1);`); err != nil {
		t.Fatal(err)
	}
	tenant := c.claims[0][0]
	if _, err := gkc.CoreV1().ConfigMaps(tenant).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "written-on-green"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	trainJob := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
		"metadata": map[string]any{"name": "green-only", "namespace": tenant}, "spec": map[string]any{"runtimeRef": map[string]any{"name": "torch-distributed"}}}}
	if _, err := gdyn.Resource(schema.GroupVersionResource{Group: "trainer.kubeflow.org", Version: "v1alpha1", Resource: "trainjobs"}).Namespace(tenant).Create(ctx, trainJob, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := writeClaimFile(ctx, green, c.claims[0], "written-on-green.txt"); err != nil {
		t.Fatal(err)
	}
	if _, err := green.minio.S3Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(testbed.PlatformBucket), Key: aws.String("written-on-green"),
		Body: strings.NewReader("green")}); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := runFerry(t, "--storage", url, "rollback", "--run", run, "--carry-back", "-o", "json")
	if code != 0 {
		t.Fatalf("ferry rollback --carry-back after the upgrade exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	var rep migrate.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("the report is not JSON (%v): %s", err, out)
	}
	if cb := rep.CarryBack; cb == nil || cb.Moved == nil || !slices.ContainsFunc(cb.Moved.Items, func(i snapshot.ReportItem) bool {
		return i.Status == snapshot.StatusLeft && strings.Contains(i.Name, "TrainJob "+tenant+"/green-only")
	}) {
		t.Errorf("the carry-back does not list the TrainJob left on green: %+v", rep.CarryBack)
	}
	// The report shows what green's release migrated: the schema of green's backup beside blue's.
	if !slices.ContainsFunc(rep.Schemas, func(c snapshot.SchemaChange) bool {
		return slices.Contains(c.Columns, snapshot.ColumnChange{Table: "mlpipeline.run_details", Column: "state", After: "varchar(32)"})
	}) {
		t.Errorf("the report's schemas after the carry-back: %+v, want run_details.state added", rep.Schemas)
	}
	// Blue's schema is as it was; its rows are green's on the columns both have.
	if got := mysqlColumns(t, blue); !maps.Equal(got, blueSchema) {
		t.Errorf("blue's schema changed: %v, was %v", got, blueSchema)
	}
	shared := func(s side) string {
		out, err := s.mariadb.SQL(ctx, tb.Bins, "SELECT id, name, score FROM mlpipeline.run_details ORDER BY id")
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if b, g := shared(blue), shared(green); b != g || !strings.Contains(b, "green-run") {
		t.Errorf("blue's run_details differ from green's on the shared columns (%d and %d bytes)", len(b), len(g))
	}
	// The tenants' objects, files and bucket are green's; blue's release is as before the upgrade.
	scope := checkScope{namespaces: c.tenants, claims: c.claims, buckets: []string{testbed.PlatformBucket}, storageClassMap: upgradeClassMap}
	for _, d := range checkDifferences(t, blue, green, scope) {
		switch {
		case strings.Contains(d, "pytorchjobs") || strings.Contains(d, "trainjobs") || strings.Contains(d, "TrainJob "+tenant+"/green-only"):
			// Each release's own kind stays where it is.
		case strings.HasPrefix(d, "object ") && !c.tenantObject(strings.SplitN(strings.TrimPrefix(d, "object "), ":", 2)[0]):
		case allowedBy(d) != nil:
		default:
			t.Errorf("after the carry-back: %s", d)
		}
	}
	after := clusterState(t, blue, c.platform)
	for id := range after {
		if _, ok := blueBefore[id]; !ok && c.tenantObject(id) {
			delete(after, id)
		}
	}
	for _, d := range stateDiffs(blueBefore, after) {
		t.Errorf("blue's release changed: %s", d)
	}
}

// sampleMigration is the schema migration of the sample's release 2 (examples/platform-v2's
// ConfigMap mlpipeline-schema-migration).
const sampleMigration = `CREATE TABLE IF NOT EXISTS mlpipeline.schema_version (version INT NOT NULL PRIMARY KEY);
ALTER TABLE mlpipeline.run_details ADD COLUMN state VARCHAR(32) NOT NULL DEFAULT 'SUCCEEDED';
CREATE TABLE IF NOT EXISTS mlpipeline.run_metrics (run_id INT NOT NULL, name VARCHAR(64) NOT NULL, value DOUBLE, PRIMARY KEY (run_id, name));
REPLACE INTO mlpipeline.schema_version (version) VALUES (2);`

// mysqlColumns lists the columns of the mlpipeline schema of a side's MariaDB: "table.column type".
func mysqlColumns(t *testing.T, s side) map[string]bool {
	t.Helper()
	out, err := s.mariadb.SQL(context.Background(), tb.Bins, "SELECT CONCAT(table_name, '.', column_name, ' ', column_type) FROM information_schema.columns WHERE table_schema = 'mlpipeline'")
	if err != nil {
		t.Fatal(err)
	}
	cols := map[string]bool{}
	for _, line := range strings.Fields(strings.ReplaceAll(out, " ", "_")) {
		cols[line] = true
	}
	return cols
}

// writeClaimFile writes a file into a claim of a side, in the folder its volume is.
func writeClaimFile(ctx context.Context, s side, claim [2]string, name string) error {
	kc, _, err := s.cluster.Clients()
	if err != nil {
		return err
	}
	pvc, err := kc.CoreV1().PersistentVolumeClaims(claim[0]).Get(ctx, claim[1], metav1.GetOptions{})
	if err != nil {
		return err
	}
	pv, err := kc.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if pv.Spec.HostPath == nil {
		return fmt.Errorf("volume %s of %s/%s is not a host path", pv.Name, claim[0], claim[1])
	}
	return os.WriteFile(filepath.Join(pv.Spec.HostPath.Path, name), []byte("written on "+s.name), 0o644)
}

// tenantObject says whether an object ID of the checker names a tenant's object: in a tenant's
// namespace, or its Namespace or Profile.
func (c upgradeCase) tenantObject(id string) bool {
	for _, tenant := range c.tenants {
		if strings.Contains(id, " "+tenant+"/") || strings.HasSuffix(id, " Namespace "+tenant) || strings.HasSuffix(id, " Profile "+tenant) {
			return true
		}
	}
	return false
}

// stateDiffs lists what differs between two clusterStates.
func stateDiffs(before, after map[string]map[string]any) []string {
	var diffs []string
	for _, id := range slices.Sorted(maps.Keys(joinKeys(before, after))) {
		b, inBefore := before[id]
		a, inAfter := after[id]
		switch {
		case !inAfter:
			diffs = append(diffs, id+": gone")
		case !inBefore:
			diffs = append(diffs, id+": new")
		default:
			for _, d := range diffValues("", b, a, strings.Contains(id, " Secret ")) {
				diffs = append(diffs, id+": "+d)
			}
		}
	}
	return diffs
}
