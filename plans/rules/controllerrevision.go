package rules

// ControllerRevisions are a DaemonSet's or StatefulSet's rollout history: restored before their
// owner, which adopts them and keeps their numbers. One the controller numbered first on the
// target is renumbered to the backup's revision.
func controllerRevisionRules() map[string]Rule {
	return map[string]Rule{"controllerrevisions.apps": {
		Wave:    WaveRest,
		History: true,
		Renumber: func(want, got map[string]any) (map[string]any, bool) {
			rev, ok := want["revision"]
			if !ok {
				return nil, false
			}
			patch := map[string]any{}
			if number64(rev) != number64(got["revision"]) {
				patch["revision"] = rev
			}
			delete(want, "revision")
			delete(got, "revision")
			return patch, true
		},
		Revision: func(obj map[string]any) int64 { return int64(number64(obj["revision"])) },
	}}
}

func number64(v any) float64 {
	switch n := v.(type) {
	case int64:
		return float64(n)
	case float64:
		return n
	case int:
		return float64(n)
	}
	return 0
}
