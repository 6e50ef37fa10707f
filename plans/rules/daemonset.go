package rules

// DaemonSets move without the template generation the API server writes, which counts the
// source's updates. One whose selector changed is made again; the pods and history it does not
// select go (see Deployments).
func daemonSetRules() map[string]Rule {
	return map[string]Rule{"daemonsets.apps": {
		Wave:           WaveRest,
		Remake:         remade,
		RemakeOrphans:  true,
		RolloutHistory: &RolloutHistory{Kind: "DaemonSet", In: "controllerrevisions.apps"},
		Normalize: func(obj map[string]any) {
			deleteAnnotations(nestedMap(obj, "metadata"), []string{"deprecated.daemonset.template.generation"})
		},
	}}
}
