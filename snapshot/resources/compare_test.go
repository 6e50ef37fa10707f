package resources

import (
	"encoding/base64"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestCompare(t *testing.T) {
	for _, tc := range []struct {
		name             string
		expected, actual string
		want             []string
	}{
		{"same", `{"a":1,"b":{"c":"x"}}`, `{"a":1,"b":{"c":"x"}}`, nil},
		{"target adds defaults", `{"spec":{"replicas":1}}`, `{"spec":{"replicas":1,"revisionHistoryLimit":10}}`, nil},
		{"changed value", `{"data":{"k":"v"}}`, `{"data":{"k":"w"}}`, []string{`data.k: backup "v", target "w"`}},
		{"lost field", `{"data":{"k":"v","l":"x"}}`, `{"data":{"k":"v"}}`, []string{`data.l: missing on the target (backup: "x")`}},
		{"list shorter", `{"a":[1,2]}`, `{"a":[1]}`, []string{`a: backup [1,2], target [1]`}},
		{"inside a list", `{"c":[{"name":"x","image":"a"}]}`, `{"c":[{"name":"x","image":"b","pull":"IfNotPresent"}]}`, []string{`c[0].image: backup "a", target "b"`}},
		{"empty matches missing", `{"metadata":{"labels":{}},"x":null,"y":[]}`, `{"metadata":{}}`, nil},
		{"dotted keys quoted", `{"metadata":{"labels":{"app.kubernetes.io/name":"a"}}}`, `{"metadata":{"labels":{}}}`,
			[]string{`metadata.labels["app.kubernetes.io/name"]: missing on the target (backup: "a")`}},
		{"type changed", `{"a":{"b":1}}`, `{"a":"s"}`, []string{`a: backup {"b":1}, target "s"`}},
		{"kubectl's record of a field after the field", `{"metadata":{"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"spec\":1}"}},"spec":1}`,
			`{"metadata":{"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"spec\":2}"}},"spec":2}`,
			[]string{`spec: backup 1, target 2`, `metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"]: backup "{\"spec\":1}", target "{\"spec\":2}"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Compare(decode(t, tc.expected), decode(t, tc.actual))
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Compare = %q, want %q", got, tc.want)
			}
		})
	}
	// Numbers compare by value whatever their Go type.
	if d := Compare(map[string]any{"n": float64(3)}, map[string]any{"n": int64(3)}); d != nil {
		t.Errorf("float64 3 vs int64 3: %q", d)
	}
}

// TestCompareSecret: a Secret's differences name the field and the lengths, never a value nor a
// part of one, whichever side holds the Secret and whichever way round the restore, verify or
// carry-back compares; its identity (name, namespace, labels, type) stays readable.
func TestCompareSecret(t *testing.T) {
	const secret = `"apiVersion":"v1","kind":"Secret",`
	for _, tc := range []struct {
		name             string
		expected, actual string
		want             []string
	}{
		{"data value changed", `{` + secret + `"data":{"password":"aHVudGVyMmh1bnRlcg=="}}`, `{` + secret + `"data":{"password":"c2VjcmV0MDAx"}}`,
			[]string{"data.password: differs (backup 13 bytes, target 9 bytes)"}},
		{"same length", `{` + secret + `"data":{"k":"YWFh"}}`, `{` + secret + `"data":{"k":"YmJi"}}`,
			[]string{"data.k: differs (backup 3 bytes, target 3 bytes)"}},
		{"data key lost", `{` + secret + `"data":{"k":"YWFh","l":"Ymxh"}}`, `{` + secret + `"data":{"k":"YWFh"}}`,
			[]string{"data.l: missing on the target (backup: 3 bytes)"}},
		{"dotted data key", `{` + secret + `"data":{"tls.key":"YWFh"}}`, `{` + secret + `"data":{"tls.key":"YmJiYg=="}}`,
			[]string{`data["tls.key"]: differs (backup 3 bytes, target 4 bytes)`}},
		{"all data gone", `{` + secret + `"data":{"k":"YWFh","l":"Ymxh"}}`, `{"apiVersion":"v1","kind":"Secret"}`,
			[]string{"data: missing on the target (backup: 2 keys)"}},
		{"data no map", `{` + secret + `"data":{"k":"YWFh"}}`, `{` + secret + `"data":"c2VjcmV0"}`,
			[]string{"data: differs (backup 1 key, target 8 bytes)"}},
		{"string data", `{` + secret + `"stringData":{"token":"hunter2"}}`, `{` + secret + `"stringData":{"token":"swordfish"}}`,
			[]string{"stringData.token: differs (backup 7 bytes, target 9 bytes)"}},
		{"last-applied annotation holds the data", `{` + secret + `"metadata":{"name":"s","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"stringData\":{\"token\":\"hunter2\"}}"}}}`,
			`{` + secret + `"metadata":{"name":"s","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"stringData\":{\"token\":\"swordfish\"}}"}}}`,
			[]string{`metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"]: differs (backup 34 bytes, target 36 bytes)`}},
		{"unknown field", `{` + secret + `"extra":{"nested":["hunter2"]}}`, `{` + secret + `"extra":{"nested":["swordfish"]}}`,
			[]string{"extra.nested[0]: differs (backup 7 bytes, target 9 bytes)"}},
		{"list of another length", `{` + secret + `"extra":["hunter2"]}`, `{` + secret + `"extra":["hunter2","swordfish"]}`,
			[]string{"extra: differs (backup 1 item, target 2 items)"}},
		{"identity stays readable", `{` + secret + `"type":"Opaque","metadata":{"name":"s","labels":{"app":"a"}}}`, `{` + secret + `"type":"kubernetes.io/tls","metadata":{"name":"s","labels":{"app":"b"}}}`,
			[]string{`metadata.labels.app: backup "a", target "b"`, `type: backup "Opaque", target "kubernetes.io/tls"`}},
		{"only the target is a Secret", `{"data":{"k":"aHVudGVyMg=="}}`, `{` + secret + `"data":{"k":"c3dvcmRmaXNo"}}`,
			[]string{"data.k: differs (backup 7 bytes, target 9 bytes)"}},
		{"a ConfigMap shows its values", `{"apiVersion":"v1","kind":"ConfigMap","data":{"k":"v"}}`, `{"apiVersion":"v1","kind":"ConfigMap","data":{"k":"w"}}`,
			[]string{`data.k: backup "v", target "w"`}},
		{"a Secret of another group shows its values", `{"apiVersion":"example.com/v1","kind":"Secret","data":{"k":"v"}}`, `{"apiVersion":"example.com/v1","kind":"Secret","data":{"k":"w"}}`,
			[]string{`data.k: backup "v", target "w"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Compare(decode(t, tc.expected), decode(t, tc.actual))
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Compare = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCompareSensitive: fields ferry.yaml marks sensitive in other objects show only lengths, as a
// Secret's do; what the marks do not cover still shows its values.
func TestCompareSensitive(t *testing.T) {
	const cm = `"apiVersion":"v1","kind":"ConfigMap",`
	const deploy = `"apiVersion":"apps/v1","kind":"Deployment",`
	env := func(v string) string {
		return `{` + deploy + `"spec":{"template":{"spec":{"containers":[{"name":"app","image":"app:1","env":[{"name":"TOKEN","value":"` + v + `"}]}]}}}}`
	}
	for _, tc := range []struct {
		name             string
		sensitive        config.Sensitivity
		expected, actual string
		want             []string
	}{
		{"a marked key", config.Sensitivity{Paths: []string{"data.token"}}, `{` + cm + `"data":{"token":"hunter2","mode":"a"}}`, `{` + cm + `"data":{"token":"swordfish","mode":"b"}}`,
			[]string{`data.mode: backup "a", target "b"`, "data.token: differs (backup 7 bytes, target 9 bytes)"}},
		{"beneath a marked field", config.Sensitivity{Paths: []string{"data"}}, `{` + cm + `"data":{"token":"hunter2"}}`, `{` + cm + `"data":{"token":"swordfish"}}`,
			[]string{"data.token: differs (backup 7 bytes, target 9 bytes)"}},
		{"a missing marked key", config.Sensitivity{Paths: []string{"data.token"}}, `{` + cm + `"data":{"token":"hunter2"}}`, `{` + cm + `"data":{}}`,
			[]string{"data.token: missing on the target (backup: 7 bytes)"}},
		{"any container's env", config.Sensitivity{Paths: []string{"spec.template.spec.containers[*].env"}}, env("hunter2"), env("swordfish"),
			[]string{"spec.template.spec.containers[0].env[0].value: differs (backup 7 bytes, target 9 bytes)"}},
		{"kubectl's record repeats the marked fields", config.Sensitivity{Paths: []string{"data.token"}},
			`{` + cm + `"metadata":{"name":"c","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"data\":{\"token\":\"hunter2\"}}"}}}`,
			`{` + cm + `"metadata":{"name":"c","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"data\":{\"token\":\"swordfish\"}}"}}}`,
			[]string{`metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"]: differs (backup 28 bytes, target 30 bytes)`}},
		{"the whole object", config.Sensitivity{All: true}, `{` + cm + `"metadata":{"name":"c","labels":{"app":"a"}},"data":{"k":"aHVudGVyMg=="}}`, `{` + cm + `"metadata":{"name":"c","labels":{"app":"b"}},"data":{"k":"c3dvcmRmaXNo"}}`,
			[]string{"data.k: differs (backup 12 bytes, target 12 bytes)", `metadata.labels.app: backup "a", target "b"`}},
		{"unmarked fields show", config.Sensitivity{Paths: []string{"data.token"}}, `{` + cm + `"data":{"tokens":"a"}}`, `{` + cm + `"data":{"tokens":"b"}}`,
			[]string{`data.tokens: backup "a", target "b"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Compare(decode(t, tc.expected), decode(t, tc.actual), tc.sensitive)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Compare = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestSensitiveDifferencesOfEveryCaller: restore's and verify's comparison, with --exact, and the
// carry-back's keep the values of fields the backup's ferry.yaml marks sensitive out.
func TestSensitiveDifferencesOfEveryCaller(t *testing.T) {
	const a, b = "hunter2-canary", "swordfish-canary"
	obj := func(v string) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "c", "namespace": "ns"},
			"data":     map[string]any{"token": v}}
	}
	cfg := config.Planning{Sensitive: []config.Sensitive{{Resource: "configmaps", Paths: []string{"data.token"}}}}
	live := &unstructured.Unstructured{Object: obj(b)}
	var all []string
	all = append(all, Objects{Exact: true, Plan: &plans.Plan{Config: cfg}}.compare("configmaps", obj(a), live)...)
	all = append(all, differences(obj(a), obj(b), cfg.Sensitivity("configmaps"))...)
	if len(all) != 3 {
		t.Fatalf("differences %q; want 3", all)
	}
	for _, d := range all {
		for _, v := range []string{a, b, "hunter", "swordf"} {
			if strings.Contains(d, v) {
				t.Errorf("difference %q shows %q", d, v)
			}
		}
	}
}

// TestSecretDifferencesOfEveryCaller: restore's and verify's comparison (both ways, with --exact)
// and carry-back's both words keep a Secret's values out.
func TestSecretDifferencesOfEveryCaller(t *testing.T) {
	const a, b = "hunter2-canary", "swordfish-canary"
	obj := func(v string) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "Secret",
			"metadata":   map[string]any{"name": "s", "namespace": "ns"},
			"stringData": map[string]any{"token": v},
			"data":       map[string]any{"password": base64.StdEncoding.EncodeToString([]byte(v))}}
	}
	live := &unstructured.Unstructured{Object: obj(b)}
	var all []string
	all = append(all, Objects{Exact: true}.compare("secrets", obj(a), live)...)
	all = append(all, differences(obj(a), obj(b), config.Sensitivity{})...)
	all = append(all, differences(map[string]any{"apiVersion": "v1", "kind": "Secret"}, obj(b), config.Sensitivity{})...)
	if len(all) == 0 {
		t.Fatal("no differences found")
	}
	for _, d := range all {
		for _, v := range []string{a, b, base64.StdEncoding.EncodeToString([]byte(a)), base64.StdEncoding.EncodeToString([]byte(b)), "hunter", "swordf", "aHVudGVy", "c3dvcmRm"} {
			if strings.Contains(d, v) {
				t.Errorf("difference %q shows %q", d, v)
			}
		}
	}
	t.Logf("%q", all)
}

func TestPrepare(t *testing.T) {
	m := snapshot.Mapping{Namespaces: map[string]string{"team-a": "team-b"}, StorageClasses: map[string]string{"gp3": "standard"}}
	for _, tc := range []struct {
		name, gr, in, want string
	}{
		{"namespaced object moves", "configmaps",
			`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"team-a","uid":"u","resourceVersion":"9"},"data":{"k":"v"}}`,
			`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"team-b"},"data":{"k":"v"}}`},
		{"claim: class mapped, binding dropped", "persistentvolumeclaims",
			`{"metadata":{"name":"p","namespace":"team-a","annotations":{"pv.kubernetes.io/bind-completed":"yes"}},"spec":{"storageClassName":"gp3","volumeName":"pv-1"},"status":{"phase":"Bound"}}`,
			`{"metadata":{"name":"p","namespace":"team-b"},"spec":{"storageClassName":"standard"}}`},
		{"owner UIDs dropped", "replicasets.apps",
			`{"metadata":{"name":"r","namespace":"x","ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"d","uid":"old","controller":true}]}}`,
			`{"metadata":{"name":"r","namespace":"x","ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"d","controller":true}]}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Prepare(tc.gr, decode(t, tc.in), m)
			if want := decode(t, tc.want); !reflect.DeepEqual(got, want) {
				g, _ := json.Marshal(got)
				t.Errorf("Prepare =\n%s\nwant\n%s", g, tc.want)
			}
		})
	}
}

func TestVersionlessPath(t *testing.T) {
	for _, tc := range []struct {
		path, gr, ns, name string
		ok                 bool
	}{
		{"resources/deployments.apps/namespaces/ns1/web.json", "deployments.apps", "ns1", "web", true},
		{"resources/namespaces/cluster/ns1.json", "namespaces", "", "ns1", true},
		{"resources/deployments.apps/v1-preferredversion/namespaces/ns1/web.json", "", "", "", false},
		{"resources/namespaces/v1-preferredversion/cluster/ns1.json", "", "", "", false},
		{"metadata/version", "", "", "", false},
	} {
		gr, ns, name, ok := versionlessPath(tc.path)
		if gr != tc.gr || ns != tc.ns || name != tc.name || ok != tc.ok {
			t.Errorf("%s: got %q %q %q %v", tc.path, gr, ns, name, ok)
		}
	}
}

func TestRestoreOrderOfAVeleroBackup(t *testing.T) {
	a := &Archive{ByResource: map[string][]Entry{
		"pods":             {{Namespace: "x", Object: decode(t, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"x","ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"r"}]}}`)}},
		"replicasets.apps": {{Namespace: "x", Object: decode(t, `{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"r","namespace":"x"}}`)}},
		"namespaces":       {{Object: decode(t, `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"x"}}`)}},
		"customresourcedefinitions.apiextensions.k8s.io": {{Object: decode(t, `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"c"}}`)}},
		"configmaps": {{Namespace: "x", Object: decode(t, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"x"}}`)}},
	}}
	order, err := restoreOrder(nil, a)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range order {
		got = append(got, r.GroupResource())
	}
	want := []string{"customresourcedefinitions.apiextensions.k8s.io", "namespaces", "configmaps", "replicasets.apps", "pods"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}
