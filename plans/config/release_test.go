package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/internal/badinput"
)

func TestReleaseSectionsErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"bad namespace", "platform: {namespaces: [Kube_Flow]}\n", `platform.namespaces[0]: "Kube_Flow"`},
		{"bad resource", "state: {resources: [deployments/apps]}\n", `state.resources[0]: "deployments/apps"`},
		{"object without names", "state: {objects: [{resource: secrets, namespace: kubeflow}]}\n", "state.objects[0].names: missing"},
		{"object without resource", "state: {objects: [{namespace: kubeflow, names: [a]}]}\n", "state.objects[0].resource"},
		{"object bad namespace", "platform: {objects: [{resource: secrets, namespace: A, names: [a]}]}\n", "platform.objects[0].namespace"},
		{"object bad name", "platform: {objects: [{resource: secrets, namespace: a, names: [a/b]}]}\n", "platform.objects[0].names[0]"},
		{"namespace on both sides", "platform: {namespaces: [kubeflow]}\nstate: {namespaces: [alice, kubeflow]}\n", `state.namespaces[1]: "kubeflow" is in platform.namespaces too`},
		{"resource on both sides", "platform: {resources: [Secrets]}\nstate: {resources: [secrets]}\n", `state.resources[0]: "secrets" is in platform.resources too`},
		{"object on both sides", "platform: {objects: [{resource: secrets, namespace: kf, names: [a, b]}]}\nstate: {objects: [{resource: secrets, namespace: kf, names: [b]}]}\n",
			"state.objects[0]: secrets kf/b is in platform.objects too"},
		{"cluster-scoped on both sides", "platform: {clusterScoped: true}\nstate: {clusterScoped: true}\n", "state.clusterScoped"},
		{"tenants as platform", "tenants: {resource: profiles.kubeflow.org}\nplatform: {resources: [profiles.kubeflow.org]}\n", "platform.resources[0]: \"profiles.kubeflow.org\" is the tenants resource"},
		{"unknown field", "platform: {namespace: [kubeflow]}\n", "field namespace not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("ferry.yaml", []byte(tc.yaml))
			if err == nil || !badinput.Is(err) || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "ferry.yaml: ") {
				t.Fatalf("ParseConfig(%q) = %v, want a bad-input error starting with the file name and naming %q", tc.yaml, err, tc.want)
			}
		})
	}
}

func TestReleaseSectionsMergeWithThePreset(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "ferry.yaml")
	write := func(doc string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`preset: kubeflow
platform: {namespaces: [monitoring, kubeflow]}
state:
  namespaces: [team-a]
  objects: [{resource: configmaps, namespace: kubeflow, names: [branding]}]
`)
	cfg, err := LoadConfig(file, "")
	if err != nil {
		t.Fatal(err)
	}
	preset, err := LoadPreset("kubeflow")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(cfg.Platform.Namespaces), len(preset.Platform.Namespaces)+1; got != want {
		t.Errorf("platform namespaces: %v (%d), want the preset's and monitoring once (%d)", cfg.Platform.Namespaces, got, want)
	}
	if cfg.State.Namespaces[0] != "team-a" || len(cfg.State.Objects) != len(preset.State.Objects)+1 || !cfg.Platform.IsClusterScoped() {
		t.Errorf("merged state %+v, platform %+v", cfg.State, cfg.Platform)
	}

	// A rule that is fine alone but not beside the preset's is refused, naming the file.
	write("preset: kubeflow\nstate: {namespaces: [istio-system]}\n")
	_, err = LoadConfig(file, "")
	if err == nil || !badinput.Is(err) || !strings.Contains(err.Error(), file+" with preset kubeflow: state.namespaces[0]") {
		t.Fatalf("a namespace on both sides across the files: %v", err)
	}
	write("preset: kubeflow\nstate: {clusterScoped: true}\n")
	if _, err = LoadConfig(file, ""); err == nil || !strings.Contains(err.Error(), "state.clusterScoped") {
		t.Fatalf("cluster-scoped on both sides across the files: %v", err)
	}
	// ferry.yaml may turn the preset's clusterScoped off.
	write("preset: kubeflow\nplatform: {clusterScoped: false}\n")
	if cfg, err = LoadConfig(file, ""); err != nil || cfg.Platform.IsClusterScoped() {
		t.Fatalf("clusterScoped: false over the preset: %v, %+v", err, cfg.Platform)
	}
}
