package rules

import "testing"

func TestServiceAccount(t *testing.T) {
	runCases(t, []ruleCase{
		{"default SA", "exclude", "serviceaccounts", `{"metadata":{"namespace":"a","name":"default"}}`, "controller manager"},
		{"default SA with only a token secret", "exclude", "serviceaccounts",
			`{"metadata":{"namespace":"a","name":"default","uid":"u1","resourceVersion":"7"},"secrets":[{"name":"default-token-x1b2c"}]}`, "controller manager"},
		{"default SA with pull secrets: moves", "exclude", "serviceaccounts",
			`{"metadata":{"namespace":"a","name":"default"},"imagePullSecrets":[{"name":"registry"}]}`, ""},
		{"default SA annotated (workload identity): moves", "exclude", "serviceaccounts",
			`{"metadata":{"namespace":"a","name":"default","annotations":{"iam.gke.io/gcp-service-account":"x@y"}}}`, ""},
		{"default SA without token mounts: moves", "exclude", "serviceaccounts",
			`{"metadata":{"namespace":"a","name":"default"},"automountServiceAccountToken":false}`, ""},
		{"a user's SA", "exclude", "serviceaccounts", `{"metadata":{"namespace":"a","name":"builder"}}`, ""},
		{"token secrets dropped from service accounts", "prepare", "serviceaccounts",
			`{"metadata":{"name":"sa","namespace":"x"},"secrets":[{"name":"sa-token-abcde"},{"name":"other"}]}`,
			`{"metadata":{"name":"sa","namespace":"x"},"secrets":[{"name":"other"}]}`},
		{"a token someone named after the account stays listed", "prepare", "serviceaccounts",
			`{"metadata":{"name":"ci","namespace":"x"},"secrets":[{"name":"ci-token-prod1"},{"name":"ci-token-prod"}]}`,
			`{"metadata":{"name":"ci","namespace":"x"},"secrets":[{"name":"ci-token-prod"}]}`},
		{"only token secrets: the list goes", "prepare", "serviceaccounts",
			`{"metadata":{"name":"sa","namespace":"x"},"secrets":[{"name":"sa-token-abcde"}]}`,
			`{"metadata":{"name":"sa","namespace":"x"}}`},
		{"the target's default SA gains the backup's settings", "merge", "serviceaccounts",
			`{"want":{"metadata":{"name":"default","labels":{"team":"a"},"annotations":{"iam.gke.io/gcp-service-account":"x@y"}},
			  "imagePullSecrets":[{"name":"registry"}],"automountServiceAccountToken":false},
			 "live":{"metadata":{"name":"default","labels":{"green":"own"}},"imagePullSecrets":[{"name":"greens"}]}}`,
			`{"metadata":{"labels":{"team":"a"},"annotations":{"iam.gke.io/gcp-service-account":"x@y"}},
			  "imagePullSecrets":[{"name":"greens"},{"name":"registry"}],"automountServiceAccountToken":false}`},
		{"the target's default SA already has them: nothing to merge", "merge", "serviceaccounts",
			`{"want":{"metadata":{"name":"default"},"imagePullSecrets":[{"name":"registry"}]},
			 "live":{"metadata":{"name":"default"},"imagePullSecrets":[{"name":"registry"}]}}`, `null`},
		{"a user's SA is not merged", "merge", "serviceaccounts",
			`{"want":{"metadata":{"name":"builder","labels":{"a":"b"}}},"live":{"metadata":{"name":"builder"}}}`, `null`},
	})
}
