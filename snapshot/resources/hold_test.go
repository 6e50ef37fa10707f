package resources

import (
	"testing"

	"sigs.k8s.io/yaml"
)

func TestMountsFilledClaim(t *testing.T) {
	claims := map[string]bool{"team/workspace": true, "team/data-pg-0": true}
	for _, tc := range []struct {
		name string
		ns   string
		obj  string
		want bool
	}{
		{"a Deployment mounting the claim", "team", `
kind: Deployment
spec: {template: {spec: {volumes: [{name: w, persistentVolumeClaim: {claimName: workspace}}]}}}`, true},
		{"a ReplicaSet of its history", "team", `
kind: ReplicaSet
spec: {template: {spec: {volumes: [{name: w, persistentVolumeClaim: {claimName: workspace}}]}}}`, true},
		{"a bare Pod", "team", `
kind: Pod
spec: {volumes: [{name: w, persistentVolumeClaim: {claimName: workspace}}]}`, true},
		{"a CronJob", "team", `
kind: CronJob
spec: {jobTemplate: {spec: {template: {spec: {volumes: [{name: w, persistentVolumeClaim: {claimName: workspace}}]}}}}}`, true},
		{"a StatefulSet whose claim template makes the claim", "team", `
kind: StatefulSet
metadata: {name: pg}
spec: {volumeClaimTemplates: [{metadata: {name: data}}], template: {spec: {}}}`, true},
		{"a StatefulSet of another name", "team", `
kind: StatefulSet
metadata: {name: pgx}
spec: {volumeClaimTemplates: [{metadata: {name: data}}], template: {spec: {}}}`, false},
		{"the claim of another namespace", "other", `
kind: Deployment
spec: {template: {spec: {volumes: [{name: w, persistentVolumeClaim: {claimName: workspace}}]}}}`, false},
		{"a claim without files in the backup", "team", `
kind: Deployment
spec: {template: {spec: {volumes: [{name: w, persistentVolumeClaim: {claimName: cache}}]}}}`, false},
		{"no claim at all", "team", `
kind: Deployment
spec: {template: {spec: {volumes: [{name: c, configMap: {name: x}}]}}}`, false},
		{"a cluster-scoped object", "", `
kind: ClusterRole
rules: []`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(tc.obj), &obj); err != nil {
				t.Fatal(err)
			}
			if got := mountsFilledClaim(obj, tc.ns, claims); got != tc.want {
				t.Errorf("mountsFilledClaim = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestWaitingOwners: the owners of a filled claim and of what mounts one wait for the volumes,
// and their owners in turn; owners of nothing that runs on a filled claim do not.
func TestWaitingOwners(t *testing.T) {
	claims := map[string]bool{"team/main-1": true, "team/data-metrics-0": true}
	objects := []struct{ gr, yaml string }{
		{"persistentvolumeclaims", `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: main-1, namespace: team, ownerReferences: [{apiVersion: ops.example/v1, kind: DBCluster, name: main, controller: true}]}`},
		{"persistentvolumeclaims", `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: scratch, namespace: team, ownerReferences: [{apiVersion: ops.example/v1, kind: Scratch, name: tmp}]}`},
		{"dbclusters.ops.example", `
apiVersion: ops.example/v1
kind: DBCluster
metadata: {name: main, namespace: team, ownerReferences: [{apiVersion: ops.example/v1, kind: Fleet, name: all}]}`},
		{"statefulsets.apps", `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: metrics, namespace: team, ownerReferences: [{apiVersion: monitoring.example/v1, kind: Prometheus, name: metrics, controller: true}]}
spec: {volumeClaimTemplates: [{metadata: {name: data}}], template: {spec: {}}}`},
		{"configmaps", `
apiVersion: v1
kind: ConfigMap
metadata: {name: rules, namespace: team, ownerReferences: [{apiVersion: monitoring.example/v1, kind: PrometheusRule, name: alerts}]}`},
		{"deployments.apps", `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: other, ownerReferences: [{apiVersion: apps.example/v1, kind: App, name: web}]}
spec: {template: {spec: {volumes: [{name: w, persistentVolumeClaim: {claimName: main-1}}]}}}`},
	}
	a := &Archive{ByResource: map[string][]Entry{}}
	for _, o := range objects {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(o.yaml), &obj); err != nil {
			t.Fatal(err)
		}
		meta := obj["metadata"].(map[string]any)
		a.ByResource[o.gr] = append(a.ByResource[o.gr], Entry{GroupResource: o.gr, Namespace: meta["namespace"].(string), Name: meta["name"].(string), Object: obj})
	}
	a.index()
	got, err := waitingOwners(a, claims)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{
		"ops.example/DBCluster/team/main":            true, // owns a filled claim
		"ops.example/Fleet/team/all":                 true, // owns that owner
		"monitoring.example/Prometheus/team/metrics": true, // owns a StatefulSet that makes one
	}
	if len(got) != len(want) {
		t.Errorf("waiting owners %v, want %v", got, want)
	}
	for key := range want {
		if !got[key] {
			t.Errorf("%s does not wait for the volumes (waiting: %v)", key, got)
		}
	}
	if none, err := waitingOwners(a, nil); err != nil || len(none) != 0 {
		t.Errorf("without filled claims: %v %v, want none", none, err)
	}
}
