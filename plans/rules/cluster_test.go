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
		"ipamblocks.crd.projectcalico.org":               "Calico's address allocations",
		"ciliumidentities.cilium.io":                     "security identities",
		"ciliumnetworkpolicies.cilium.io":                "", // the user's policies move
		"nodeclaims.karpenter.sh":                        "source cluster's machines",
		"nodepools.karpenter.sh":                         "",
		"resourceslices.resource.k8s.io":                 "drivers published",
		"deviceclasses.resource.k8s.io":                  "",
		"leasecandidates.coordination.k8s.io":            "running processes",
		"configmaps":                                     "",
		"profiles.kubeflow.org":                          "",
		// A simulator's resources are its installation's to exclude (the testbed's ferry.yaml does).
		"execs.kwok.x-k8s.io": "",
	} {
		got := For(gr).Never
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("%s: never moves because %q, want %q", gr, got, want)
		}
	}
}

// TestNodesOwnStays: an object a node owns (what its agents publish about it) never moves, of any
// type.
func TestNodesOwnStays(t *testing.T) {
	runCases(t, []ruleCase{
		{"a ConfigMap a node owns", "exclude", "configmaps",
			`{"metadata":{"namespace":"a","name":"c","ownerReferences":[{"apiVersion":"v1","kind":"Node","name":"worker-1","uid":"u"}]}}`, "node worker-1"},
		{"a custom resource a node owns", "exclude", "gpus.example.com",
			`{"metadata":{"name":"g","ownerReferences":[{"apiVersion":"v1","kind":"Node","name":"worker-2","uid":"u"}]}}`, "node worker-2"},
		{"a custom Node kind's own moves", "exclude", "configmaps",
			`{"metadata":{"namespace":"a","name":"c","ownerReferences":[{"apiVersion":"example.com/v1","kind":"Node","name":"n","uid":"u"}]}}`, ""},
	})
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
