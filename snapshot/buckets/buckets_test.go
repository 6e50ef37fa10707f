package buckets

import "testing"

func TestEscapeKey(t *testing.T) {
	for in, want := range map[string]string{
		"v2/artifacts/run-1/model.tgz": "v2/artifacts/run-1/model.tgz",
		"a//b":                         "a/%00/b",
		"/lead":                        "%00/lead",
		"trail/":                       "trail/%00",
		"../up/./x":                    "%2E%2E/up/%2E/x",
		"with space?and#hash":          "with%20space%3Fand%23hash",
		"dir/.ferry-tmp-1":             "dir/%2Eferry-tmp-1",
	} {
		if got := EscapeKey(in); got != want {
			t.Errorf("EscapeKey(%q) = %q, want %q", in, got, want)
		}
	}
}
