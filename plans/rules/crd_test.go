package rules

import "testing"

func TestCRDReady(t *testing.T) {
	for in, want := range map[string]bool{
		`{"status":{"conditions":[{"type":"Established","status":"True"},{"type":"NamesAccepted","status":"True"}]}}`:  true,
		`{"status":{"conditions":[{"type":"Established","status":"False"},{"type":"NamesAccepted","status":"True"}]}}`: false,
		`{"status":{"conditions":[{"type":"Established","status":"True"}]}}`:                                           false,
		`{}`: false,
	} {
		if got := For("customresourcedefinitions.apiextensions.k8s.io").Ready(decode(t, in)); got != want {
			t.Errorf("ready %s = %v, want %v", in, got, want)
		}
	}
}

func TestCRDConversionWebhookFollowsTheMapping(t *testing.T) {
	runCases(t, []ruleCase{
		{"a conversion webhook's service follows", "prepare", "customresourcedefinitions.apiextensions.k8s.io",
			`{"spec":{"conversion":{"strategy":"Webhook","webhook":{"clientConfig":{"service":{"name":"conv","namespace":"team-a","path":"/convert"}}}}}}`,
			`{"spec":{"conversion":{"strategy":"Webhook","webhook":{"clientConfig":{"service":{"name":"conv","namespace":"team-b","path":"/convert"}}}}}}`},
		{"no webhook, nothing to map", "prepare", "customresourcedefinitions.apiextensions.k8s.io",
			`{"spec":{"conversion":{"strategy":"None"}}}`, `{"spec":{"conversion":{"strategy":"None"}}}`},
	})
}
