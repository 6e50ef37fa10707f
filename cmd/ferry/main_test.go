package main

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/migrate"
	"github.com/ferrykube/ferry/plans"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/klog/v2"
)

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"version", []string{"version"}, exitOK, ""},
		{"help", []string{"--help"}, exitOK, ""},
		{"unknown flag", []string{"--bogus"}, exitBadInput, "unknown flag: --bogus"},
		{"unknown command", []string{"frobnicate"}, exitBadInput, `unknown command "frobnicate"`},
		{"bad log format", []string{"--log-format", "xml", "version"}, exitBadInput, `--log-format "xml"`},
		{"bad progress", []string{"--progress", "sometimes", "version"}, exitBadInput, `--progress "sometimes"`},
		{"bad profile", []string{"--profile", "trace", "version"}, exitBadInput, `--profile "trace"`},
		{"profile to a folder that is not there", []string{"--profile", "cpu", "--profile-output", "/nonexistent/cpu.pprof", "version"}, exitFailed, "--profile-output"},
		{"bad output", []string{"version", "-o", "toml"}, exitBadInput, `--output "toml"`},
		{"extra argument", []string{"version", "now"}, exitBadInput, "takes no arguments"},
		{"unknown volume format", []string{"backup", "--preset", "kubeflow", "--volume-format", "zip"}, exitBadInput, `--volume-format "zip"`},
		{"chunked volumes through direct movers", []string{"backup", "--preset", "kubeflow", "--volume-format", "chunks", "--mover-direct"}, exitBadInput, "--volume-format chunks: chunks are read through exec: direct movers write tar"},
		{"check sample out of range", []string{"check", "--sample", "2"}, exitBadInput, "--sample 2"},
		{"json logs", []string{"--log-format", "json", "--progress", "never", "version"}, exitOK, ""},
		{"upgrade without target", []string{"plan", "--from", "blue", "--upgrade", "--preset", "kubeflow"}, exitBadInput, "--upgrade needs --to"},
		{"leave behind without upgrade", []string{"plan", "--from", "blue", "--to", "green", "--leave-behind", "pytorchjobs.kubeflow.org"}, exitBadInput, "--leave-behind needs --upgrade"},
		{"leave behind not a CRD", []string{"plan", "--from", "blue", "--to", "green", "--upgrade", "--preset", "kubeflow", "--leave-behind", "pytorchjobs"}, exitBadInput, `--leave-behind "pytorchjobs": want a CRD's name`},
		{"upgrade without platform", []string{"plan", "--from", "blue", "--to", "green", "--upgrade"}, exitBadInput, "--upgrade: no platform section"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			streams, _, _, errOut := genericiooptions.NewTestIOStreams()
			code := run(context.Background(), tc.args, streams)
			if code != tc.wantCode {
				t.Fatalf("ferry %v exited %d, want %d; stderr: %s", tc.args, code, tc.wantCode, errOut)
			}
			if !strings.Contains(errOut.String(), tc.wantErr) {
				t.Fatalf("ferry %v: stderr %q does not name %q", tc.args, errOut, tc.wantErr)
			}
		})
	}
}

// TestProfile: --profile writes a profile pprof reads, as kubectl's does.
func TestProfile(t *testing.T) {
	for _, name := range []string{"cpu", "heap"} {
		out := t.TempDir() + "/" + name + ".pprof"
		streams, _, _, errOut := genericiooptions.NewTestIOStreams()
		if code := run(context.Background(), []string{"--profile", name, "--profile-output", out, "version"}, streams); code != exitOK {
			t.Fatalf("--profile %s: exit %d: %s", name, code, errOut)
		}
		f, err := os.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(f) // pprof's format: a gzipped protocol buffer
		if err == nil {
			_, err = io.Copy(io.Discard, zr)
		}
		f.Close()
		if err != nil {
			t.Errorf("--profile %s wrote no profile: %v", name, err)
		}
	}
}

func TestVersionJSON(t *testing.T) {
	streams, _, out, _ := genericiooptions.NewTestIOStreams()
	if code := run(context.Background(), []string{"version", "-o", "json"}, streams); code != exitOK {
		t.Fatalf("exit %d", code)
	}
	var info struct{ Version, GoVersion string }
	if err := json.Unmarshal(out.Bytes(), &info); err != nil || info.Version == "" || !strings.HasPrefix(info.GoVersion, "go") {
		t.Fatalf("version -o json printed %q (%v), want version and goVersion", out, err)
	}
}

// Each command checks all its flags in Validate, before it opens storage or reaches a cluster:
// a resumed run or a rollback too. No kubeconfig and an empty storage, so anything that got past
// the checks would fail otherwise.
func TestValidateBeforeRun(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("KUBECONFIG", dir+"/none")
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"resume with bad parallel", []string{"migrate", "--resume", "r-1", "--parallel", "0"}, "--parallel 0"},
		{"resume with bad output", []string{"migrate", "--resume", "r-1", "-o", "toml"}, `--output "toml"`},
		{"migrate with bad parallel", []string{"migrate", "--from", "a", "--to", "b", "--parallel", "0"}, "--parallel 0"},
		{"migrate with the same clusters", []string{"migrate", "--from", "a", "--to", "a"}, "blue and green must be two clusters"},
		{"warm rounds without warm", []string{"migrate", "--from", "a", "--to", "b", "--warm-rounds", "2"}, "--warm-rounds needs --warm"},
		{"warm delta without warm", []string{"migrate", "--from", "a", "--to", "b", "--warm-delta", "1Gi"}, "--warm-delta needs --warm"},
		{"warm with no round", []string{"migrate", "--from", "a", "--to", "b", "--warm", "--warm-rounds", "0"}, "--warm-rounds 0"},
		{"warm with a bad delta", []string{"migrate", "--from", "a", "--to", "b", "--warm", "--warm-delta", "lots"}, `--warm-delta "lots"`},
		{"warm with a negative delta", []string{"migrate", "--from", "a", "--to", "b", "--warm", "--warm-delta", "-1Mi"}, `--warm-delta "-1Mi"`},
		{"warm with upgrade", []string{"migrate", "--from", "a", "--to", "b", "--preset", "kubeflow", "--upgrade", "--warm"}, "--warm: not of an upgrade"},
		{"warm encrypted", []string{"migrate", "--from", "a", "--to", "b", "--warm", "--encrypt-to", "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"}, "--warm: not encrypted"},
		{"resume warm", []string{"migrate", "--resume", "r-1", "--warm"}, "drop -f/--preset/--upgrade/--leave-behind/--warm"},
		{"rollback with bad parallel", []string{"rollback", "--run", "r-1", "--parallel", "0"}, "--parallel 0"},
		{"rollback despite a partial carry-back, not discarding", []string{"rollback", "--run", "r-1", "--despite-partial-carry-back"}, "--despite-partial-carry-back goes only with --discard-green-writes"},
		{"finalize with a bad identity", []string{"migrate", "finalize", "r-1", "--identity", dir + "/nokey"}, "--identity"},
		{"restore without a backup", []string{"restore", "--to", "b"}, "needs --backup"},
		{"restore with a bad existing", []string{"restore", "--backup", "b1", "--existing", "sometimes"}, `--existing "sometimes"`},
		{"verify with bad parallel", []string{"verify", "--backup", "b1", "--parallel", "0"}, "--parallel 0"},
		{"backup with bad parallel", []string{"backup", "--parallel", "0"}, "--parallel 0"},
		{"backup with a bad selection", []string{"backup", "--include-namespaces", "Not_A_Namespace"}, "Not_A_Namespace"},
		{"flip with a bad side", []string{"flip", "--run", "r-1", "--to", "purple"}, `--to "purple"`},
		{"status with bad output", []string{"migrate", "status", "r-1", "-o", "toml"}, `--output "toml"`},
		{"backups list with yaml", []string{"backups", "list", "-o", "yaml"}, `--output "yaml": want json`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			streams, _, _, errOut := genericiooptions.NewTestIOStreams()
			code := run(context.Background(), append([]string{"--storage", "file://" + dir}, tc.args...), streams)
			if code != exitBadInput || !strings.Contains(errOut.String(), tc.wantErr) {
				t.Fatalf("ferry %v: exit %d, want %d naming %q; stderr: %s", tc.args, code, exitBadInput, tc.wantErr, errOut)
			}
		})
	}
}

// One rule for namespace and storage class maps, from flags and ferry.yaml alike: two namespaces
// made one are refused (a carry-back could not map them back), naming both; several storage
// classes may become one. All is checked before a cluster is reached.
func TestMapRules(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("KUBECONFIG", dir+"/none")
	write := func(name, text string) string {
		t.Helper()
		path := dir + "/" + name
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	manyToOne := write("many.yaml", "namespaceMap: {team-a: shared, team-b: shared}\n")
	oneMap := write("one.yaml", "namespaceMap: {team-a: shared}\n")
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string // empty: the maps pass, and the command fails later, reaching for a cluster
	}{
		{"plan, flags", []string{"plan", "--namespace-map", "team-a=shared,team-b=shared"}, "--namespace-map: team-a and team-b are both mapped to shared"},
		{"plan, ferry.yaml", []string{"plan", "-f", manyToOne}, manyToOne + ": namespaceMap: team-a and team-b are both mapped to shared"},
		{"plan, ferry.yaml and a flag", []string{"plan", "-f", oneMap, "--namespace-map", "team-b=shared"}, "namespaceMap: team-a and team-b are both mapped to shared"},
		{"plan, not FROM=TO", []string{"plan", "--storage-class-map", "gp3"}, `--storage-class-map "gp3": want FROM=TO`},
		{"plan, one to two", []string{"plan", "--namespace-map", "a=x,a=y"}, "--namespace-map: a is mapped to both x and y"},
		{"restore, flags", []string{"restore", "--backup", "b1", "--namespace-map", "a=x", "--namespace-map", "b=x"}, "--namespace-map: a and b are both mapped to x"},
		{"migrate, flags", []string{"migrate", "--from", "blue", "--to", "green", "--namespace-map", "a=x,b=x"}, "--namespace-map: a and b are both mapped to x"},
		{"migrate, ferry.yaml", []string{"migrate", "--from", "blue", "--to", "green", "-f", manyToOne}, "namespaceMap: team-a and team-b are both mapped to shared"},
		{"migrate, ferry.yaml and a flag", []string{"migrate", "--from", "blue", "--to", "green", "-f", oneMap, "--namespace-map", "team-b=shared"}, "namespaceMap: team-a and team-b are both mapped to shared"},
		{"storage classes may become one", []string{"plan", "--storage-class-map", "gp2=standard,gp3=standard"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			streams, _, _, errOut := genericiooptions.NewTestIOStreams()
			code := run(context.Background(), append([]string{"--storage", "file://" + dir}, tc.args...), streams)
			if tc.wantErr == "" {
				if strings.Contains(errOut.String(), "map") {
					t.Fatalf("ferry %v refused a map: %s", tc.args, errOut)
				}
				return
			}
			if code != exitBadInput || !strings.Contains(errOut.String(), tc.wantErr) {
				t.Fatalf("ferry %v: exit %d, want %d naming %q; stderr: %s", tc.args, code, exitBadInput, tc.wantErr, errOut)
			}
		})
	}
}

// A refusal to lose data has its own exit code, apart from bad input, and the help says so.
func TestRefusalExitCode(t *testing.T) {
	refusal := &refusedError{err: fmt.Errorf("%w since now: database kfp-mysql", migrate.ErrGreenWrites)}
	if code := exitCode(refusal); code != exitRefused || exitRefused != 4 {
		t.Fatalf("a refusal exits %d, want 4", code)
	}
	if code := exitCode(fmt.Errorf("run r-1: %w", refusal)); code != exitRefused {
		t.Fatalf("a wrapped refusal exits %d, want 4", code)
	}
	if code := exitCode(badinput.Errorf("--parallel 0")); code != exitBadInput {
		t.Fatalf("bad input exits %d, want 2", code)
	}
	streams, _, out, _ := genericiooptions.NewTestIOStreams()
	if code := run(context.Background(), []string{"rollback", "--help"}, streams); code != exitOK || !strings.Contains(out.String(), "4 refused because green's writes would be lost") {
		t.Fatalf("rollback --help (exit %d) does not document exit code 4:\n%s", code, out)
	}
}

// backup takes plan's selection flags: over ferry.yaml's include and exclude, they narrow what
// the backup plans.
func TestBackupSelectionFlags(t *testing.T) {
	dir := t.TempDir()
	cfg := dir + "/ferry.yaml"
	if err := os.WriteFile(cfg, []byte("exclude: {namespaces: [scratch]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := &backupOptions{global: newGlobalOptions()}
	if err := o.command().ParseFlags([]string{"-f", cfg, "--include-namespaces", "team-a,team-b,scratch", "--exclude-namespaces", "team-b",
		"--include-resources", "configmaps", "--exclude-resources", "secrets", "-l", "tier!=cache"}); err != nil {
		t.Fatal(err)
	}
	if err := o.complete(nil); err != nil {
		t.Fatal(err)
	}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	filter, err := plans.NewFilter(o.config.Planning)
	if err != nil {
		t.Fatal(err)
	}
	configMaps := plans.Resource{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true}
	deployments := plans.Resource{Group: "apps", Version: "v1", Resource: "deployments", Kind: "Deployment", Namespaced: true}
	for _, tc := range []struct {
		what      string
		r         plans.Resource
		namespace string
		labels    map[string]string
		want      bool
	}{
		{"included", configMaps, "team-a", nil, true},
		{"--exclude-namespaces", configMaps, "team-b", nil, false},
		{"not in --include-namespaces", configMaps, "team-c", nil, false},
		{"ferry.yaml's exclude", configMaps, "scratch", nil, false},
		{"not in --include-resources", deployments, "team-a", nil, false},
		{"-l", configMaps, "team-a", map[string]string{"tier": "cache"}, false},
	} {
		obj := &unstructured.Unstructured{}
		obj.SetAPIVersion("v1")
		obj.SetKind(tc.r.Kind)
		obj.SetNamespace(tc.namespace)
		obj.SetName("x")
		obj.SetLabels(tc.labels)
		if reason := filter.Reason(tc.r, obj); (reason == "") != tc.want {
			t.Errorf("%s: %s in %s with labels %v: left out for %q, want selected %v", tc.what, tc.r.Resource, tc.namespace, tc.labels, reason, tc.want)
		}
	}
	// A plan file holds its own selection.
	o = &backupOptions{global: newGlobalOptions()}
	if err := o.command().ParseFlags([]string{"--plan", dir + "/plan.yaml", "--exclude-namespaces", "team-b"}); err != nil {
		t.Fatal(err)
	}
	if err := o.complete(nil); err == nil || !strings.Contains(err.Error(), "--plan already holds the configuration") {
		t.Fatalf("--plan with a selection flag: %v", err)
	}
}

// What client-go logs (through klog) comes out in ferry's log format: JSON logs stay JSON.
func TestClientGoLogsInFerrysFormat(t *testing.T) {
	streams, _, _, errOut := genericiooptions.NewTestIOStreams()
	if code := run(context.Background(), []string{"--log-format", "json", "--progress", "never", "version"}, streams); code != exitOK {
		t.Fatalf("ferry version exited %d: %s", code, errOut)
	}
	errOut.Reset()
	klog.ErrorS(io.EOF, "Copying stdin failed")
	var line map[string]any
	if err := json.Unmarshal(errOut.Bytes(), &line); err != nil || line["msg"] != "Copying stdin failed" {
		t.Fatalf("klog's line %q is not ferry's JSON (%v)", errOut, err)
	}
}
