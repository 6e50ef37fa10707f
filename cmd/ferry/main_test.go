package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"
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
		{"bad output", []string{"version", "-o", "toml"}, exitBadInput, `--output "toml"`},
		{"extra argument", []string{"version", "now"}, exitBadInput, "takes no arguments"},
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
		{"rollback with bad parallel", []string{"rollback", "--run", "r-1", "--parallel", "0"}, "--parallel 0"},
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
