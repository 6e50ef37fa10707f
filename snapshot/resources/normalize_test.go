package resources

import (
	"encoding/json"
	"testing"
)

func parse(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestNormalize(t *testing.T) {
	for _, tc := range []struct {
		name, gr, in, want string
	}{
		{"server-set metadata and status", "configmaps",
			`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"n","uid":"u","resourceVersion":"7","creationTimestamp":"t","managedFields":[{}],"labels":{"a":"b"},"ownerReferences":[{"kind":"X","name":"x","uid":"u2"}]},"data":{"k":"v"},"status":{"x":1}}`,
			`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"n","labels":{"a":"b"},"ownerReferences":[{"kind":"X","name":"x"}]},"data":{"k":"v"}}`},
		{"a kind's rule reads the managed fields before they go: node ports a field manager set stay", "services",
			`{"metadata":{"name":"s","managedFields":[{"manager":"kubectl","operation":"Apply","fieldsV1":{"f:spec":{"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{"f:nodePort":{},"f:port":{}},"k:{\"port\":53,\"protocol\":\"UDP\"}":{"f:port":{}}}}}}]},"spec":{"type":"NodePort","ports":[{"port":80,"protocol":"TCP","nodePort":30080},{"port":53,"protocol":"UDP","nodePort":31053}]}}`,
			`{"metadata":{"name":"s"},"spec":{"type":"NodePort","ports":[{"port":80,"protocol":"TCP","nodePort":30080},{"port":53,"protocol":"UDP"}]}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := parse(t, tc.in)
			got, _ := json.Marshal(Normalize(tc.gr, in))
			want, _ := json.Marshal(parse(t, tc.want))
			if string(got) != string(want) {
				t.Fatalf("Normalize:\n got %s\nwant %s", got, want)
			}
			if again, _ := json.Marshal(parse(t, tc.in)); string(again) != mustJSON(t, in) {
				t.Fatal("Normalize changed its input")
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestDigestIgnoresServerFieldsOnly(t *testing.T) {
	a := parse(t, `{"kind":"ConfigMap","metadata":{"name":"c","uid":"1","resourceVersion":"1"},"data":{"k":"v"}}`)
	b := parse(t, `{"kind":"ConfigMap","metadata":{"name":"c","uid":"2","resourceVersion":"9"},"data":{"k":"v"}}`)
	c := parse(t, `{"kind":"ConfigMap","metadata":{"name":"c","uid":"2","resourceVersion":"9"},"data":{"k":"w"}}`)
	da, _ := Digest("configmaps", a)
	db, _ := Digest("configmaps", b)
	dc, _ := Digest("configmaps", c)
	if da != db || da == dc {
		t.Fatalf("digests: same content %s/%s, changed data %s", da, db, dc)
	}
}
