package rules

// DaemonSets move without the template generation the API server writes, which counts the
// source's updates.
func daemonSetRules() map[string]Rule {
	return map[string]Rule{"daemonsets.apps": {
		Wave:           WaveRest,
		RolloutHistory: &RolloutHistory{Kind: "DaemonSet", In: "controllerrevisions.apps"},
		Normalize: func(obj map[string]any) {
			deleteAnnotations(nestedMap(obj, "metadata"), []string{"deprecated.daemonset.template.generation"})
		},
	}}
}
