package rules

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestClaim(t *testing.T) {
	runCases(t, []ruleCase{
		{"claim binding", "normalize", "persistentvolumeclaims",
			`{"metadata":{"name":"p","annotations":{"pv.kubernetes.io/bind-completed":"yes","keep":"me"}},"spec":{"volumeName":"pv-1","storageClassName":"standard"}}`,
			`{"metadata":{"name":"p","annotations":{"keep":"me"}},"spec":{"storageClassName":"standard"}}`},
		{"claim filled from a data source", "normalize", "persistentvolumeclaims",
			`{"metadata":{"name":"p"},"spec":{"storageClassName":"standard","dataSource":{"apiGroup":"snapshot.storage.k8s.io","kind":"VolumeSnapshot","name":"nightly"},"dataSourceRef":{"apiGroup":"snapshot.storage.k8s.io","kind":"VolumeSnapshot","name":"nightly"}}}`,
			`{"metadata":{"name":"p"},"spec":{"storageClassName":"standard"}}`},
		{"claim: class mapped", "prepare", "persistentvolumeclaims",
			`{"metadata":{"name":"p","namespace":"team-b"},"spec":{"storageClassName":"gp3"}}`,
			`{"metadata":{"name":"p","namespace":"team-b"},"spec":{"storageClassName":"standard"}}`},
		{"claim of no class mapped", "prepare", "persistentvolumeclaims",
			`{"metadata":{"name":"p","namespace":"team-b"},"spec":{"storageClassName":""}}`,
			`{"metadata":{"name":"p","namespace":"team-b"},"spec":{"storageClassName":"standard"}}`},
		{"an ephemeral volume's claim stays", "exclude", "persistentvolumeclaims",
			`{"metadata":{"name":"exec-1-scratch","ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"exec-1","controller":true}]}}`, "a generic ephemeral volume of pod exec-1"},
		{"an ephemeral volume's claim in a Velero backup", "skip", "persistentvolumeclaims",
			`{"metadata":{"name":"exec-1-scratch","ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"exec-1","controller":true}]}}`, "a generic ephemeral volume of pod exec-1"},
		{"an operator's claim moves", "exclude", "persistentvolumeclaims",
			`{"metadata":{"name":"main-1","ownerReferences":[{"apiVersion":"postgresql.cnpg.io/v1","kind":"Cluster","name":"main","controller":true}]}}`, ""},
		{"a claim a restore made larger gets the backup's request back", "normalize", "persistentvolumeclaims",
			`{"metadata":{"name":"p","annotations":{"ferry.dev/fitted-storage":"{\"requested\":\"1Gi\",\"fitted\":\"6Gi\"}"}},"spec":{"resources":{"requests":{"storage":"6Gi"}}}}`,
			`{"metadata":{"name":"p"},"spec":{"resources":{"requests":{"storage":"1Gi"}}}}`},
		{"a record that does not read is dropped", "normalize", "persistentvolumeclaims",
			`{"metadata":{"name":"p","annotations":{"ferry.dev/fitted-storage":"{"}},"spec":{"resources":{"requests":{"storage":"6Gi"}}}}`,
			`{"metadata":{"name":"p"},"spec":{"resources":{"requests":{"storage":"6Gi"}}}}`},
		{"one grown since keeps its request", "normalize", "persistentvolumeclaims",
			`{"metadata":{"name":"p","annotations":{"ferry.dev/fitted-storage":"{\"requested\":\"1Gi\",\"fitted\":\"6Gi\"}"}},"spec":{"resources":{"requests":{"storage":"10Gi"}}}}`,
			`{"metadata":{"name":"p"},"spec":{"resources":{"requests":{"storage":"10Gi"}}}}`},
		{"a bound claim is healthy", "health", "persistentvolumeclaims", `{"status":{"phase":"Bound"}}`, "ok"},
		{"a pending claim is not", "health", "persistentvolumeclaims", `{"status":{"phase":"Pending"}}`, "the claim is pending"},
		{"a claim that never had a volume was never ready", "never ready", "persistentvolumeclaims", `{"status":{"phase":"Pending"}}`, "true"},
		{"one pre-bound to a volume may bind", "never ready", "persistentvolumeclaims", `{"spec":{"volumeName":"pv-1"},"status":{"phase":"Pending"}}`, "false"},
		{"a bound claim was ready", "never ready", "persistentvolumeclaims", `{"spec":{"volumeName":"pv-1"},"status":{"phase":"Bound"}}`, "false"},
		{"a Deployment has no such rule", "never ready", "deployments.apps", `{"status":{}}`, "false"},
	})
}

func TestFitClaim(t *testing.T) {
	const mib, gib = 1 << 20, 1 << 30
	for _, c := range []struct {
		name             string
		request          string
		bytes, names     int64
		wantFrom, wantTo string
	}{
		{"files fit with room", "10Gi", 5 * gib, 1000, "", ""},
		{"5 MiB in 1Mi", "1Mi", 5 * mib, 3, "1Mi", "6Mi"},
		{"small files take a block each", "1Mi", 300 * 1000, 300, "1Mi", "2Mi"},
		{"30 GiB in 1Gi: whole GiB", "1Gi", 30 * gib, 10000, "1Gi", "34Gi"},
		{"a full volume keeps its size", "10Gi", 10*gib - 100*mib, 10, "", ""},
		{"a disk image's size counts whole", "10Gi", 10*gib - 600*mib, 1, "", ""},
		{"one block over", "10Gi", 10 * gib, 1, "10Gi", "12Gi"},
		{"a request in decimal units", "1G", 2 * gib, 1, "1G", "3Gi"},
		{"no request ferry reads", "", 5 * gib, 1, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			obj := claim(c.request, "")
			before, _ := json.Marshal(obj)
			from, to := FitClaim(obj, c.bytes, c.names)
			if from != c.wantFrom || to != c.wantTo {
				t.Fatalf("FitClaim(%s, %d bytes, %d names) = %q, %q; want %q, %q", c.request, c.bytes, c.names, from, to, c.wantFrom, c.wantTo)
			}
			if to == "" {
				if after, _ := json.Marshal(obj); string(after) != string(before) {
					t.Errorf("a claim large enough was changed: %s", after)
				}
				return
			}
			if got := nestedMap(obj, "spec", "resources", "requests")["storage"]; got != to {
				t.Errorf("request %v, want %s", got, to)
			}
			// Normalized, the claim is the backup's again.
			For("persistentvolumeclaims").Normalize(obj)
			if want := claim(c.request, ""); !reflect.DeepEqual(obj, want) {
				t.Errorf("normalized: %v, want %v", obj, want)
			}
		})
	}
}

func TestGrowClaim(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name         string
		live         map[string]any
		bytes        int64
		wantFrom     string
		wantTo       string
		wantRecorded string
	}{
		{"holds its files", claim("1Gi", ""), 5 * mib, "", "", ""},
		{"a claim of the target's own grows, its request recorded", claim("1Mi", ""), 5 * mib, "1Mi", "6Mi", `{"requested":"1Mi","fitted":"6Mi"}`},
		{"one ferry made larger keeps the backup's request", claim("6Mi", `{"requested":"1Mi","fitted":"6Mi"}`), 12 * mib, "6Mi", "14Mi", `{"requested":"1Mi","fitted":"14Mi"}`},
		{"a record someone's change made stale is not kept", claim("8Mi", `{"requested":"1Mi","fitted":"6Mi"}`), 12 * mib, "8Mi", "14Mi", `{"requested":"8Mi","fitted":"14Mi"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			patch, from, to := GrowClaim(c.live, c.bytes, 1)
			if from != c.wantFrom || to != c.wantTo {
				t.Fatalf("GrowClaim = %q, %q; want %q, %q", from, to, c.wantFrom, c.wantTo)
			}
			if to == "" {
				if patch != nil {
					t.Errorf("a patch for a claim that holds its files: %v", patch)
				}
				return
			}
			want := map[string]any{
				"metadata": map[string]any{"annotations": map[string]any{FittedAnnotation: c.wantRecorded}},
				"spec":     map[string]any{"resources": map[string]any{"requests": map[string]any{"storage": c.wantTo}}},
			}
			if !reflect.DeepEqual(patch, want) {
				t.Errorf("patch %v, want %v", patch, want)
			}
		})
	}
}

func TestKeepLargerRequest(t *testing.T) {
	const record = `{"requested":"1Gi","fitted":"6Gi"}`
	for _, c := range []struct {
		name      string
		obj, live map[string]any
		want      map[string]any
	}{
		{"the target's is larger: kept, with ferry's record", claim("1Gi", ""), claim("6Gi", record), claim("6Gi", record)},
		{"the target's grown by hand", claim("1Gi", ""), claim("10Gi", ""), claim("10Gi", "")},
		{"a stale record stays behind", claim("1Gi", ""), claim("10Gi", record), claim("10Gi", "")},
		{"the backup's is larger: it grows the target's", claim("5Gi", ""), claim("1Gi", ""), claim("5Gi", "")},
	} {
		t.Run(c.name, func(t *testing.T) {
			KeepLargerRequest(c.obj, c.live)
			if !reflect.DeepEqual(c.obj, c.want) {
				t.Errorf("got %v, want %v", c.obj, c.want)
			}
		})
	}
}

// claim is a claim requesting storage, with FitClaim's record when record is not "".
func claim(storage, record string) map[string]any {
	obj := map[string]any{"metadata": map[string]any{"name": "p"},
		"spec": map[string]any{"resources": map[string]any{"requests": map[string]any{"storage": storage}}}}
	if record != "" {
		setAnnotation(obj, FittedAnnotation, record)
	}
	return obj
}
