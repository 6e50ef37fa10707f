package rules

import "testing"

func TestSecret(t *testing.T) {
	runCases(t, []ruleCase{
		{"token secret", "exclude", "secrets", `{"metadata":{"namespace":"a","name":"t"},"type":"kubernetes.io/service-account-token"}`, "tokens are minted"},
		{"bootstrap token", "exclude", "secrets", `{"metadata":{"namespace":"kube-system","name":"bootstrap-token-x"},"type":"bootstrap.kubernetes.io/token"}`, "bootstrap tokens"},
		{"opaque secret", "exclude", "secrets", `{"metadata":{"namespace":"a","name":"s"},"type":"Opaque"}`, ""},
		{"a token in a Velero backup is skipped", "skip", "secrets", `{"type":"kubernetes.io/service-account-token"}`, "issues its own"},
		{"an opaque secret is made", "skip", "secrets", `{"type":"Opaque"}`, ""},
	})
	if !For("secrets").Secret || For("configmaps").Secret {
		t.Error("only Secrets get keyed digests")
	}
}
