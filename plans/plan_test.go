package plans

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/plans/rules"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/plans/config"
)

func TestPlanFileRoundTrip(t *testing.T) {
	cfg, err := config.LoadPreset("kubeflow")
	if err != nil {
		t.Fatal(err)
	}
	p := &Plan{APIVersion: APIVersion, Kind: Kind, Config: cfg.Planning,
		Resources: []Resource{{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true, Wave: rules.WaveConfig, Count: 2, Bytes: 100,
			Namespaces: map[string]Count{"kubeflow": {Count: 2, Bytes: 100}}}},
		Excluded: []Exclusion{{Resource: "nodes", Count: 2, Reason: "nodes belong to the cluster they run in"}},
		Findings: []Finding{{Severity: Blocking, Subject: "storageclass gp3", Message: "missing"}},
		Upgrade: &Upgrade{Moves: []SideItem{{Namespace: "alice", Objects: 3, Why: "namespace of tenant alice"}},
			Release:  ReleaseDiff{CRDsRemoved: []CRDChange{{Name: "pytorchjobs.kubeflow.org", Kind: "PyTorchJob", CustomResources: 1, StateObjects: 1}}},
			Stranded: []StrandedObject{{CRD: "pytorchjobs.kubeflow.org", Kind: "PyTorchJob", Namespace: "alice", Name: "train"}}},
	}
	for _, name := range []string{"plan.yaml", "plan.json"} {
		path := filepath.Join(t.TempDir(), name)
		if err := p.WriteFile(path); err != nil {
			t.Fatal(err)
		}
		got, err := ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.Resources[0].Namespaces["kubeflow"].Count != 2 || len(got.Config.Databases) != 2 || len(got.Blocking()) != 1 ||
			!got.Config.Platform.IsClusterScoped() || len(got.Config.State.Objects) != 2 ||
			got.Upgrade == nil || len(got.Upgrade.Stranded) != 1 || got.Upgrade.Release.CRDsRemoved[0].StateObjects != 1 {
			t.Fatalf("%s: read back %+v", name, got)
		}
	}
}

func TestReadFileRejectsWhatIsNotAPlan(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"other.yaml":   "apiVersion: v1\nkind: ConfigMap\n",
		"unknown.yaml": "apiVersion: ferry.dev/v1alpha1\nkind: Plan\nresourcez: []\n",
		"badcfg.yaml":  "apiVersion: ferry.dev/v1alpha1\nkind: Plan\nconfig: {databases: [{name: a, engine: db2}]}\n",
	} {
		path := filepath.Join(dir, name)
		os.WriteFile(path, []byte(content), 0o644)
		if _, err := ReadFile(path); err == nil || !badinput.Is(err) || !strings.Contains(err.Error(), path) {
			t.Errorf("ReadFile(%s) = %v, want a bad-input error naming the file", name, err)
		}
	}
}

func TestOlder(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"v1.36.4", "v1.37.2", true},
		{"v1.37.0", "v1.37.2", false},
		{"v1.38.0", "v1.37.2", false},
		{"v0.0.0-master+$Format:%H$", "v1.37.2", true},
		{"garbage", "v1.37.2", false},
	} {
		if got := older(tc.a, tc.b); got != tc.want {
			t.Errorf("older(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// A plan file an older ferry wrote holds the run's traffic and rollout settings in its config: it
// reads (strictly, its settings checked), and the plan keeps none of them.
func TestOlderPlanFileWithTrafficAndRollout(t *testing.T) {
	old := `apiVersion: ferry.dev/v1alpha1
kind: Plan
createdAt: "2026-01-05T10:00:00Z"
source: {context: blue, server: "https://blue:6443", version: v1.35.0}
config:
  include: {namespaces: [shop]}
  traffic:
    type: haproxy
    haproxy: {address: "127.0.0.1:9999", backend: web, blueServer: blue, greenServer: green}
  rollout: {steps: [50, 100], soak: 30s}
resources: []
waves: []
excluded: []
estimate: {}
`
	path := filepath.Join(t.TempDir(), "plan.yaml")
	if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Config.Include.Namespaces) != 1 || p.Config.Include.Namespaces[0] != "shop" {
		t.Errorf("config read back as %+v", p.Config)
	}
	again, err := p.Marshal("json")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(again), "traffic") || strings.Contains(string(again), "rollout") {
		t.Errorf("the plan keeps the run's settings: %s", again)
	}
	bad := strings.Replace(old, "steps: [50, 100]", "steps: [50, 10]", 1)
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(path); !badinput.Is(err) || !strings.Contains(err.Error(), "config.rollout.steps") {
		t.Errorf("bad rollout steps in an older plan file: %v", err)
	}
}

func TestFilesUnread(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    Volume
		want string // a part of the reason, "" when a mover reads the files
	}{
		{"bound filesystem claim", Volume{Phase: "Bound"}, ""},
		{"filesystem said outright", Volume{Phase: "Bound", VolumeMode: "Filesystem"}, ""},
		{"a database's", Volume{Phase: "Bound", Holds: "database mysql"}, "move as database mysql"},
		{"pending", Volume{Phase: "Pending"}, "the claim is pending"},
		{"no status", Volume{}, "the claim is unknown"},
		{"raw block device", Volume{Phase: "Bound", VolumeMode: "Block"}, "a raw block volume"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.v.FilesUnread()
			if (got == "") != (tc.want == "") || !strings.Contains(got, tc.want) {
				t.Errorf("FilesUnread() = %q, want one containing %q", got, tc.want)
			}
		})
	}
}
