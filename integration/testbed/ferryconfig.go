package testbed

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ferrykube/ferry/plans/config"
	"go.yaml.in/yaml/v3"
)

// KwokResources are kwok's own resource types: how each cluster's simulated kubelets run a pod's
// exec and port-forward, and its stages. They belong to the cluster that serves them: blue's
// mappings restored on green would run green's commands against blue's servers. ferry knows
// nothing of kwok; every ferry.yaml run against the testbed excludes them (FerryConfig).
var KwokResources = []string{
	"stages.kwok.x-k8s.io",
	"execs.kwok.x-k8s.io", "clusterexecs.kwok.x-k8s.io",
	"portforwards.kwok.x-k8s.io", "clusterportforwards.kwok.x-k8s.io",
	"attaches.kwok.x-k8s.io", "clusterattaches.kwok.x-k8s.io",
	"logs.kwok.x-k8s.io", "clusterlogs.kwok.x-k8s.io",
	"resourceusages.kwok.x-k8s.io", "clusterresourceusages.kwok.x-k8s.io",
	"metrics.kwok.x-k8s.io",
}

// FerryConfig is the part of a ferry.yaml every run against the testbed holds: kwok's resources
// excluded. A ferry.yaml without an exclude section of its own may simply append it.
var FerryConfig = "exclude:\n  resources:\n" + func() string {
	var b strings.Builder
	for _, r := range KwokResources {
		fmt.Fprintf(&b, "  - %s\n", r)
	}
	return b.String()
}()

// WithFerryConfig returns ferry's arguments with the testbed's exclusions added, as a user of the
// testbed would write them into ferry.yaml: a command that plans anew (plan, backup, migrate, not
// from a plan file nor resuming) gets a ferry.yaml in dir, its own -f file extended by them, or
// one holding them alone. A -f file ferry refuses is left as it is (a test of the refusal).
func WithFerryConfig(dir string, args []string) ([]string, error) {
	if !plansAnew(args) {
		return args, nil
	}
	out := slices.Clone(args)
	for i, a := range out {
		path, inline := "", false
		switch {
		case (a == "-f" || a == "--config") && i+1 < len(out):
			path = out[i+1]
		case strings.HasPrefix(a, "--config="), strings.HasPrefix(a, "-f="):
			_, path, _ = strings.Cut(a, "=")
			inline = true
		default:
			continue
		}
		extended, ok, err := extendConfig(dir, path)
		if err != nil || !ok {
			return args, err
		}
		if inline {
			out[i] = "--config=" + extended
		} else {
			out[i+1] = extended
		}
		return out, nil
	}
	file, err := os.CreateTemp(dir, "testbed-ferry-*.yaml")
	if err != nil {
		return nil, err
	}
	defer file.Close()
	if _, err := file.WriteString(FerryConfig); err != nil {
		return nil, err
	}
	return append(out, "-f", file.Name()), file.Close()
}

// plansAnew reports whether ferry's arguments name a command that reads ferry.yaml to plan:
// plan, backup or migrate (not one of migrate's subcommands), without a plan file or a run to
// resume. The global flags before the command each take a value.
func plansAnew(args []string) bool {
	i := 0
	for i < len(args) && strings.HasPrefix(args[i], "-") {
		if !strings.Contains(args[i], "=") {
			i++
		}
		i++
	}
	if i >= len(args) {
		return false
	}
	switch args[i] {
	case "plan", "backup":
	case "migrate":
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			return false // status, list, ...
		}
	default:
		return false
	}
	for _, a := range args[i+1:] {
		if a == "--plan" || strings.HasPrefix(a, "--plan=") || a == "--resume" || strings.HasPrefix(a, "--resume=") {
			return false
		}
	}
	return true
}

// extendConfig writes a copy of the ferry.yaml at path into dir with KwokResources added to its
// exclude.resources; ok is false when the file is not a YAML mapping.
func extendConfig(dir, path string) (string, bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", false, nil // ferry names the missing file
	}
	// A file ferry refuses is a test of the refusal: ferry is to name it and its lines as written.
	if _, err := config.ParseConfig(path, data); err != nil {
		return "", false, nil
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return "", false, nil
	}
	if doc == nil {
		doc = map[string]any{}
	}
	exclude, ok := doc["exclude"].(map[string]any)
	if !ok {
		if doc["exclude"] != nil {
			return "", false, nil
		}
		exclude = map[string]any{}
	}
	resources, ok := exclude["resources"].([]any)
	if !ok && exclude["resources"] != nil {
		return "", false, nil
	}
	for _, r := range KwokResources {
		if !slices.Contains(resources, any(r)) {
			resources = append(resources, r)
		}
	}
	exclude["resources"] = resources
	doc["exclude"] = exclude
	data, err = yaml.Marshal(doc)
	if err != nil {
		return "", false, err
	}
	file, err := os.CreateTemp(dir, strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))+"-*.yaml")
	if err != nil {
		return "", false, err
	}
	defer file.Close()
	if _, err := file.Write(data); err != nil {
		return "", false, err
	}
	return file.Name(), true, file.Close()
}
