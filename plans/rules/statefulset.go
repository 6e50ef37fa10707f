package rules

import (
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// StatefulSets move with their claim templates' storage classes mapped (the target's controller
// makes the claims from them) and their data sources dropped, as the claims' are (claimRules): a
// replica added on the target would wait for a snapshot or populator the target lacks; a restored
// one is healthy once its replicas are ready. One whose claim templates changed is made again
// (Remake), its pods and claims orphaned for the new one to adopt; the target's own revisions,
// which the backup does not hold, go.
func statefulSetRules() map[string]Rule {
	return map[string]Rule{"statefulsets.apps": {
		Wave:             WaveRest,
		RolloutHistory:   &RolloutHistory{Kind: "StatefulSet", In: "controllerrevisions.apps"},
		RemakeOrphans:    true,
		RemakeAdoptsPods: true,
		// Its pods and claims are adopted by the new one only when its selector stays.
		Remake: func(live, want map[string]any) string {
			if !reflect.DeepEqual(nestedMap(live, "spec", "selector"), nestedMap(want, "spec", "selector")) {
				return "its selector changes too, so the StatefulSet made again would not adopt its pods, whose names it needs"
			}
			return ""
		},
		Normalize: func(obj map[string]any) {
			for _, t := range claimTemplates(obj) {
				if spec := nestedMap(t, "spec"); spec != nil {
					dropDataSource(spec)
				}
			}
		},
		StorageClasses: func(obj map[string]any) []map[string]any {
			var out []map[string]any
			for _, t := range claimTemplates(obj) {
				out = append(out, nestedMap(t, "spec"))
			}
			return out
		},
		Health: func(obj map[string]any) (bool, string) {
			want, found, _ := unstructured.NestedInt64(obj, "spec", "replicas")
			if !found {
				want = 1
			}
			ready, _, _ := unstructured.NestedInt64(obj, "status", "readyReplicas")
			return ready >= want, fmt.Sprintf("%d of %d replicas ready", ready, want)
		},
	}}
}

// claimTemplates are a StatefulSet's volumeClaimTemplates, in place (not copies).
func claimTemplates(sts map[string]any) []map[string]any {
	list, _ := nestedMap(sts, "spec")["volumeClaimTemplates"].([]any)
	var out []map[string]any
	for _, t := range list {
		if tm := asMap(t); tm != nil {
			out = append(out, tm)
		}
	}
	return out
}
