package resources

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestRestoredStatus(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		copyGeneration int64 // the copy's on the target; 1 when not given (a new object)
	}{
		{"no status", `{"metadata":{"generation":3}}`, `null`, 0},
		{"an empty status", `{"metadata":{"generation":3},"status":{}}`, `null`, 0},
		{"observed the latest spec: the new object's generation",
			`{"metadata":{"generation":3},"status":{"observedGeneration":3,"phase":"Succeeded","conditions":[{"type":"Succeeded","status":"True","observedGeneration":3},{"type":"Created","status":"True","observedGeneration":2}]}}`,
			`{"observedGeneration":1,"phase":"Succeeded","conditions":[{"type":"Succeeded","status":"True","observedGeneration":1},{"type":"Created","status":"True"}]}`, 0},
		{"an older spec observed: left out",
			`{"metadata":{"generation":4},"status":{"observedGeneration":3,"phase":"Running"}}`,
			`{"phase":"Running"}`, 0},
		{"no generation: left out", `{"metadata":{},"status":{"observedGeneration":1,"phase":"Running"}}`, `{"phase":"Running"}`, 0},
		{"a copy already on the target: its generation",
			`{"metadata":{"generation":2},"status":{"observedGeneration":2,"phase":"Succeeded"}}`,
			`{"observedGeneration":5,"phase":"Succeeded"}`, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var obj, want map[string]any
			if err := json.Unmarshal([]byte(tc.in), &obj); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatal(err)
			}
			got := restoredStatus(obj, max(tc.copyGeneration, 1))
			gotJSON, _ := json.Marshal(got)
			var gotBack map[string]any
			_ = json.Unmarshal(gotJSON, &gotBack)
			if !reflect.DeepEqual(gotBack, want) {
				t.Errorf("restoredStatus = %s, want %s", gotJSON, tc.want)
			}
			if obj["status"] != nil && reflect.ValueOf(obj["status"]).Pointer() == reflect.ValueOf(got).Pointer() {
				t.Error("restoredStatus returned the backup's own map, not a copy")
			}
		})
	}
}

// TestRestoredStatusNumbers: an archive's objects hold numbers as json.Number (read from the
// archive) or float64 (from the spool), the API machinery's as int64.
func TestRestoredStatusNumbers(t *testing.T) {
	for _, n := range []any{json.Number("2"), float64(2), int64(2)} {
		obj := map[string]any{"metadata": map[string]any{"generation": n}, "status": map[string]any{"observedGeneration": n}}
		if got := restoredStatus(obj, 1)["observedGeneration"]; got != int64(1) {
			t.Errorf("generation %T: observedGeneration %v, want 1", n, got)
		}
	}
}
