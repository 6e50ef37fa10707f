package rules

import (
	"encoding/json"
	"testing"
)

func TestReplicaSet(t *testing.T) {
	runCases(t, []ruleCase{
		{"a Deployment's ReplicaSet keeps its revision and change-cause, not its scale", "normalize", "replicasets.apps",
			`{"metadata":{"name":"r","annotations":{"deployment.kubernetes.io/revision":"3","kubernetes.io/change-cause":"v3","deployment.kubernetes.io/desired-replicas":"2","deployment.kubernetes.io/max-replicas":"3"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"d","controller":true}]}}`,
			`{"metadata":{"name":"r","annotations":{"deployment.kubernetes.io/revision":"3","kubernetes.io/change-cause":"v3"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"d","controller":true}]}}`},
		{"a bare ReplicaSet keeps its replica annotations", "normalize", "replicasets.apps",
			`{"metadata":{"name":"r","annotations":{"deployment.kubernetes.io/desired-replicas":"2"}}}`,
			`{"metadata":{"name":"r","annotations":{"deployment.kubernetes.io/desired-replicas":"2"}}}`},
	})
	if n := For("replicasets.apps").Revision(decode(t, `{"metadata":{"annotations":{"deployment.kubernetes.io/revision":"7"}}}`)); n != 7 {
		t.Errorf("revision %d, want 7", n)
	}
}

// TestRenumberRules: each history kind's numbering, as the merge patch that restores the backup's
// and the forms left to compare once the numbering is stripped.
func TestRenumberRules(t *testing.T) {
	for _, tc := range []struct {
		name, gr, want, got string
		patch               string // "" when the expected object has no numbering
		rest                string // want and got without their numbering, when patch is set
	}{
		{"a ReplicaSet the Deployment's controller numbered first", "replicasets.apps",
			`{"metadata":{"annotations":{"deployment.kubernetes.io/revision":"3","kubernetes.io/change-cause":"v3"}}}`,
			`{"metadata":{"annotations":{"deployment.kubernetes.io/revision":"1","kubernetes.io/change-cause":"v3"}}}`,
			`{"metadata":{"annotations":{"deployment.kubernetes.io/revision":"3"}}}`, `{"metadata":{"annotations":{"kubernetes.io/change-cause":"v3"}}}`},
		{"a revision history the backup lacks goes", "replicasets.apps",
			`{"metadata":{"annotations":{"deployment.kubernetes.io/revision":"3"}}}`,
			`{"metadata":{"annotations":{"deployment.kubernetes.io/revision":"3","deployment.kubernetes.io/revision-history":"3"}}}`,
			`{"metadata":{"annotations":{"deployment.kubernetes.io/revision-history":null}}}`, `{"metadata":{}}`},
		{"a ReplicaSet renumbered by its controller as its Deployment changed", "replicasets.apps",
			`{"metadata":{"annotations":{"deployment.kubernetes.io/revision":"4","deployment.kubernetes.io/revision-history":"2"}}}`,
			`{"metadata":{"annotations":{"deployment.kubernetes.io/revision":"6","deployment.kubernetes.io/revision-history":"2,4"}}}`,
			`{"metadata":{"annotations":{"deployment.kubernetes.io/revision":"4","deployment.kubernetes.io/revision-history":"2"}}}`, `{"metadata":{}}`},
		{"a ReplicaSet without a revision", "replicasets.apps", `{"metadata":{}}`, `{"metadata":{}}`, "", ""},
		{"a revision the DaemonSet's controller numbered first", "controllerrevisions.apps",
			`{"revision":3,"data":{"x":1}}`, `{"revision":1,"data":{"x":1}}`, `{"revision":3}`, `{"data":{"x":1}}`},
		{"numbered as in the backup", "controllerrevisions.apps", `{"revision":3}`, `{"revision":3}`, `{}`, `{}`},
		{"a ControllerRevision without a number", "controllerrevisions.apps", `{}`, `{"revision":1}`, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, got := decode(t, tc.want), decode(t, tc.got)
			patch, ok := For(tc.gr).Renumber(want, got)
			if !ok {
				if tc.patch != "" {
					t.Fatalf("no numbering, want patch %s", tc.patch)
				}
				return
			}
			p, _ := json.Marshal(patch)
			w, _ := json.Marshal(want)
			g, _ := json.Marshal(got)
			if string(p) != tc.patch || string(w) != tc.rest || string(g) != tc.rest {
				t.Errorf("patch %s, rest %s and %s; want %s, rest %s", p, w, g, tc.patch, tc.rest)
			}
		})
	}
}
