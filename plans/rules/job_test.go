package rules

import "testing"

func TestJob(t *testing.T) {
	runCases(t, []ruleCase{
		{"finished job", "exclude", "jobs.batch", `{"metadata":{"namespace":"a","name":"j"},"status":{"conditions":[{"type":"Complete","status":"True"}]}}`, "finished job"},
		{"running job", "exclude", "jobs.batch", `{"metadata":{"namespace":"a","name":"j"},"status":{}}`, ""},
		{"job controller uid", "normalize", "jobs.batch",
			`{"metadata":{"name":"j","labels":{"batch.kubernetes.io/controller-uid":"u","job-name":"j"}},"spec":{"selector":{"matchLabels":{"batch.kubernetes.io/controller-uid":"u"}},"template":{"metadata":{"labels":{"controller-uid":"u","job-name":"j"}}}}}`,
			`{"metadata":{"name":"j","labels":{"job-name":"j"}},"spec":{"selector":{"matchLabels":{}},"template":{"metadata":{"labels":{"job-name":"j"}}}}}`},
		{"a completed job is skipped", "skip", "jobs.batch", `{"status":{"completionTime":"2026-01-01T00:00:00Z"}}`, "has completed"},
		{"a running job is made", "skip", "jobs.batch", `{"status":{}}`, ""},
		{"a failed job is unhealthy", "health", "jobs.batch", `{"status":{"conditions":[{"type":"Failed","status":"True"}]}}`, "the job failed"},
		{"a running job is healthy", "health", "jobs.batch", `{"status":{}}`, "ok"},
	})
}
