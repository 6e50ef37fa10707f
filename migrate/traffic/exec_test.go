package traffic

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/plans/config"
)

func TestExecSendsTheSplitInEnvAndStdin(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "calls")
	// The script records what it was given: the environment and the one JSON line on stdin.
	script := filepath.Join(dir, "switch.sh")
	os.WriteFile(script, []byte("#!/bin/sh\nread line\necho \"$FERRY_BLUE_WEIGHT $FERRY_GREEN_WEIGHT $line\" >> "+out+"\n[ \"$FERRY_GREEN_WEIGHT\" != 77 ] || { echo refused >&2; exit 3; }\n"), 0o755)
	ctx := context.Background()
	sw, err := New(ctx, config.Traffic{Type: config.TrafficExec, Exec: &config.ExecTraffic{Command: []string{script}}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.Preflight(ctx); err != nil {
		t.Fatal(err)
	}
	saved, _ := sw.Save(ctx)
	if err := sw.Apply(ctx, Green(50)); err != nil {
		t.Fatal(err)
	}
	if got, _ := sw.Current(ctx); got != Green(50) {
		t.Errorf("Current after Apply = %v", got)
	}
	if err := sw.Apply(ctx, Green(77)); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("a failing command: %v, want its stderr in the error", err)
	}
	if got, _ := sw.Current(ctx); got != Green(50) {
		t.Errorf("Current after a failed Apply = %v, want the last applied", got)
	}
	if err := sw.Restore(ctx, saved); err != nil {
		t.Fatal(err)
	}
	calls, _ := os.ReadFile(out)
	want := "50 50 {\"blue\":50,\"green\":50}\n23 77 {\"blue\":23,\"green\":77}\n100 0 {\"blue\":100,\"green\":0}\n"
	if string(calls) != want {
		t.Errorf("the command saw\n%s\nwant\n%s", calls, want)
	}
	missing, _ := New(ctx, config.Traffic{Type: config.TrafficExec, Exec: &config.ExecTraffic{Command: []string{"ferry-no-such-command"}}}, Options{})
	if err := missing.Preflight(ctx); err == nil || !strings.Contains(err.Error(), "ferry-no-such-command") {
		t.Errorf("missing command: %v", err)
	}
}

func TestWebhookPostsTheSplit(t *testing.T) {
	var got []pushedState
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get("Authorization") != "Bearer t" || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		var s pushedState
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &s); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if s.Green == 66 {
			http.Error(w, "not now", http.StatusServiceUnavailable)
			return
		}
		got = append(got, s)
	}))
	defer srv.Close()
	ctx := context.Background()
	cfg := config.Traffic{Type: config.TrafficWebhook, Webhook: &config.WebhookTraffic{URL: srv.URL, Headers: map[string]config.SecretValue{"Authorization": config.FromEnv("LB_TOKEN")}}}
	env := map[string]string{"LB_TOKEN": "Bearer t"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if _, err := New(ctx, cfg, Options{}); !badinput.Is(err) || !strings.Contains(err.Error(), "traffic.webhook.headers.Authorization") || !strings.Contains(err.Error(), "LB_TOKEN") {
		t.Errorf("a header whose variable is not set: %v; want bad input naming the header and the variable", err)
	}
	sw, err := New(ctx, cfg, Options{Secrets: config.Resolver{LookupEnv: lookup}})
	if err != nil {
		t.Fatal(err)
	}
	saved, _ := sw.Save(ctx)
	for _, g := range []int{10, 100} {
		if err := sw.Apply(ctx, Green(g)); err != nil {
			t.Fatal(err)
		}
	}
	if err := sw.Apply(ctx, Green(66)); err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "not now") {
		t.Errorf("a 503: %v", err)
	}
	if err := sw.Restore(ctx, saved); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0] != (pushedState{90, 10}) || got[1] != (pushedState{0, 100}) || got[2] != (pushedState{100, 0}) {
		t.Errorf("the webhook received %v", got)
	}
}
