package resources

import (
	"maps"
	"testing"
)

// TestHigherLimits: before a restore that replaces the target's objects, a quota is raised only
// where the backup's limit is higher than the target's, or the target has none.
func TestHigherLimits(t *testing.T) {
	live := map[string]string{"services": "1", "requests.storage": "10Gi", "count/secrets": "20"}
	for _, tc := range []struct {
		name string
		want map[string]any
		out  map[string]any
	}{
		{"same", map[string]any{"services": "1", "requests.storage": "10Gi"}, nil},
		{"lower", map[string]any{"count/secrets": "2"}, nil},
		{"higher and new", map[string]any{"services": "3", "requests.storage": "10240Mi", "count/configmaps": "5"}, map[string]any{"services": "3", "count/configmaps": "5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := higherLimits(live, tc.want)
			if ok != (tc.out != nil) || !maps.Equal(got, tc.out) && tc.out != nil {
				t.Errorf("higherLimits = %v, %v; want %v", got, ok, tc.out)
			}
		})
	}
}
