package resources

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestReplicas reads a workload's replicas as the API server's objects hold them (int64) and as
// JSON decodes the archive's (float64): the autoscaled note needs both sides'.
func TestReplicas(t *testing.T) {
	var archived map[string]any
	if err := json.Unmarshal([]byte(`{"spec":{"replicas":4}}`), &archived); err != nil {
		t.Fatal(err)
	}
	live := map[string]any{}
	if err := unstructured.SetNestedField(live, int64(2), "spec", "replicas"); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		obj  map[string]any
		want int64
	}{
		"archived": {archived, 4},
		"live":     {live, 2},
		"unset":    {map[string]any{"spec": map[string]any{}}, 0},
	} {
		if got := replicas(c.obj); got != c.want {
			t.Errorf("%s: replicas %d, want %d", name, got, c.want)
		}
	}
}
