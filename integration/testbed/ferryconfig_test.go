package testbed

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ferrykube/ferry/plans/config"
)

func TestWithFerryConfig(t *testing.T) {
	dir := t.TempDir()
	own := filepath.Join(dir, "ferry.yaml")
	if err := os.WriteFile(own, []byte("preset: kubeflow\nexclude:\n  namespaces: [scratch]\n  resources: [events]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	refused := filepath.Join(dir, "refused.yaml")
	if err := os.WriteFile(refused, []byte("exclude:\n  nonsense: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		// config is the -f file ferry reads afterwards: "" none, "own" own's path, "new" a new file.
		config string
	}{
		{"plan without a file", []string{"plan", "--from", "blue"}, "new"},
		{"backup after global flags", []string{"--storage", "file:///x", "--kubeconfig=k", "backup", "--from", "blue"}, "new"},
		{"migrate with its own file", []string{"--storage", "u", "migrate", "--from", "blue", "-f", own}, "new"},
		{"backup from a plan file", []string{"backup", "--from", "blue", "--plan", "p.yaml"}, ""},
		{"a resumed run", []string{"migrate", "--resume", "run-1"}, ""},
		{"migrate status", []string{"--storage", "u", "migrate", "status", "run-1"}, ""},
		{"restore", []string{"restore", "--to", "green", "--backup", "b"}, ""},
		{"a file ferry refuses", []string{"plan", "--from", "blue", "-f", refused}, "refused"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := WithFerryConfig(dir, c.args)
			if err != nil {
				t.Fatal(err)
			}
			i := slices.Index(got, "-f")
			switch {
			case c.config == "":
				if !slices.Equal(got, c.args) {
					t.Fatalf("args changed: %q", got)
				}
				return
			case c.config == "refused":
				if !slices.Equal(got, c.args) {
					t.Fatalf("a refused file was replaced: %q", got)
				}
				return
			case i < 0 || got[i+1] == own:
				t.Fatalf("no new ferry.yaml: %q", got)
			}
			cfg, err := config.LoadConfig(got[i+1], "")
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range KwokResources {
				if !slices.Contains(cfg.Exclude.Resources, r) {
					t.Errorf("exclude.resources %q lacks %s", cfg.Exclude.Resources, r)
				}
			}
			if slices.Contains(c.args, own) && (cfg.Preset != "kubeflow" || !slices.Equal(cfg.Exclude.Namespaces, []string{"scratch"}) || !slices.Contains(cfg.Exclude.Resources, "events")) {
				t.Errorf("the file's own settings were lost: %+v", cfg)
			}
		})
	}
}
