package rules

import (
	"reflect"
	"testing"
)

func TestSecret(t *testing.T) {
	runCases(t, []ruleCase{
		{"a token made by a cluster before 1.24", "exclude", "secrets",
			`{"metadata":{"namespace":"a","name":"builder-token-x7k2q","annotations":{"kubernetes.io/service-account.name":"builder"}},"type":"kubernetes.io/service-account-token"}`, "issues its own"},
		{"a token someone asked for moves", "exclude", "secrets",
			`{"metadata":{"namespace":"a","name":"ci-token","annotations":{"kubernetes.io/service-account.name":"ci"}},"type":"kubernetes.io/service-account-token"}`, ""},
		{"a token named like a made one for another account moves", "exclude", "secrets",
			`{"metadata":{"namespace":"a","name":"builder-token-x7k2q","annotations":{"kubernetes.io/service-account.name":"ci"}},"type":"kubernetes.io/service-account-token"}`, ""},
		{"a token's filled data and account UID are the cluster's", "normalize", "secrets",
			`{"metadata":{"name":"ci-token","annotations":{"kubernetes.io/service-account.name":"ci","kubernetes.io/service-account.uid":"u-1"}},"type":"kubernetes.io/service-account-token","data":{"token":"dA==","ca.crt":"Yw==","namespace":"YQ==","extra":"eA=="}}`,
			`{"metadata":{"name":"ci-token","annotations":{"kubernetes.io/service-account.name":"ci"}},"type":"kubernetes.io/service-account-token","data":{"extra":"eA=="}}`},
		{"a token's record of use on the source goes", "normalize", "secrets",
			`{"metadata":{"name":"ci-token","labels":{"kubernetes.io/legacy-token-last-used":"2026-11-30","team":"ci"},"annotations":{"kubernetes.io/service-account.name":"ci"}},"type":"kubernetes.io/service-account-token"}`,
			`{"metadata":{"name":"ci-token","labels":{"team":"ci"},"annotations":{"kubernetes.io/service-account.name":"ci"}},"type":"kubernetes.io/service-account-token"}`},
		{"a made token of an account with a long name", "exclude", "secrets",
			`{"metadata":{"namespace":"a","name":"a-service-account-whose-name-runs-on-and-on-and-on--token-x7k2q","annotations":{"kubernetes.io/service-account.name":"a-service-account-whose-name-runs-on-and-on-and-on-and-on"}},"type":"kubernetes.io/service-account-token"}`, "issues its own"},
		{"an opaque secret keeps its token key", "normalize", "secrets",
			`{"metadata":{"name":"s","annotations":{"kubernetes.io/service-account.uid":"u-1"}},"type":"Opaque","data":{"token":"dA=="}}`,
			`{"metadata":{"name":"s","annotations":{"kubernetes.io/service-account.uid":"u-1"}},"type":"Opaque","data":{"token":"dA=="}}`},
		{"bootstrap token", "exclude", "secrets", `{"metadata":{"namespace":"kube-system","name":"bootstrap-token-x"},"type":"bootstrap.kubernetes.io/token"}`, "bootstrap tokens"},
		{"opaque secret", "exclude", "secrets", `{"metadata":{"namespace":"a","name":"s"},"type":"Opaque"}`, ""},
		{"a made token in a Velero backup is skipped", "skip", "secrets",
			`{"metadata":{"name":"default-token-ab12c","annotations":{"kubernetes.io/service-account.name":"default"}},"type":"kubernetes.io/service-account-token"}`, "issues its own"},
		{"a token someone asked for in a Velero backup is made", "skip", "secrets",
			`{"metadata":{"name":"ci-token","annotations":{"kubernetes.io/service-account.name":"ci"}},"type":"kubernetes.io/service-account-token"}`, ""},
		{"an opaque secret is made", "skip", "secrets", `{"type":"Opaque"}`, ""},
	})
	if !For("secrets").Secret || For("configmaps").Secret {
		t.Error("only Secrets get keyed digests")
	}
}

// TestTokenNeverStored: a backup stores a token Secret without its token (a credential for the
// source only) and its account's UID; other Secrets as they are.
func TestTokenNeverStored(t *testing.T) {
	capture := For("secrets").Capture
	token := decode(t, `{"metadata":{"name":"ci-token","annotations":{"kubernetes.io/service-account.name":"ci","kubernetes.io/service-account.uid":"u-1"}},"type":"kubernetes.io/service-account-token","data":{"token":"dA==","ca.crt":"Yw==","namespace":"YQ=="}}`)
	capture(token)
	if want := decode(t, `{"metadata":{"name":"ci-token","annotations":{"kubernetes.io/service-account.name":"ci"}},"type":"kubernetes.io/service-account-token"}`); !reflect.DeepEqual(token, want) {
		t.Errorf("captured token Secret %v, want %v", token, want)
	}
	opaque := decode(t, `{"metadata":{"name":"s"},"type":"Opaque","data":{"token":"dA=="}}`)
	capture(opaque)
	if want := decode(t, `{"metadata":{"name":"s"},"type":"Opaque","data":{"token":"dA=="}}`); !reflect.DeepEqual(opaque, want) {
		t.Errorf("captured opaque Secret %v, want it as it was", opaque)
	}
}
