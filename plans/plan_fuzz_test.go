package plans

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/plans/config"
)

// seedPlans are plan files as ferry plan writes them (YAML and JSON), of the shipped presets.
func seedPlans(f *testing.F) [][]byte {
	var out [][]byte
	for _, name := range config.Presets() {
		cfg, err := config.LoadPreset(name)
		if err != nil {
			f.Fatal(err)
		}
		p := &Plan{APIVersion: APIVersion, Kind: Kind, Config: cfg.Planning, Source: Cluster{Context: "blue", Server: "https://blue:6443"},
			Resources: []Resource{{Group: "apps", Version: "v1", Kind: "Deployment", Resource: "deployments", Namespaced: true, Count: 2}}}
		for _, format := range []string{"yaml", "json"} {
			data, err := p.Marshal(format)
			if err != nil {
				f.Fatal(err)
			}
			out = append(out, data)
		}
	}
	return out
}

// FuzzPlanFile: no plan file makes ReadFile panic, and every error names the file.
func FuzzPlanFile(f *testing.F) {
	for _, p := range seedPlans(f) {
		f.Add(p)
		f.Add(p[:len(p)/2])
	}
	f.Add([]byte("apiVersion: ferry.dev/v1alpha1\nkind: Plan\nconfig: {databases: [{name: x}]}\n"))
	f.Add([]byte("- a\n- b\n"))
	path := filepath.Join(f.TempDir(), "plan.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := ReadFile(path)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		p.Blocking()
		if _, err := p.Marshal("yaml"); err != nil {
			t.Fatalf("a plan read from a file does not render: %v", err)
		}
	})
}
