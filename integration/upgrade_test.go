package integration

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/migrate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// upgradePair readies the sample platform's upgrade: blue runs release 1 with alice's and bob's
// profiles, their workspaces' files, the Pipelines database and bucket (served by the testbed's
// servers named after blue) and a PyTorchJob of alice's; green runs release 2, its database and
// MinIO served by servers of its own, with its own credentials.
func upgradePair(t *testing.T) (blue, green side) {
	t.Helper()
	ctx := context.Background()
	bc, gc := upgradeCluster(t, "upgrade-blue"), upgradeCluster(t, "upgrade-green")
	for _, name := range []string{bc.Name, gc.Name} {
		if err := tb.AddServers(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	if err := gc.ApplyStandardStorageClass(ctx); err != nil {
		t.Fatal(err)
	}
	v1, v2 := filepath.Join(repoDir(), "examples", "platform"), filepath.Join(repoDir(), "examples", "platform-v2")
	applyReleases(t, bc, []string{filepath.Join(v1, "00-crds.yaml"), filepath.Join(v1, "10-platform.yaml"), filepath.Join(v1, "20-profiles.yaml")},
		gc, []string{filepath.Join(v2, "00-crds.yaml"), filepath.Join(v2, "10-platform.yaml")})
	upgradeOnce.Do(func() { upgradeErr = seedUpgradeBlue(ctx, bc, gc) })
	if upgradeErr != nil {
		t.Fatal(upgradeErr)
	}
	_, bkc := clients(t, bc.Name)
	runningPod(t, bkc, "kubeflow", "app=mysql")
	runningPod(t, bkc, "kubeflow", "app=minio")
	if _, dyn, err := bc.Clients(); err != nil {
		t.Fatal(err)
	} else if _, err := dyn.Resource(pytorchJobs).Namespace("alice").Get(ctx, "train", metav1.GetOptions{}); apierrors.IsNotFound(err) {
		addPyTorchJob(t, bc, "alice", "train")
	}
	blue = side{name: bc.Name, cluster: bc, mariadb: tb.MariaDB[bc.Name], minio: tb.MinIO[bc.Name]}
	green = side{name: gc.Name, cluster: gc, mariadb: tb.MariaDB[gc.Name], minio: tb.MinIO[gc.Name]}
	return blue, green
}

// seedUpgradeBlue puts the data on blue (once per test run) and serves green's platform pods.
func seedUpgradeBlue(ctx context.Context, bc, gc *testbed.Cluster) error {
	if _, err := tb.SeedPlatform(ctx, bc, tb.DataDir); err != nil {
		return err
	}
	for _, claim := range [][2]string{{"alice", "workspace-alice-nb"}, {"bob", "workspace-bob-nb"}} {
		dir, err := tb.DataDir("upgrade-" + claim[1])
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
	upgradeOnce sync.Once
	upgradeErr  error
)

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

// TestMigrateUpgrade is the blue-green upgrade of the sample platform, release 1 on blue to
// release 2 on green (examples/platform, platform-v2): ferry migrate --upgrade refuses while a
// user's PyTorchJob has no place in release 2, naming it, and changes nothing; with --leave-behind
// it moves the state only. After it, green's release is exactly as installed (nothing of release 1
// leaked: no Training Operator, no PyTorchJob CRD, the AuthorizationPolicy CRD stored in v1), and
// the tenants' objects, their volumes' files, the database's rows and the bucket are on green, by
// the independent checker; the report has the upgrade's section.
func TestMigrateUpgrade(t *testing.T) {
	blue, green := upgradePair(t)
	url := backupMinIO(t, "migrate-upgrade")
	before := clusterState(t, green, upgradePlatformNamespaces)
	args := []string{"--storage", url, "migrate", "--upgrade", "--preset", "kubeflow", "--from", blue.name, "--to", green.name}

	code, out, errOut := runFerry(t, args...)
	if code != 3 || !strings.Contains(out+errOut, "PyTorchJob alice/train") || !strings.Contains(out+errOut, "--leave-behind pytorchjobs.kubeflow.org") {
		t.Fatalf("ferry migrate --upgrade with a PyTorchJob in alice exited %d, want 3 naming it\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if diffs := stateDiffs(before, clusterState(t, green, upgradePlatformNamespaces)); len(diffs) > 0 {
		t.Fatalf("the refused upgrade changed green: %s", strings.Join(diffs, "; "))
	}

	code, out, errOut = runFerry(t, append(args, "--leave-behind", "pytorchjobs.kubeflow.org", "-o", "json")...)
	if code != 0 {
		t.Fatalf("ferry migrate --upgrade --leave-behind exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	var rep migrate.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("the report is not JSON (%v): %s", err, out)
	}
	if rep.State != migrate.Shifted || rep.Upgrade == nil || !slices.Equal(rep.Upgrade.LeaveBehind, []string{"pytorchjobs.kubeflow.org"}) ||
		len(rep.Upgrade.Release.CRDsRemoved) != 1 || len(rep.Upgrade.Release.ComponentsAdded) != 1 {
		t.Fatalf("the report: state %s, upgrade %+v", rep.State, rep.Upgrade)
	}
	if v := rep.Verification; v == nil || v.Counts["objects"]["left"] == 0 || v.Counts["objects"]["identical"] == 0 || len(v.Items) > 0 {
		t.Errorf("the verification: %+v, want objects identical and left to the release, nothing listed", v)
	}

	// Green's release is as installed: everything of its namespaces and every cluster-scoped
	// object but the tenants' Namespaces and Profiles.
	after := clusterState(t, green, upgradePlatformNamespaces)
	for id := range after {
		if _, ok := before[id]; !ok && tenantObject(id) {
			delete(after, id)
		}
	}
	for _, d := range stateDiffs(before, after) {
		t.Errorf("green's release changed: %s", d)
	}
	for _, id := range []string{"apps/v1 Deployment kubeflow/training-operator", "apiextensions.k8s.io/v1 CustomResourceDefinition pytorchjobs.kubeflow.org",
		"rbac.authorization.k8s.io/v1 ClusterRole training-operator"} {
		if _, ok := after[id]; ok {
			t.Errorf("release 1's %s is on green", id)
		}
	}

	// The state is on green, by the independent checker: the tenants' namespaces (but the
	// PyTorchJob, left on blue), their files, the database and the bucket.
	scope := checkScope{namespaces: []string{"alice", "bob"}, claims: [][2]string{{"alice", "workspace-alice-nb"}, {"bob", "workspace-bob-nb"}},
		mysqlSchemas: []string{"mlpipeline", "cachedb"}, buckets: []string{testbed.PlatformBucket}}
	for _, d := range checkDifferences(t, blue, green, scope) {
		switch {
		case d == "type kubeflow.org/v1, Resource=pytorchjobs (1 objects on blue) is not served on green":
		case strings.HasPrefix(d, "object ") && !tenantObject(strings.SplitN(strings.TrimPrefix(d, "object "), ":", 2)[0]):
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
}

// tenantObject says whether an object ID of the checker names a tenant's object: in alice's or
// bob's namespace, or their Namespace or Profile.
func tenantObject(id string) bool {
	for _, tenant := range []string{"alice", "bob"} {
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
