package rules

// DaemonSets move without the template generation the API server writes, which counts the
// source's updates. One whose selector changed is made again: its pods go first (the new one
// would take those of its template generation for up to date), and its revisions the new one
// does not select or the backup does not hold (see Deployments).
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
