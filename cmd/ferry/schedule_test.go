package main

import (
	"context"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/yaml"
)

// ferry schedule create checks its input before it reaches for a cluster, and a dry run needs none.
func TestScheduleCreateOffline(t *testing.T) {
	const storage = "s3://backups/prod?region=eu-west-1"
	const secretKey = "AGE-SECRET-KEY-1GFPYYSJZGFPYYSJZGFPYYSJZGFPYYSJZGFPYYSJZGFPYYSJZGFPQ4EGAEX"
	const secretWord = "s3cr3t-never-shown"
	ferry := func(args ...string) (int, string, string) {
		var out, errOut strings.Builder
		// No kubeconfig anywhere: anything that reached for a cluster would fail with exit 1.
		t.Setenv("KUBECONFIG", t.TempDir()+"/none")
		code := run(context.Background(), args, genericiooptions.IOStreams{Out: &out, ErrOut: &errOut})
		return code, out.String(), errOut.String()
	}
	tests := []struct {
		args []string
		code int
		want string // in stderr for exit 2, in stdout for exit 0
	}{
		{[]string{"--storage", storage, "schedule", "create", "nightly", "--cron", "0 2 * *"}, 2, "--cron"},
		{[]string{"--storage", storage, "schedule", "create", "nightly", "--cron", "0 2 * * * *"}, 2, "--cron"},
		{[]string{"--storage", storage, "schedule", "create", "nightly"}, 2, "--cron"},
		{[]string{"schedule", "create", "nightly", "--cron", "@daily"}, 2, "--storage"},
		{[]string{"--storage", storage, "schedule", "create", "Nightly", "--cron", "@daily"}, 2, "schedule name"},
		{[]string{"--storage", storage, "schedule", "create", "--cron", "@daily"}, 2, "one schedule name"},
		{[]string{"--storage", storage, "schedule", "create", "nightly", "--cron", "@daily", "--preset", "nope"}, 2, "nope"},
		{[]string{"--storage", storage, "schedule", "create", "nightly", "--cron", "@daily", "-f", "/nonexistent/ferry.yaml"}, 2, "ferry.yaml"},
		{[]string{"--storage", storage, "schedule", "create", "nightly", "--cron", "@daily", "--dry-run", "-o", "xml"}, 2, "--output"},
		{[]string{"--storage", storage, "-n", "backups", "schedule", "create", "nightly", "--cron", "*/30 * * * *", "--preset", "kubeflow",
			"--storage-secret", "s3-creds", "--dry-run"}, 0, "kind: CronJob"},
		{[]string{"--storage", storage, "schedule", "create", "nightly", "--cron", "@hourly", "--dry-run", "-o", "json"}, 0, `"kind": "List"`},
		{[]string{"schedule", "delete", "Bad_Name"}, 2, "schedule name"},
		// Secrets given by mistake are refused, not written into the CronJob (nor into the error).
		{[]string{"--storage", storage, "schedule", "create", "nightly", "--cron", "@daily", "--dry-run", "--encrypt-to", secretKey}, 2, "is an age identity"},
		{[]string{"--storage", "s3://AKIAEXAMPLE:" + secretWord + "@backups/prod", "schedule", "create", "nightly", "--cron", "@daily", "--dry-run"}, 2, "credentials do not belong"},
	}
	for _, tt := range tests {
		code, out, errOut := ferry(tt.args...)
		text := out
		if tt.code != 0 {
			text = errOut
		}
		if code != tt.code || !strings.Contains(text, tt.want) {
			t.Errorf("ferry %s: exit %d, want %d with %q\nstdout: %s\nstderr: %s", strings.Join(tt.args, " "), code, tt.code, tt.want, out, errOut)
		}
		for _, secret := range []string{secretKey[16:28], secretWord} {
			if strings.Contains(out+errOut, secret) {
				t.Errorf("ferry %s shows a secret given by mistake", strings.Join(tt.args, " "))
			}
		}
	}
	_, out, _ := ferry("--storage", storage, "-n", "backups", "schedule", "create", "nightly", "--cron", "*/30 * * * *", "--dry-run")
	for i, doc := range strings.Split(out, "---\n") {
		var obj struct {
			Kind     string
			Metadata struct{ Name, Namespace string }
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil || obj.Kind == "" {
			t.Fatalf("document %d: %v\n%s", i, err, doc)
		}
		if (obj.Kind == "CronJob" || obj.Kind == "ServiceAccount") && obj.Metadata.Namespace != "backups" {
			t.Errorf("%s %s in namespace %q, want -n backups", obj.Kind, obj.Metadata.Name, obj.Metadata.Namespace)
		}
	}
}
