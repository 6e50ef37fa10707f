package plans

import (
	"slices"
	"testing"
)

func TestOrder(t *testing.T) {
	res := func(names ...string) []Resource {
		var out []Resource
		for _, n := range names {
			group, resource := "", n
			if i := indexDot(n); i > 0 {
				resource, group = n[:i], n[i+1:]
			}
			out = append(out, Resource{Group: group, Resource: resource, Count: 1})
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		resources []Resource
		edges     map[string]map[string]bool
		want      []string
	}{
		{
			name: "fixed waves",
			resources: res("validatingwebhookconfigurations.admissionregistration.k8s.io", "deployments.apps", "configmaps",
				"persistentvolumeclaims", "namespaces", "customresourcedefinitions.apiextensions.k8s.io", "profiles.kubeflow.org"),
			want: []string{"customresourcedefinitions.apiextensions.k8s.io", "namespaces", "persistentvolumeclaims", "configmaps",
				"deployments.apps", "profiles.kubeflow.org", "validatingwebhookconfigurations.admissionregistration.k8s.io"},
		},
		{
			name:      "owners first within a wave",
			resources: res("pods", "jobs.batch", "cronjobs.batch"),
			edges:     map[string]map[string]bool{"pods": {"jobs.batch": true}, "jobs.batch": {"cronjobs.batch": true}},
			want:      []string{"cronjobs.batch", "jobs.batch", "pods"},
		},
		{
			name:      "rollout history before its owners",
			resources: res("pods", "replicasets.apps", "deployments.apps", "controllerrevisions.apps", "daemonsets.apps", "statefulsets.apps"),
			edges: map[string]map[string]bool{"pods": {"replicasets.apps": true, "daemonsets.apps": true, "statefulsets.apps": true},
				"replicasets.apps": {"deployments.apps": true}, "controllerrevisions.apps": {"daemonsets.apps": true, "statefulsets.apps": true}},
			want: []string{"controllerrevisions.apps", "replicasets.apps", "daemonsets.apps", "deployments.apps", "statefulsets.apps", "pods"},
		},
		{
			name:      "a dependent moves after a later owner",
			resources: res("secrets", "certificates.cert-manager.io", "configmaps"),
			edges:     map[string]map[string]bool{"secrets": {"certificates.cert-manager.io": true}},
			want:      []string{"configmaps", "certificates.cert-manager.io", "secrets"},
		},
		{
			// An operator's claims (CloudNativePG's) are owned by its resource: they must exist
			// before the volumes' restore fills them, and get their owner references once it is made.
			name:      "claims stay with the storage, whatever owns them",
			resources: res("persistentvolumeclaims", "clusters.postgresql.cnpg.io", "configmaps"),
			edges:     map[string]map[string]bool{"persistentvolumeclaims": {"clusters.postgresql.cnpg.io": true}},
			want:      []string{"persistentvolumeclaims", "configmaps", "clusters.postgresql.cnpg.io"},
		},
		{
			name:      "a token Secret's ServiceAccount first",
			resources: res("secrets", "configmaps", "serviceaccounts"),
			want:      []string{"configmaps", "serviceaccounts", "secrets"},
		},
		{
			name:      "namespaces pull their owners earlier",
			resources: res("namespaces", "profiles.kubeflow.org", "configmaps", "customresourcedefinitions.apiextensions.k8s.io"),
			edges:     map[string]map[string]bool{"namespaces": {"profiles.kubeflow.org": true}},
			want:      []string{"customresourcedefinitions.apiextensions.k8s.io", "profiles.kubeflow.org", "namespaces", "configmaps"},
		},
		{
			name:      "cycles do not hang",
			resources: res("a.x", "b.x"),
			edges:     map[string]map[string]bool{"a.x": {"b.x": true}, "b.x": {"a.x": true}},
			want:      []string{"b.x", "a.x"}, // broken where the walk found the cycle
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, waves := Order(tc.resources, tc.edges)
			var names []string
			for _, r := range got {
				names = append(names, r.GroupResource())
			}
			if !slices.Equal(names, tc.want) {
				t.Fatalf("order = %v, want %v", names, tc.want)
			}
			n := 0
			for _, w := range waves {
				n += len(w.Resources)
			}
			if n != len(tc.want) {
				t.Fatalf("waves hold %d resources, want %d: %+v", n, len(tc.want), waves)
			}
		})
	}
}

func indexDot(s string) int {
	for i := range s {
		if s[i] == '.' {
			return i
		}
	}
	return -1
}
