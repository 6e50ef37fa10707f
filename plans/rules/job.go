package rules

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// Jobs move without the Job controller's UID labels; finished ones stay; a restored Job is healthy
// unless it failed. One whose template changed is made again, the pods of the one before going
// with it: a Job's template does not change.
func jobRules() map[string]Rule {
	return map[string]Rule{"jobs.batch": {
		Wave:   WaveRest,
		Remake: remade,
		Exclude: func(obj map[string]any) string {
			conds, _, _ := unstructured.NestedSlice(obj, "status", "conditions")
			for _, c := range conds {
				cm, _ := c.(map[string]any)
				if (cm["type"] == "Complete" || cm["type"] == "Failed") && cm["status"] == "True" {
					return "finished job (" + cm["type"].(string) + ")"
				}
			}
			return ""
		},
		Normalize: dropControllerUID,
		Recreate:  dropControllerUID,
		Skip: func(obj map[string]any) string {
			if t, _, _ := unstructured.NestedString(obj, "status", "completionTime"); t != "" {
				return "the job has completed"
			}
			return ""
		},
		Health: func(obj map[string]any) (bool, string) {
			conds, _, _ := unstructured.NestedSlice(obj, "status", "conditions")
			return !conditionTrue(conds, "Failed"), "the job failed"
		},
	}}
}

// dropControllerUID drops the Job controller's UID labels, which name the Job they were made for
// (its own labels inherit them when it has none).
func dropControllerUID(obj map[string]any) {
	spec := nestedMap(obj, "spec")
	for _, m := range []map[string]any{nestedMap(spec, "selector", "matchLabels"), nestedMap(spec, "template", "metadata", "labels"), nestedMap(obj, "metadata", "labels")} {
		delete(m, "controller-uid")
		delete(m, "batch.kubernetes.io/controller-uid")
	}
}
