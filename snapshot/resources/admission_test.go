package resources

import (
	"errors"
	"slices"
	"testing"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/snapshot"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestRefusal: an object refused because its admission webhook's server could not be called
// awaits the writers only where the target's writers are stopped (AwaitAdmission); a webhook
// that answered and denied it, and every other refusal, is a failure.
func TestRefusal(t *testing.T) {
	experiments := schema.GroupResource{Group: "kubeflow.org", Resource: "experiments"}
	unreachable := apierrors.NewInternalError(errors.New(`failed calling webhook "validator.experiment.katib.kubeflow.org": no endpoints available for service "katib-controller"`))
	denied := apierrors.NewForbidden(experiments, "tune", errors.New(`admission webhook "validator.experiment.katib.kubeflow.org" denied the request`))
	for _, tc := range []struct {
		name     string
		await    bool
		err      error
		want     string
		whyEmpty bool
	}{
		{"unreachable, writers stopped", true, unreachable, snapshot.StatusAwaiting, false},
		{"unreachable, writers running", false, unreachable, snapshot.StatusFailed, true},
		{"denied, writers stopped", true, denied, snapshot.StatusFailed, true},
	} {
		status, why := Objects{AwaitAdmission: tc.await}.refusal(tc.err)
		if status != tc.want || (why == "") != tc.whyEmpty {
			t.Errorf("%s: %s %q, want %s", tc.name, status, why, tc.want)
		}
	}
}

// TestCarryBackOnly: narrowed to the objects that awaited blue's writers, a carry-back makes,
// deletes and checks only those.
func TestCarryBackOnly(t *testing.T) {
	cb := &CarryBack{Expected: &Archive{ByResource: map[string][]Entry{
		"experiments.kubeflow.org": {
			{Namespace: "team", Object: decode(t, `{"apiVersion":"kubeflow.org/v1beta1","kind":"Experiment","metadata":{"name":"tune","namespace":"team"}}`)},
			{Namespace: "team", Object: decode(t, `{"apiVersion":"kubeflow.org/v1beta1","kind":"Experiment","metadata":{"name":"same","namespace":"team"}}`)},
		},
		"configmaps": {{Namespace: "team", Object: decode(t, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"settings","namespace":"team"}}`)}},
	}},
		Deleted: []Entry{{GroupResource: "experiments.kubeflow.org", Namespace: "team", Name: "old", APIVersion: "kubeflow.org/v1beta1", Kind: "Experiment"},
			{GroupResource: "configmaps", Namespace: "team", Name: "gone", APIVersion: "v1", Kind: "ConfigMap"}},
		Created: []string{"kubeflow.org/v1beta1 Experiment team/tune", "v1 ConfigMap team/settings"},
	}
	only := cb.Only([]string{"kubeflow.org/v1beta1 Experiment team/tune", "kubeflow.org/v1beta1 Experiment team/old"})
	var kept []string
	for _, entries := range only.Expected.ByResource {
		for _, e := range entries {
			kept = append(kept, e.ID())
		}
	}
	if !slices.Equal(kept, []string{"kubeflow.org/v1beta1 Experiment team/tune"}) || only.Expected.Count != 1 {
		t.Errorf("expected objects kept: %v (count %d)", kept, only.Expected.Count)
	}
	if len(only.Deleted) != 1 || only.Deleted[0].Name != "old" {
		t.Errorf("deletions kept: %+v", only.Deleted)
	}
	if !slices.Equal(only.Created, []string{"kubeflow.org/v1beta1 Experiment team/tune"}) || len(only.Changed) != 0 {
		t.Errorf("created %v, changed %v", only.Created, only.Changed)
	}
	if len(cb.Expected.ByResource["experiments.kubeflow.org"]) != 2 || len(cb.Created) != 2 {
		t.Error("Only changed the carry-back it narrowed")
	}
}

// TestOnlySelectsByTheTargetsNames: a restore narrowed to the objects that awaited the target's
// writers selects them by the names reports give them on the target (namespaces mapped), and
// nothing else.
func TestOnlySelectsByTheTargetsNames(t *testing.T) {
	c := Objects{Mapping: snapshot.Mapping{Namespaces: map[string]string{"team": "team-v2"}},
		Only: []string{"kubeflow.org/v1beta1 Experiment team-v2/tune", "v1 Namespace team-v2"}}
	for _, tc := range []struct {
		gr   string
		e    Entry
		want bool
	}{
		{"experiments.kubeflow.org", Entry{Namespace: "team", Object: decode(t, `{"apiVersion":"kubeflow.org/v1beta1","kind":"Experiment","metadata":{"name":"tune","namespace":"team"}}`)}, true},
		{"experiments.kubeflow.org", Entry{Namespace: "team", Object: decode(t, `{"apiVersion":"kubeflow.org/v1beta1","kind":"Experiment","metadata":{"name":"other","namespace":"team"}}`)}, false},
		{"experiments.kubeflow.org", Entry{Namespace: "team", Name: "tune", APIVersion: "kubeflow.org/v1beta1", Kind: "Experiment"}, true},
		{"namespaces", Entry{Name: "team", APIVersion: "v1", Kind: "Namespace"}, true},
		{"configmaps", Entry{Namespace: "team", Name: "tune", APIVersion: "v1", Kind: "ConfigMap"}, false},
	} {
		if got := c.selected(plans.Resource{Resource: tc.gr}, tc.e); got != tc.want {
			t.Errorf("%s %s: selected %v, want %v (target ID %q)", tc.gr, tc.e.ID(), got, tc.want, c.targetID(tc.gr, tc.e))
		}
	}
}

// TestCarryBackUnmade: an object green's restore left awaiting its writers and never made is not
// deleted on green: blue keeps it. Green names it in its namespace (mapped).
func TestCarryBackUnmade(t *testing.T) {
	cb := &CarryBack{Deleted: []Entry{
		{GroupResource: "experiments.kubeflow.org", Namespace: "team", Name: "tune", APIVersion: "kubeflow.org/v1beta1", Kind: "Experiment"},
		{GroupResource: "configmaps", Namespace: "team", Name: "gone", APIVersion: "v1", Kind: "ConfigMap"},
	}}
	kept := cb.Unmade([]string{"kubeflow.org/v1beta1 Experiment team-v2/tune"}, snapshot.Mapping{Namespaces: map[string]string{"team": "team-v2"}})
	if !slices.Equal(kept, []string{"kubeflow.org/v1beta1 Experiment team/tune"}) || len(cb.Deleted) != 1 || cb.Deleted[0].Name != "gone" {
		t.Errorf("kept %v, deletions left %+v", kept, cb.Deleted)
	}
}
