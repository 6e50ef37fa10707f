package plans

import (
	"strings"
	"testing"

	"github.com/ferrykube/ferry/plans/config"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func resourceList(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

// TestRestoredUsage: what the restore makes in a namespace, as the source's quotas count it, is
// capped by what the plan moves there, named alike whatever name the quota used, in the target's
// storage classes; pods and compute resources are left to the target's controllers.
func TestRestoredUsage(t *testing.T) {
	p := &Plan{
		Config: config.Planning{StorageClassMap: map[string]string{"gp2": "gp3"}},
		Resources: []Resource{
			{Resource: "services", Kind: "Service", Count: 3, Namespaces: map[string]Count{"team": {Count: 3}}},
			{Resource: "secrets", Kind: "Secret", Count: 2, Namespaces: map[string]Count{"team": {Count: 2}}},
			{Resource: "pods", Kind: "Pod", Count: 9, Namespaces: map[string]Count{"team": {Count: 9}}},
			{Resource: "persistentvolumeclaims", Kind: "PersistentVolumeClaim", Count: 3, Namespaces: map[string]Count{"team": {Count: 2}, "other": {Count: 1}}},
		},
		Volumes: []Volume{
			{Namespace: "team", Name: "a", Capacity: "10Gi", StorageClass: "gp2"},
			{Namespace: "team", Name: "b", Capacity: "5Gi", StorageClass: "gp2"},
			{Namespace: "other", Name: "c", Capacity: "50Gi", StorageClass: "gp2"},
		},
	}
	quotas := []corev1.ResourceQuota{
		{Status: corev1.ResourceQuotaStatus{Used: resourceList("services", "3", "count/secrets", "7", "requests.storage", "40Gi",
			"persistentvolumeclaims", "5", "gp2.storageclass.storage.k8s.io/requests.storage", "15Gi", "gp2.storageclass.storage.k8s.io/persistentvolumeclaims", "5",
			"pods", "9", "requests.cpu", "4")}},
		{Spec: corev1.ResourceQuotaSpec{Scopes: []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeBestEffort}},
			Status: corev1.ResourceQuotaStatus{Used: resourceList("services", "30")}},
	}
	got := restoredUsage(p, "team", quotas)
	want := resourceList("count/services", "3", "count/secrets", "2", "requests.storage", "15Gi", "count/persistentvolumeclaims", "2",
		"gp3.storageclass.storage.k8s.io/requests.storage", "15Gi", "gp3.storageclass.storage.k8s.io/count/persistentvolumeclaims", "2")
	if len(got) != len(want) {
		t.Fatalf("restoredUsage = %v, want %v", got, want)
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || g.Cmp(w) != 0 {
			t.Errorf("restoredUsage[%s] = %v, want %v (all: %v)", name, g.String(), w.String(), got)
		}
	}
}

// TestOverQuota: a quota on the target before the restore's objects come refuses what the
// restore makes beyond its limits, by whichever name it counts them; a quota with scopes counts
// only a part and is not judged, nor one that counts as much already.
func TestOverQuota(t *testing.T) {
	made := resourceList("requests.storage", "20Gi", "count/persistentvolumeclaims", "4", "count/services", "2", "count/secrets", "7",
		"gp3.storageclass.storage.k8s.io/requests.storage", "20Gi")
	for _, tc := range []struct {
		name    string
		spec    corev1.ResourceQuotaSpec
		counted corev1.ResourceList
		want    string
	}{
		{"room", corev1.ResourceQuotaSpec{Hard: resourceList("requests.storage", "20Gi", "persistentvolumeclaims", "10", "requests.cpu", "1")}, nil, ""},
		{"storage and claims", corev1.ResourceQuotaSpec{Hard: resourceList("requests.storage", "10Gi", "count/persistentvolumeclaims", "3", "services", "5")}, nil,
			"count/persistentvolumeclaims 4, the quota allows 3; requests.storage 20Gi, the quota allows 10Gi"},
		{"a class the claims leave", corev1.ResourceQuotaSpec{Hard: resourceList("gp2.storageclass.storage.k8s.io/requests.storage", "0")}, nil, ""},
		{"the class they come to", corev1.ResourceQuotaSpec{Hard: resourceList("gp3.storageclass.storage.k8s.io/requests.storage", "1Gi")}, nil,
			"gp3.storageclass.storage.k8s.io/requests.storage 20Gi, the quota allows 1Gi"},
		{"what the source does not count", corev1.ResourceQuotaSpec{Hard: resourceList("count/configmaps", "0")}, nil, ""},
		{"counted already", corev1.ResourceQuotaSpec{Hard: resourceList("services", "1")}, resourceList("services", "2"), ""},
		{"scoped", corev1.ResourceQuotaSpec{Hard: resourceList("services", "1"), Scopes: []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeBestEffort}}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := overQuota(corev1.ResourceQuota{Spec: tc.spec}, made, tc.counted); got != tc.want {
				t.Errorf("overQuota = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestNamespacesMoved: the namespaces whose objects move, the cluster's own default too, and the
// tenants'.
func TestNamespacesMoved(t *testing.T) {
	p := &Plan{
		Resources: []Resource{{Resource: "configmaps", Namespaces: map[string]Count{"default": {Count: 1}, "team": {Count: 2}}}},
		Tenants:   []Tenant{{Namespace: "alice"}},
	}
	if got := namespacesMoved(p); strings.Join(got, ",") != "alice,default,team" {
		t.Errorf("namespacesMoved = %v, want alice, default, team", got)
	}
}
