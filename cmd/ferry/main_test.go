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
