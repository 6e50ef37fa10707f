package resources

import (
	"reflect"
	"testing"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/rules"
)

// TestSteps: types of one wave are restored at once unless one owns another or a rule names one
// as made first (a token Secret's ServiceAccount).
func TestSteps(t *testing.T) {
	order := []plans.Resource{
		{Resource: "configmaps", Wave: rules.WaveConfig}, {Resource: "serviceaccounts", Wave: rules.WaveConfig},
		{Resource: "secrets", Wave: rules.WaveConfig},
		{Resource: "deployments", Group: "apps", Wave: rules.WaveRest}, {Resource: "services", Wave: rules.WaveRest},
		{Resource: "pods", Wave: rules.WaveRest, OwnedBy: []string{"deployments.apps"}},
	}
	var got [][]string
	for _, step := range steps(order) {
		var names []string
		for _, r := range step {
			names = append(names, r.GroupResource())
		}
		got = append(got, names)
	}
	want := [][]string{{"configmaps", "serviceaccounts"}, {"secrets"}, {"deployments.apps", "services"}, {"pods"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("steps %v, want %v", got, want)
	}
}
