package snapshot

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestNameJSON(t *testing.T) {
	for _, tc := range []struct {
		name Name
		json string
	}{
		{"plain/a.txt", `"plain/a.txt"`},
		{"données-été.csv", `"données-été.csv"`},
		{"", `""`},
		{"latin1-\xe9t\xe9.txt", `{"base64":"bGF0aW4xLel06S50eHQ="}`},
		{"\xff", `{"base64":"/w=="}`},
	} {
		b, err := json.Marshal(tc.name)
		if err != nil || string(b) != tc.json {
			t.Errorf("%q is written as %s (%v), want %s", tc.name, b, err, tc.json)
		}
		var back Name
		if err := json.Unmarshal(b, &back); err != nil || back != tc.name {
			t.Errorf("%s reads back as %q (%v), want %q", b, back, err, tc.name)
		}
	}
	// What is neither form is refused, not read as some name.
	for _, bad := range []string{`{}`, `{"base64":"not base64!"}`, `{"base64":"/w==","hex":"ff"}`, `{"hex":"ff"}`, `42`, `null`, `["a"]`} {
		var n Name = "before"
		if err := json.Unmarshal([]byte(bad), &n); err == nil && bad != "null" {
			t.Errorf("%s read as %q", bad, n)
		}
	}
}

// TestFileJSONKeepsItsForm: a file whose names are UTF-8 is written as it always was.
func TestFileJSONKeepsItsForm(t *testing.T) {
	f := File{Path: "a", Type: "file", Mode: "0644", Size: 1, SHA256: "ab"}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"path":"a","type":"file","mode":"0644","uid":0,"gid":0,"size":1,"modTime":"0001-01-01T00:00:00Z","sha256":"ab"}`
	if string(b) != want {
		t.Errorf("written as %s, want %s", b, want)
	}
	var back File
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, f) {
		t.Errorf("read back as %+v (%v)", back, err)
	}
	var old File
	if err := json.Unmarshal([]byte(`{"path":{"base64":"/w=="},"type":"fifo","mode":"0600","link":"x","hardlink":{"base64":"/w=="}}`), &old); err != nil ||
		old.Path != "\xff" || old.Hardlink != "\xff" || old.Type != "fifo" {
		t.Errorf("read as %+v (%v)", old, err)
	}
}
