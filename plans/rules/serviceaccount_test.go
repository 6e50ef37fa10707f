package rules

import "testing"

func TestServiceAccount(t *testing.T) {
	runCases(t, []ruleCase{
		{"default SA", "exclude", "serviceaccounts", `{"metadata":{"namespace":"a","name":"default"}}`, "controller manager"},
		{"a user's SA", "exclude", "serviceaccounts", `{"metadata":{"namespace":"a","name":"builder"}}`, ""},
		{"token secrets dropped from service accounts", "prepare", "serviceaccounts",
			`{"metadata":{"name":"sa","namespace":"x"},"secrets":[{"name":"sa-token-abcde"},{"name":"other"}]}`,
			`{"metadata":{"name":"sa","namespace":"x"},"secrets":[{"name":"other"}]}`},
		{"only token secrets: the list goes", "prepare", "serviceaccounts",
			`{"metadata":{"name":"sa","namespace":"x"},"secrets":[{"name":"sa-token-abcde"}]}`,
			`{"metadata":{"name":"sa","namespace":"x"}}`},
	})
}
