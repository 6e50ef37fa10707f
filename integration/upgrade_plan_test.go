package integration

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/plans"
	"golang.org/x/sync/errgroup"
)

// kubeflowPair is the fixtures' two Kubeflow releases, when FERRY_FIXTURES names them: v1.10.2
// (blue) and v1.11.0 (green).
func kubeflowPair() (older, newer string, ok bool) {
	dirs, ok := kubeflowFixtures("kubeflow-1.10", "kubeflow")
	if !ok {
		return "", "", false
	}
	return dirs[0], dirs[1], true
}

// upgradeCluster is a cluster of its own for a test, made once per test run: an upgrade needs a
// blue and a green that run two releases of a platform, which the shared clusters do not.
func upgradeCluster(t *testing.T, name string) *testbed.Cluster {
	t.Helper()
	testbed.Require(t, tb)
	if c, ok := tb.Clusters[name]; ok {
		return c
	}
	c, err := tb.AddCluster(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// applyReleases applies blue's and green's manifests, both at once: the Kubeflow fixtures' CRDs
// take their API servers a while.
func applyReleases(t *testing.T, blue *testbed.Cluster, blueFiles []string, green *testbed.Cluster, greenFiles []string) {
	t.Helper()
	var g errgroup.Group
	g.Go(func() error { return blue.Apply(context.Background(), io.Discard, blueFiles...) })
	g.Go(func() error { return green.Apply(context.Background(), io.Discard, greenFiles...) })
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// upgradePlan runs ferry plan --upgrade -o json and reads the plan it prints.
func upgradePlan(t *testing.T, args ...string) (int, *plans.Plan, string) {
	t.Helper()
	code, out, errOut := runFerry(t, append([]string{"plan", "--upgrade", "--preset", "kubeflow", "-o", "json"}, args...)...)
	if code != 0 && code != 3 {
		t.Fatalf("ferry plan --upgrade %v exited %d: %s", args, code, errOut)
	}
	var p plans.Plan
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("ferry plan --upgrade -o json printed no plan (%v): %s", err, out)
	}
	if p.Upgrade == nil {
		t.Fatalf("the plan has no upgrade section: %s", out)
	}
	return code, &p, errOut
}

// checkSides asserts that every planned object of blue is on one side, once, and that the tenants'
// namespaces move and the release's namespaces stay.
func checkSides(t *testing.T, p *plans.Plan, moving, left []string) {
	t.Helper()
	planned, sorted := 0, 0
	for _, r := range p.Resources {
		planned += r.Count
	}
	for _, items := range [][]plans.SideItem{p.Upgrade.Moves, p.Upgrade.LeftToRelease} {
		for _, i := range items {
			sorted += i.Objects
		}
	}
	if planned != sorted || planned == 0 {
		t.Errorf("the plan moves %d objects, its sides hold %d", planned, sorted)
	}
	whole := func(items []plans.SideItem, ns string) bool {
		return slices.ContainsFunc(items, func(i plans.SideItem) bool { return i.Namespace == ns && i.Resource == "" && i.Objects > 0 })
	}
	for _, ns := range moving {
		if !whole(p.Upgrade.Moves, ns) || slices.ContainsFunc(p.Upgrade.LeftToRelease, func(i plans.SideItem) bool { return i.Namespace == ns }) {
			t.Errorf("namespace %s does not move whole: moves %+v", ns, p.Upgrade.Moves)
		}
	}
	for _, ns := range left {
		if !whole(p.Upgrade.LeftToRelease, ns) {
			t.Errorf("namespace %s is not left to green's release: %+v", ns, p.Upgrade.LeftToRelease)
		}
	}
	if !slices.ContainsFunc(p.Upgrade.LeftToRelease, func(i plans.SideItem) bool {
		return i.Resource == "customresourcedefinitions.apiextensions.k8s.io" && i.Namespace == ""
	}) {
		t.Errorf("blue's CRDs are not left to green's release: %+v", p.Upgrade.LeftToRelease)
	}
	if !slices.ContainsFunc(p.Upgrade.Moves, func(i plans.SideItem) bool { return i.Resource == "profiles.kubeflow.org" }) {
		t.Errorf("the Profiles do not move: %+v", p.Upgrade.Moves)
	}
	for _, o := range [][2]string{{"persistentvolumeclaims", "mysql-pv-claim"}, {"persistentvolumeclaims", "minio-pvc"}, {"secrets", "mysql-secret"}, {"secrets", "mlpipeline-minio-artifact"}} {
		if !slices.ContainsFunc(p.Upgrade.Moves, func(i plans.SideItem) bool {
			return i.Namespace == "kubeflow" && i.Resource == o[0] && i.Name == o[1] && i.Objects == 1
		}) {
			t.Errorf("kubeflow %s/%s does not move out of the release's namespace: %+v", o[0], o[1], p.Upgrade.Moves)
		}
	}
}

func crdChange(changes []plans.CRDChange, name string) (plans.CRDChange, bool) {
	i := slices.IndexFunc(changes, func(c plans.CRDChange) bool { return c.Name == name })
	if i < 0 {
		return plans.CRDChange{}, false
	}
	return changes[i], true
}

func imageChange(changes []plans.ImageChange, namespace, name, container string) (plans.ImageChange, bool) {
	i := slices.IndexFunc(changes, func(c plans.ImageChange) bool {
		return c.Namespace == namespace && c.Name == name && c.Container == container
	})
	if i < 0 {
		return plans.ImageChange{}, false
	}
	return changes[i], true
}

// addPyTorchJob puts a PyTorchJob on the cluster: a user's training job of release 1.
func addPyTorchJob(t *testing.T, c *testbed.Cluster, namespace, name string) {
	t.Helper()
	if err := c.AddPyTorchJob(context.Background(), namespace, name); err != nil {
		t.Fatal(err)
	}
}

// TestPlanUpgrade plans upgrades: blue runs a platform's release with its users' profiles, green
// the next release without them. ferry plan --upgrade lists what moves (the tenants' namespaces,
// the Profiles, the database's and MinIO's claims and Secrets), what is left to green's release,
// and the releases' differences: the removed CRD, the storage-version change, the added
// component and namespace, the changed images. A custom resource of the removed kind in a tenant's
// namespace blocks it (exit 3), named, until --leave-behind names its CRD; one in the release's
// namespace does not. First with the sample's two releases (examples/platform, platform-v2),
// then, when FERRY_FIXTURES names the Kubeflow fixtures (make test-kubeflow; README.md, Notes on
// the testbed), with Kubeflow v1.10.2 and v1.11.0.
func TestPlanUpgrade(t *testing.T) {
	t.Run("sample", func(t *testing.T) {
		ctx := context.Background()
		blue, green := upgradeCluster(t, "upgrade-blue"), upgradeCluster(t, "upgrade-green")
		if err := green.ApplyStandardStorageClass(ctx); err != nil {
			t.Fatal(err)
		}
		v1, v2 := filepath.Join(repoDir(), "examples", "platform"), filepath.Join(repoDir(), "examples", "platform-v2")
		applyReleases(t, blue, []string{filepath.Join(v1, "00-crds.yaml"), filepath.Join(v1, "10-platform.yaml"), filepath.Join(v1, "20-profiles.yaml")},
			green, []string{filepath.Join(v2, "00-crds.yaml"), filepath.Join(v2, "10-platform.yaml")})
		// The tenants' objects are the same in both releases.
		profiles1, err1 := os.ReadFile(filepath.Join(v1, "20-profiles.yaml"))
		profiles2, err2 := os.ReadFile(filepath.Join(v2, "20-profiles.yaml"))
		if err1 != nil || err2 != nil || string(profiles1) != string(profiles2) {
			t.Errorf("the releases' profiles differ (%v, %v)", err1, err2)
		}

		code, p, errOut := upgradePlan(t, "--from", "upgrade-blue", "--to", "upgrade-green")
		if code != 0 || len(p.Blocking()) > 0 {
			t.Fatalf("ferry plan --upgrade exited %d with blocking findings %+v: %s", code, p.Blocking(), errOut)
		}
		checkSides(t, p, []string{"alice", "bob"}, []string{"istio-system"})
		if !slices.ContainsFunc(p.Upgrade.LeftToRelease, func(i plans.SideItem) bool { return i.Namespace == "kubeflow" && i.Resource == "" }) {
			t.Errorf("the rest of kubeflow is not left to green's release: %+v", p.Upgrade.LeftToRelease)
		}
		d := p.Upgrade.Release
		if c, ok := crdChange(d.CRDsRemoved, "pytorchjobs.kubeflow.org"); !ok || len(d.CRDsRemoved) != 1 || c.Kind != "PyTorchJob" {
			t.Errorf("removed CRDs: %+v, want pytorchjobs.kubeflow.org", d.CRDsRemoved)
		}
		if _, ok := crdChange(d.CRDsAdded, "trainjobs.trainer.kubeflow.org"); !ok || len(d.CRDsAdded) != 1 {
			t.Errorf("added CRDs: %+v, want trainjobs.trainer.kubeflow.org", d.CRDsAdded)
		}
		if c, ok := crdChange(d.CRDsChanged, "authorizationpolicies.security.istio.io"); !ok || len(d.CRDsChanged) != 1 ||
			c.BlueStorage != "v1beta1" || c.GreenStorage != "v1" || !slices.Equal(c.BlueServed, c.GreenServed) {
			t.Errorf("CRDs with version changes: %+v, want authorizationpolicies stored in v1 instead of v1beta1", d.CRDsChanged)
		}
		if !slices.Equal(d.NamespacesAdded, []string{"kubeflow-system"}) || len(d.NamespacesRemoved) != 0 {
			t.Errorf("namespaces added %v, removed %v; want kubeflow-system added", d.NamespacesAdded, d.NamespacesRemoved)
		}
		if !slices.Equal(d.ComponentsAdded, []plans.ComponentRef{{Kind: "Deployment", Namespace: "kubeflow-system", Name: "kubeflow-trainer-controller-manager"}}) ||
			!slices.Equal(d.ComponentsRemoved, []plans.ComponentRef{{Kind: "Deployment", Namespace: "kubeflow", Name: "training-operator"}}) {
			t.Errorf("components added %v, removed %v", d.ComponentsAdded, d.ComponentsRemoved)
		}
		if c, ok := imageChange(d.ImagesChanged, "kubeflow", "mysql", "mysql"); !ok || c.Blue != "gcr.io/ml-pipeline/mysql:8.0.26" || c.Green != "mysql:8.4" || len(d.ImagesChanged) != 3 {
			t.Errorf("image changes: %+v, want mysql's, ml-pipeline's and istiod's", d.ImagesChanged)
		}

		// A user's PyTorchJob is state whose kind green lacks: it blocks, by name; one in the
		// release's namespace goes with blue's release and does not.
		addPyTorchJob(t, blue, "alice", "train")
		addPyTorchJob(t, blue, "kubeflow", "smoke-test")
		code, out, errOut := runFerry(t, "plan", "--upgrade", "--preset", "kubeflow", "--from", "upgrade-blue", "--to", "upgrade-green")
		if code != 3 || !strings.Contains(errOut, "PyTorchJob alice/train") {
			t.Fatalf("with a PyTorchJob in alice, ferry plan --upgrade exited %d; stderr: %s", code, errOut)
		}
		for _, pattern := range []string{
			`blocking\s+PyTorchJob alice/train\s+.*--leave-behind pytorchjobs\.kubeflow\.org`,
			`pytorchjobs\.kubeflow\.org\s+removed\s+v1 → -\s+v1 → -\s+2 PyTorchJob on upgrade-blue, 1 of them state`,
			`authorizationpolicies\.security\.istio\.io\s+versions\s+v1,v1beta1 → v1,v1beta1\s+v1beta1 → v1`,
			`Deployment kubeflow-system/kubeflow-trainer-controller-manager\s+only on upgrade-green`,
			`Deployment kubeflow/mysql\s+mysql\s+gcr\.io/ml-pipeline/mysql:8\.0\.26\s+mysql:8\.4`,
			`namespace alice\s+\d+\s+namespace of tenant alice`,
		} {
			if !regexpLine(out, pattern) {
				t.Errorf("the summary has no line like %q:\n%s", pattern, out)
			}
		}
		if strings.Contains(out, "smoke-test") {
			t.Errorf("the PyTorchJob in the release's namespace is named:\n%s", out)
		}

		code, p, errOut = upgradePlan(t, "--from", "upgrade-blue", "--to", "upgrade-green", "--leave-behind", "pytorchjobs.kubeflow.org")
		if code != 0 || len(p.Blocking()) > 0 {
			t.Fatalf("with --leave-behind, ferry plan --upgrade exited %d, blocking %+v: %s", code, p.Blocking(), errOut)
		}
		if !slices.Equal(p.Upgrade.LeaveBehind, []string{"pytorchjobs.kubeflow.org"}) ||
			!slices.Equal(p.Upgrade.Stranded, []plans.StrandedObject{{CRD: "pytorchjobs.kubeflow.org", Kind: "PyTorchJob", Namespace: "alice", Name: "train", LeftBehind: true}}) {
			t.Errorf("left behind %v, stranded %+v", p.Upgrade.LeaveBehind, p.Upgrade.Stranded)
		}
		if !slices.ContainsFunc(p.Findings, func(f plans.Finding) bool {
			return f.Severity == plans.Warning && f.Subject == "PyTorchJob alice/train"
		}) {
			t.Errorf("the PyTorchJob left behind is not a warning: %+v", p.Findings)
		}

		code, _, errOut = runFerry(t, "plan", "--upgrade", "--preset", "kubeflow", "--from", "upgrade-blue", "--to", "upgrade-green", "--leave-behind", "trainjobs.trainer.kubeflow.org")
		if code != 2 || !strings.Contains(errOut, "--leave-behind trainjobs.trainer.kubeflow.org") || !strings.Contains(errOut, "pytorchjobs.kubeflow.org") {
			t.Errorf("--leave-behind of a CRD green has: exit %d, %s; want 2 naming it and the removed ones", code, errOut)
		}
	})

	t.Run("kubeflow", func(t *testing.T) {
		older, newer, ok := kubeflowPair()
		if !ok {
			t.Skip("the Kubeflow fixtures v1.10.2 and v1.11.0: FERRY_FIXTURES does not name them (make test-kubeflow; README.md, Notes on the testbed)")
		}
		ctx := context.Background()
		blue, green := upgradeCluster(t, "kf110-blue"), upgradeCluster(t, "kf111-green")
		if err := green.ApplyStandardStorageClass(ctx); err != nil {
			t.Fatal(err)
		}
		applyReleases(t, blue, []string{filepath.Join(older, "crds.yaml"), filepath.Join(older, "platform.yaml"), filepath.Join(older, "profiles.yaml")},
			green, []string{filepath.Join(newer, "crds.yaml"), filepath.Join(newer, "platform.yaml")})
		args := []string{"--from", "kf110-blue", "--to", "kf111-green", "--storage-class-map", "gp3=standard,nfs-client=standard"}
		code, p, errOut := upgradePlan(t, args...)
		if code != 0 {
			t.Fatalf("ferry plan --upgrade exited %d, blocking %+v: %s", code, p.Blocking(), errOut)
		}
		tenants := []string{"kubeflow-user-example-com", "ml-team-vision", "dkim-research"}
		checkSides(t, p, tenants, []string{"istio-system", "auth", "cert-manager", "knative-serving", "oauth2-proxy"})

		// The README's "Upgrade to v1.11.0": the Training Operator's six CRDs removed, ten Istio
		// CRDs stored in v1 instead of v1beta1, kubeflow-system added, KFP's MySQL 8.0.26 → 8.4.
		d := p.Upgrade.Release
		var removed []string
		for _, c := range d.CRDsRemoved {
			removed = append(removed, c.Name)
		}
		want := []string{"jaxjobs.kubeflow.org", "mpijobs.kubeflow.org", "paddlejobs.kubeflow.org", "pytorchjobs.kubeflow.org", "tfjobs.kubeflow.org", "xgboostjobs.kubeflow.org"}
		if !slices.Equal(removed, want) {
			t.Errorf("removed CRDs %v, want %v", removed, want)
		}
		if len(d.CRDsAdded) != 5 {
			t.Errorf("added CRDs %+v, want the README's 5", d.CRDsAdded)
		}
		storage := 0
		for _, c := range d.CRDsChanged {
			if strings.HasSuffix(c.Name, ".istio.io") && c.BlueStorage == "v1beta1" && c.GreenStorage == "v1" && slices.Equal(c.BlueServed, c.GreenServed) {
				storage++
			}
		}
		if storage != 10 || len(d.CRDsChanged) != 10 {
			t.Errorf("%d Istio CRDs move their storage version from v1beta1 to v1 of %d changed, want 10 of 10: %+v", storage, len(d.CRDsChanged), d.CRDsChanged)
		}
		if !slices.Equal(d.NamespacesAdded, []string{"kubeflow-system"}) {
			t.Errorf("namespaces added %v, want kubeflow-system", d.NamespacesAdded)
		}
		for _, name := range []string{"jobset-controller-manager", "kubeflow-trainer-controller-manager"} {
			if !slices.Contains(d.ComponentsAdded, plans.ComponentRef{Kind: "Deployment", Namespace: "kubeflow-system", Name: name}) {
				t.Errorf("Deployment kubeflow-system/%s is not among the components added: %v", name, d.ComponentsAdded)
			}
		}
		if !slices.Equal(d.ComponentsRemoved, []plans.ComponentRef{{Kind: "Deployment", Namespace: "kubeflow", Name: "training-operator"}}) {
			t.Errorf("components removed %v, want the training operator", d.ComponentsRemoved)
		}
		if c, ok := imageChange(d.ImagesChanged, "kubeflow", "mysql", "mysql"); !ok || c.Blue != "gcr.io/ml-pipeline/mysql:8.0.26" || c.Green != "mysql:8.4" {
			t.Errorf("KFP's MySQL: %+v (found %v), want gcr.io/ml-pipeline/mysql:8.0.26 → mysql:8.4", c, ok)
		}

		addPyTorchJob(t, blue, "ml-team-vision", "resnet-ddp")
		code, out, errOut := runFerry(t, append([]string{"plan", "--upgrade", "--preset", "kubeflow"}, args...)...)
		if code != 3 || !regexpLine(out, `blocking\s+PyTorchJob ml-team-vision/resnet-ddp\s+.*--leave-behind pytorchjobs\.kubeflow\.org`) {
			t.Fatalf("with a PyTorchJob in ml-team-vision, ferry plan --upgrade exited %d; stdout:\n%s\nstderr: %s", code, out, errOut)
		}
	})
}
