package rules

import "testing"

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
		{"a bound claim is healthy", "health", "persistentvolumeclaims", `{"status":{"phase":"Bound"}}`, "ok"},
		{"a pending claim is not", "health", "persistentvolumeclaims", `{"status":{"phase":"Pending"}}`, "the claim is pending"},
	})
}
