package plans

import (
	"maps"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/plans/config"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestQuotaShortOfMovers(t *testing.T) {
	list := func(kv ...string) corev1.ResourceList {
		out := corev1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return out
	}
	pod := config.Mover{}.PodResources(nil) // 100m 128Mi / 1 512Mi
	defaults := []corev1.LimitRange{{Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{Type: corev1.LimitTypeContainer, Default: list("ephemeral-storage", "1Gi")}}}}}
	for _, tc := range []struct {
		name       string
		hard, used corev1.ResourceList
		spec       corev1.ResourceQuotaSpec
		class      string
		ranges     []corev1.LimitRange
		n          int
		want       string
	}{
		{name: "room", hard: list("requests.cpu", "1", "limits.memory", "2Gi", "pods", "10"), used: list("requests.cpu", "500m"), n: 4},
		{name: "pods", hard: list("pods", "3", "count/pods", "5"), used: list("pods", "3", "count/pods", "1"), n: 1,
			want: "1 mover pod would need pods 1 but only 0 is left (hard 3, used 3)"},
		{name: "cpu and memory for two", hard: list("requests.cpu", "1", "limits.memory", "2Gi", "memory", "1Gi"), used: list("requests.cpu", "900m", "limits.memory", "1500Mi"), n: 2,
			want: "2 mover pods at once need limits.memory 1Gi but only 548Mi is left (hard 2Gi, used 1500Mi); requests.cpu 200m but only 100m is left (hard 1, used 900m)"},
		{name: "over used", hard: list("cpu", "1"), used: list("cpu", "2"), n: 1,
			want: "1 mover pod would need cpu 100m but only 0 is left (hard 1, used 2)"},
		{name: "unset", hard: list("requests.ephemeral-storage", "10Gi", "requests.nvidia.com/gpu", "1"), n: 1,
			want: "the quota tracks requests.ephemeral-storage, which mover pods do not set"},
		{name: "unset but defaulted", hard: list("limits.ephemeral-storage", "10Gi"), ranges: defaults, n: 1},
		{name: "terminating scope", hard: list("pods", "0"), spec: corev1.ResourceQuotaSpec{Scopes: []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeTerminating}}, n: 1},
		{name: "best effort scope", hard: list("pods", "0"), spec: corev1.ResourceQuotaSpec{Scopes: []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeBestEffort}}, n: 1},
		{name: "other priority class", hard: list("pods", "0"), class: "low", n: 1, spec: corev1.ResourceQuotaSpec{ScopeSelector: &corev1.ScopeSelector{
			MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: []string{"high"}}}}}},
		{name: "its priority class", hard: list("pods", "0"), class: "high", n: 1, want: "need pods 1", spec: corev1.ResourceQuotaSpec{ScopeSelector: &corev1.ScopeSelector{
			MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: []string{"high"}}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := corev1.ResourceQuota{Spec: tc.spec, Status: corev1.ResourceQuotaStatus{Used: tc.used}}
			q.Spec.Hard = tc.hard
			got := shortOf(q, pod, tc.class, tc.ranges, tc.n)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("shortOf = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestMoversPerNamespace(t *testing.T) {
	p := &Plan{Volumes: []Volume{
		{Namespace: "a", Name: "1", Phase: "Bound"}, {Namespace: "a", Name: "2", Phase: "Bound"}, {Namespace: "a", Name: "3", Phase: "Bound"},
		{Namespace: "b", Name: "db", Phase: "Bound", Holds: "database x"}, {Namespace: "b", Name: "p", Phase: "Pending"}, {Namespace: "c", Name: "1", Phase: "Bound"},
	}}
	got := Movers(p.FileClaims(func(ns string) string { return "new-" + ns }), 2)
	if want := map[string]int{"new-a": 2, "new-c": 1}; !maps.Equal(got, want) {
		t.Fatalf("Movers = %v, want %v", got, want)
	}
}

func TestClaimsOfAWorkload(t *testing.T) {
	obj := func(o map[string]any) unstructured.Unstructured { return unstructured.Unstructured{Object: o} }
	sts := obj(map[string]any{"kind": "StatefulSet", "metadata": map[string]any{"name": "db"}, "spec": map[string]any{
		"replicas": int64(2), "ordinals": map[string]any{"start": int64(1)},
		"volumeClaimTemplates": []any{map[string]any{"metadata": map[string]any{"name": "data"}}},
		"template":             map[string]any{"spec": map[string]any{"volumes": []any{map[string]any{"name": "cfg", "persistentVolumeClaim": map[string]any{"claimName": "shared-config"}}}}},
	}})
	pods := []unstructured.Unstructured{
		obj(map[string]any{"metadata": map[string]any{"name": "db-1"}, "status": map[string]any{"phase": "Running"}, "spec": map[string]any{"volumes": []any{
			map[string]any{"name": "data", "persistentVolumeClaim": map[string]any{"claimName": "data-db-1"}},
			map[string]any{"name": "scratch", "ephemeral": map[string]any{}},
			map[string]any{"name": "extra", "persistentVolumeClaim": map[string]any{"claimName": "added-by-a-webhook"}},
		}}}),
		obj(map[string]any{"metadata": map[string]any{"name": "old"}, "status": map[string]any{"phase": "Succeeded"}, "spec": map[string]any{"volumes": []any{
			map[string]any{"name": "data", "persistentVolumeClaim": map[string]any{"claimName": "gone"}},
		}}}),
	}
	got := claimsOf(&sts, pods, []string{"data-db-7", "data-db-x", "data-db-01", "data-other-0", "unrelated"})
	want := "added-by-a-webhook data-db-1 data-db-2 data-db-7 db-1-scratch shared-config"
	if strings.Join(got, " ") != want {
		t.Fatalf("claimsOf = %v, want %s", got, want)
	}
}
