package rules

import (
	"strings"
	"testing"
)

// TestNever: the types that never move, and some that do.
func TestNever(t *testing.T) {
	for gr, want := range map[string]string{
		"nodes":                              "belong to the cluster",
		"events":                             "source cluster's past",
		"endpoints":                          "", // those written by hand move (endpoints_test.go)
		"endpointslices.discovery.k8s.io":    "",
		"apiservices.apiregistration.k8s.io": "registered by the target's API server",
		"certificatesigningrequests.certificates.k8s.io": "source cluster's signers",
		"configmaps":            "",
		"profiles.kubeflow.org": "",
		// A simulator's resources are its installation's to exclude (the testbed's ferry.yaml does).
		"execs.kwok.x-k8s.io": "",
	} {
		got := For(gr).Never
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("%s: never moves because %q, want %q", gr, got, want)
		}
	}
}

// TestBeingDeletedStays: an object being deleted on the source (held by a finalizer, say) never
// moves, of any type: made on the target, it would not be being deleted there.
func TestBeingDeletedStays(t *testing.T) {
	runCases(t, []ruleCase{
		{"a ConfigMap held by a finalizer", "exclude", "configmaps",
			`{"metadata":{"namespace":"a","name":"c","deletionTimestamp":"2026-12-01T00:00:00Z","finalizers":["example.com/hold"]}}`, "being deleted"},
		{"a custom resource", "exclude", "widgets.example.com",
			`{"metadata":{"namespace":"a","name":"w","deletionTimestamp":"2026-12-01T00:00:00Z"}}`, "being deleted"},
		{"a ConfigMap with a finalizer, not being deleted, moves", "exclude", "configmaps",
			`{"metadata":{"namespace":"a","name":"c","finalizers":["example.com/hold"]}}`, ""},
	})
}
