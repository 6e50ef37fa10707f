package integration

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
)

// repoDir is the repository's top folder.
func repoDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// fixturesEnv names the folder of the Kubeflow fixtures (kubeflow, kubeflow-1.10) the tests use
// instead of the sample platform. Unset, as in `make test`, the tests run on the repository's
// samples alone, so that a run takes the same time wherever the checkout sits; `make
// test-kubeflow` sets it.
const fixturesEnv = "FERRY_FIXTURES"

// kubeflowFixtures returns the fixtures' release folders named, when FERRY_FIXTURES is set and each
// holds a platform.yaml.
func kubeflowFixtures(releases ...string) ([]string, bool) {
	root := os.Getenv(fixturesEnv)
	if root == "" {
		return nil, false
	}
	var dirs []string
	for _, release := range releases {
		dir := filepath.Join(root, release)
		if _, err := os.Stat(filepath.Join(dir, "platform.yaml")); err != nil {
			return nil, false
		}
		dirs = append(dirs, dir)
	}
	return dirs, true
}

// kubeflowFixture is the Kubeflow v1.11.0 fixture, when FERRY_FIXTURES names it.
func kubeflowFixture() (string, bool) {
	dirs, ok := kubeflowFixtures("kubeflow")
	if !ok {
		return "", false
	}
	return dirs[0], true
}

var platformOnce sync.Once
var platformErr error

// applyPlatform puts the Kubeflow fixture (or, without it, the sample platform) and an admission
// webhook on blue, once per test run.
func applyPlatform(t testing.TB) (fixture bool) {
	t.Helper()
	blue := testbed.Require(t, tb).Clusters["blue"]
	dir, fixture := kubeflowFixture()
	platformOnce.Do(func() {
		files := []string{filepath.Join(dir, "crds.yaml"), filepath.Join(dir, "platform.yaml"), filepath.Join(dir, "profiles.yaml")}
		if !fixture {
			sample := filepath.Join(repoDir(), "examples", "platform")
			files = []string{filepath.Join(sample, "00-crds.yaml"), filepath.Join(sample, "10-platform.yaml"), filepath.Join(sample, "20-profiles.yaml")}
		}
		files = append(files, filepath.Join(repoDir(), "integration", "testdata", "webhook.yaml"))
		platformErr = blue.Apply(context.Background(), io.Discard, files...)
	})
	if platformErr != nil {
		t.Fatal(platformErr)
	}
	return fixture
}

func planClients(t testing.TB, cluster string) (plans.Clients, *dynamic.DynamicClient, *discovery.DiscoveryClient) {
	t.Helper()
	cfg, err := testbed.Require(t, tb).Clusters[cluster].RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	dc := discovery.NewDiscoveryClientForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	return plans.Clients{Discovery: dc, Dynamic: dyn}, dyn, dc
}

func TestPlanOfKubeflowOnBlue(t *testing.T) {
	fixture := applyPlatform(t)
	cl, dyn, dc := planClients(t, "blue")
	ctx := context.Background()
	preset, err := config.LoadPreset("kubeflow")
	if err != nil {
		t.Fatal(err)
	}
	p, err := plans.Inventory(ctx, cl, plans.Options{Config: preset.Merge(testbedConfig(t)).Planning, Context: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	position := map[string]int{}
	planned := map[string]int{}
	for i, r := range p.Resources {
		position[r.GroupResource()] = i
		planned[r.GroupResource()] = r.Count
	}
	excluded := map[string]int{}
	for _, e := range p.Excluded {
		if e.Reason == "" {
			t.Errorf("exclusion without a reason: %+v", e)
		}
		excluded[e.Resource] += e.Count
	}

	// Counts: what the plan moves plus what it leaves out is what the API server lists, per type,
	// checked with plain dynamic-client LISTs.
	lists, err := dc.ServerPreferredResources()
	if err != nil {
		t.Fatal(err)
	}
	kindOf := map[schema.GroupKind]string{}
	var all []unstructured.Unstructured
	for _, l := range lists {
		gv, _ := schema.ParseGroupVersion(l.GroupVersion)
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") || !slices.Contains(r.Verbs, "create") {
				continue
			}
			gr := r.Name
			if gv.Group != "" {
				gr += "." + gv.Group
			}
			kindOf[schema.GroupKind{Group: gv.Group, Kind: r.Kind}] = gr
			list, err := dyn.Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatalf("list %s: %v", gr, err)
			}
			if got := planned[gr] + excluded[gr]; got != len(list.Items) {
				t.Errorf("%s: plan moves %d and excludes %d (= %d), the API server lists %d", gr, planned[gr], excluded[gr], got, len(list.Items))
			}
			if planned[gr] > 0 {
				all = append(all, list.Items...)
			}
		}
	}
	for _, want := range []string{"nodes", "events", "leases.coordination.k8s.io", "endpoints"} {
		if excluded[want] == 0 {
			t.Errorf("%s are not recorded as excluded", want)
		}
	}
	if fixture {
		// The release's parts in kube-system move (the preset names them); the rest stays.
		for gr, want := range map[string]int{"daemonsets.apps": 1, "serviceaccounts": 1, "configmaps": 1, "roles.rbac.authorization.k8s.io": 2, "rolebindings.rbac.authorization.k8s.io": 2} {
			for _, r := range p.Resources {
				if r.GroupResource() == gr && r.Namespaces["kube-system"].Count != want {
					t.Errorf("the plan moves %d %s of kube-system, want the release's %d", r.Namespaces["kube-system"].Count, gr, want)
				}
			}
		}
	}
	if !slices.ContainsFunc(p.Excluded, func(e plans.Exclusion) bool {
		return e.Resource == "configmaps" && e.Name == "kube-root-ca.crt" && e.Namespace == "kubeflow"
	}) {
		t.Error("kubeflow/kube-root-ca.crt is not recorded as excluded with its name")
	}

	// Order.
	crdPos := position["customresourcedefinitions.apiextensions.k8s.io"]
	for _, c := range p.CRDs {
		if pos, ok := position[c.Name]; ok && pos <= crdPos {
			t.Errorf("custom resources %s come before the CRDs", c.Name)
		}
	}
	for _, r := range p.Resources {
		if r.Namespaced && position[r.GroupResource()] <= position["namespaces"] {
			t.Errorf("namespaced %s comes before namespaces", r.GroupResource())
		}
	}
	webhook := "validatingwebhookconfigurations.admissionregistration.k8s.io"
	if position[webhook] != len(p.Resources)-1 && p.Resources[len(p.Resources)-1].Wave != p.Resources[position[webhook]].Wave {
		t.Errorf("webhooks are not last: %s at %d of %d", webhook, position[webhook], len(p.Resources))
	}
	owned := 0
	for _, obj := range all {
		for _, ref := range obj.GetOwnerReferences() {
			gv, _ := schema.ParseGroupVersion(ref.APIVersion)
			owner, dep := kindOf[schema.GroupKind{Group: gv.Group, Kind: ref.Kind}], kindOf[obj.GroupVersionKind().GroupKind()]
			if _, ok := position[dep]; !ok || owner == dep {
				continue
			}
			// Rollout history comes before its workload on purpose: the controller adopts it and
			// keeps the source's revision numbers (snapshot/resources/history.go).
			if dep == "replicasets.apps" || dep == "controllerrevisions.apps" {
				continue
			}
			owned++
			if position[owner] >= position[dep] {
				t.Errorf("%s %s/%s is owned by a %s, which the plan restores later", dep, obj.GetNamespace(), obj.GetName(), owner)
			}
		}
	}
	if owned == 0 {
		t.Error("no owned objects were checked: the Deployments' ReplicaSets should be")
	}

	// The preset finds the platform's data and every Profile.
	found := func(items []plans.DataItem, name string) bool {
		return slices.ContainsFunc(items, func(d plans.DataItem) bool { return d.Name == name && d.Found })
	}
	if !found(p.Databases, "kfp-mysql") || !found(p.Buckets, "mlpipeline") {
		t.Errorf("kubeflow preset: databases %+v buckets %+v", p.Databases, p.Buckets)
	}
	if fixture && !found(p.Databases, "katib-mysql") {
		t.Errorf("kubeflow preset: katib-mysql not found in %+v", p.Databases)
	}
	profiles, err := dyn.Resource(schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "profiles"}).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Tenants) != len(profiles.Items) || len(p.Tenants) == 0 {
		t.Errorf("plan has %d tenants, the cluster %d Profiles", len(p.Tenants), len(profiles.Items))
	}
	for _, tenant := range p.Tenants {
		if !tenant.NamespaceExists {
			t.Errorf("profile %s: namespace not found", tenant.Name)
		}
	}
	if !slices.ContainsFunc(p.Quiesce, func(q plans.QuiesceItem) bool {
		return q.Resource == "notebooks.kubeflow.org" && q.Action == "annotate"
	}) {
		t.Error("no notebooks to quiesce in the plan")
	}
	if p.Estimate.Objects == 0 || p.Estimate.Duration == 0 {
		t.Errorf("estimate: %+v", p.Estimate)
	}
}

var ferryOnce sync.Once
var ferryPath string
var ferryErr error

// ferryBinary builds the ferry command once per test run and installs it where mover pods find it.
func ferryBinary(t testing.TB) string {
	t.Helper()
	ferryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ferry-bin-")
		if err != nil {
			ferryErr = err
			return
		}
		ferryPath = filepath.Join(dir, "ferry")
		out, err := exec.Command("go", "build", "-o", ferryPath, "../cmd/ferry").CombinedOutput()
		if err != nil {
			ferryErr = errors.New(string(out))
			return
		}
		// Mover pods exec `ferry mover ...`, which the testbed runs from its ExecBin.
		ferryErr = tb.InstallExecutable(ferryPath)
	})
	if ferryErr != nil {
		t.Fatalf("build ferry: %v", ferryErr)
	}
	return ferryPath
}

// ferryArgs adds to ferry's arguments what every ferry.yaml of the testbed excludes (kwok's
// resources; testbed.WithFerryConfig).
func ferryArgs(t testing.TB, args []string) []string {
	t.Helper()
	out, err := testbed.WithFerryConfig(t.TempDir(), args)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// runFerry runs the ferry command against the testbed's kubeconfig and returns its exit code and
// output. A command still running 2 minutes before the test binary's deadline gets SIGQUIT, so that
// the test fails with ferry's goroutines in its stderr instead of the binary timing out without them.
func runFerry(t testing.TB, args ...string) (int, string, string) {
	t.Helper()
	ctx := context.Background()
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if deadline, ok := d.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline.Add(-2*time.Minute))
			defer cancel()
		}
	}
	cmd := exec.CommandContext(ctx, ferryBinary(t), ferryArgs(t, args)...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	cmd.WaitDelay = time.Minute
	cmd.Env = append(os.Environ(), "KUBECONFIG="+tb.Kubeconfig)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("ferry %s ran until 2 minutes before the test's deadline; stopped with SIGQUIT\nstdout: %s\nstderr: %s", strings.Join(args, " "), stdout.String(), stderr.String())
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

func TestPlanPreflightOnEmptyGreen(t *testing.T) {
	fixture := applyPlatform(t)
	if !fixture {
		t.Skip("the storage classes checked here are the Kubeflow fixture's; FERRY_FIXTURES does not name it (make test-kubeflow; README.md, Notes on the testbed)")
	}
	green := tb.Clusters["green"]
	if err := green.Apply(context.Background(), io.Discard, filepath.Join(repoDir(), "integration", "testdata", "standard-storageclass.yaml")); err != nil {
		t.Fatal(err)
	}
	planFile := filepath.Join(t.TempDir(), "plan.yaml")
	code, out, errOut := runFerry(t, "plan", "--from", "blue", "--to", "green", "--preset", "kubeflow", "-o", planFile)
	if code != 3 {
		t.Fatalf("ferry plan exited %d, want 3 for blocking findings; stderr: %s", code, errOut)
	}
	for _, want := range []string{"storageclass gp3", "storageclass nfs-client"} {
		if !strings.Contains(out, "blocking  "+want) {
			t.Errorf("summary does not show a blocking finding for %s:\n%s", want, out)
		}
	}
	p, err := plans.ReadFile(planFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range p.Findings {
		for _, c := range p.CRDs {
			if f.Subject == c.Name {
				t.Errorf("CRD-provided %s is a finding: %s", c.Name, f.Message)
			}
		}
		if f.Severity == plans.Blocking && !strings.HasPrefix(f.Subject, "storageclass ") {
			t.Errorf("unexpected blocking finding: %+v", f)
		}
	}

	code, out, errOut = runFerry(t, "plan", "--from", "blue", "--to", "green", "--preset", "kubeflow",
		"--storage-class-map", "gp3=standard,nfs-client=standard")
	if code != 0 || strings.Contains(out, "blocking") {
		t.Fatalf("with --storage-class-map, ferry plan exited %d; stdout:\n%s\nstderr: %s", code, out, errOut)
	}
}

func TestPlanBadInput(t *testing.T) {
	testbed.Require(t, tb)
	bad := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(bad, []byte("databases:\n- name: x\n  engine: oracle\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plan", "--from", "blue", "-f", bad}, bad + ": databases[0].engine"},
		{[]string{"plan", "--from", "blue", "--preset", "nope"}, `--preset "nope"`},
		{[]string{"plan", "--from", "blue", "--storage-class-map", "gp3"}, `--storage-class-map "gp3": want FROM=TO`},
		{[]string{"plan", "--from", "blue", "-o", "table"}, `--output "table"`},
		{[]string{"plan", "--from", "no-such-context"}, `"no-such-context"`},
	} {
		code, _, errOut := runFerry(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("ferry %v exited %d with %q; want 2 and a message naming %q", tc.args, code, errOut, tc.want)
		}
	}
}

// testbedConfig is what every ferry.yaml of the testbed holds (testbed.FerryConfig), for plans
// made in the test's own process.
func testbedConfig(t testing.TB) config.Config {
	t.Helper()
	cfg, err := config.ParseConfig("testbed", []byte(testbed.FerryConfig))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
