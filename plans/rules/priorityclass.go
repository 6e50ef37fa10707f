package rules

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// PriorityClasses come with identity and configuration, before the pods that name them; the
// built-in ones stay, and the global default is the target's (see DefaultMark: the API server
// refuses a second one). One of another value is made again: a value does not change, and the
// pods that run keep the one they were given.
func priorityClassRules() map[string]Rule {
	globalDefault := &DefaultMark{Field: "globalDefault"}
	return map[string]Rule{"priorityclasses.scheduling.k8s.io": {
		Wave:      WaveConfig,
		Remake:    remade,
		Default:   globalDefault,
		Normalize: globalDefault.drop,
		Exclude: func(obj map[string]any) string {
			if name := (&unstructured.Unstructured{Object: obj}).GetName(); name == "system-cluster-critical" || name == "system-node-critical" {
				return "built into every cluster"
			}
			return ""
		},
	}}
}
