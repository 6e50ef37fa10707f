package rules

import "testing"

func TestControllerRevision(t *testing.T) {
	for in, want := range map[string]int64{`{"revision":2}`: 2, `{"revision":2.0}`: 2, `{}`: 0} {
		if got := For("controllerrevisions.apps").Revision(decode(t, in)); got != want {
			t.Errorf("revision of %s = %d, want %d", in, got, want)
		}
	}
	if !For("controllerrevisions.apps").History || For("controllerrevisions.apps").Normalize != nil {
		t.Error("a ControllerRevision is history and keeps its number")
	}
}
