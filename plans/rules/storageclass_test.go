package rules

import (
	"encoding/json"
	"testing"
)

func TestDefaultClasses(t *testing.T) {
	runCases(t, []ruleCase{
		{"a default storage class moves without its mark", "normalize", "storageclasses.storage.k8s.io",
			`{"metadata":{"name":"fast","annotations":{"storageclass.kubernetes.io/is-default-class":"true","owner":"team-a"}},"provisioner":"x"}`,
			`{"metadata":{"name":"fast","annotations":{"owner":"team-a"}},"provisioner":"x"}`},
		{"the beta mark too", "normalize", "storageclasses.storage.k8s.io",
			`{"metadata":{"name":"fast","annotations":{"storageclass.beta.kubernetes.io/is-default-class":"true"}},"provisioner":"x"}`,
			`{"metadata":{"name":"fast"},"provisioner":"x"}`},
		{"a default snapshot class", "normalize", "volumesnapshotclasses.snapshot.storage.k8s.io",
			`{"metadata":{"name":"snap","annotations":{"snapshot.storage.kubernetes.io/is-default-class":"true"}},"driver":"x"}`,
			`{"metadata":{"name":"snap"},"driver":"x"}`},
		{"a default ingress class", "normalize", "ingressclasses.networking.k8s.io",
			`{"metadata":{"name":"nginx","annotations":{"ingressclass.kubernetes.io/is-default-class":"true"}},"spec":{"controller":"x"}}`,
			`{"metadata":{"name":"nginx"},"spec":{"controller":"x"}}`},
	})
}

// A restore marks a class as the backup did from the backed-up copy (DefaultMark.Mark), when the
// target has no default of its own; Marked tells which are marked.
func TestDefaultMark(t *testing.T) {
	for _, tc := range []struct {
		gr, backedUp, want string
		marked             bool
	}{
		{"storageclasses.storage.k8s.io", `{"metadata":{"name":"a","annotations":{"storageclass.kubernetes.io/is-default-class":"true"}}}`,
			`{"metadata":{"annotations":{"storageclass.kubernetes.io/is-default-class":"true"},"name":"a"}}`, true},
		{"storageclasses.storage.k8s.io", `{"metadata":{"name":"a","annotations":{"storageclass.beta.kubernetes.io/is-default-class":"true"}}}`,
			`{"metadata":{"annotations":{"storageclass.beta.kubernetes.io/is-default-class":"true"},"name":"a"}}`, true},
		{"storageclasses.storage.k8s.io", `{"metadata":{"name":"a","annotations":{"storageclass.kubernetes.io/is-default-class":"false"}}}`, "", false},
		{"ingressclasses.networking.k8s.io", `{"metadata":{"name":"a"}}`, "", false},
		{"priorityclasses.scheduling.k8s.io", `{"metadata":{"name":"a"},"globalDefault":true}`, `{"globalDefault":true,"metadata":{"name":"a"}}`, true},
		{"priorityclasses.scheduling.k8s.io", `{"metadata":{"name":"a"},"globalDefault":false}`, "", false},
	} {
		mark := For(tc.gr).Default
		var backedUp map[string]any
		if err := json.Unmarshal([]byte(tc.backedUp), &backedUp); err != nil {
			t.Fatal(err)
		}
		if got := mark.Marked(backedUp); got != tc.marked {
			t.Errorf("%s %s: marked %v, want %v", tc.gr, tc.backedUp, got, tc.marked)
		}
		if !tc.marked {
			continue
		}
		obj := map[string]any{"metadata": map[string]any{"name": "a"}}
		mark.Mark(obj, backedUp)
		if got, _ := json.Marshal(obj); string(got) != tc.want {
			t.Errorf("%s: marked as %s, want %s", tc.gr, got, tc.want)
		}
	}
}
