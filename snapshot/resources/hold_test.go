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
