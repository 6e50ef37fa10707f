package plans

import (
	"sort"

	"github.com/ferrykube/ferry/plans/rules"
)

// Order sorts resource types into waves so that CRDs come first, then namespaces, storage,
// identity and configuration, everything else, and admission webhooks last, and so that the types
// owning others (edges: dependent -> owners) or named by them (rules.Rule.After) come before them
// — but for rollout history (rules.Rule.History), which comes before its owners. A dependent
// moves to a later wave when its owner is later, except namespaces, which pull their
// (cluster-scoped) owners earlier instead, as Kubeflow's Profiles own their namespaces, and the
// types that keep their wave (rules.Rule.KeepsWave: claims).
func Order(resources []Resource, ownership map[string]map[string]bool) ([]Resource, []Wave) {
	edges := restoreEdges(ownership)
	wave := map[string]int{}
	for _, r := range resources {
		wave[r.GroupResource()] = rules.For(r.GroupResource()).Wave
	}
	for changed := true; changed; {
		changed = false
		for dep, owners := range edges {
			if _, ok := wave[dep]; !ok {
				continue
			}
			for owner := range owners {
				wo, ok := wave[owner]
				if !ok || wo <= wave[dep] {
					continue
				}
				if dep == "namespaces" {
					if wave[owner] != rules.WaveNamespaces {
						wave[owner] = rules.WaveNamespaces
						changed = true
					}
				} else if wave[dep] != wo && !rules.For(dep).KeepsWave {
					wave[dep] = wo
					changed = true
				}
			}
		}
	}
	// Within a wave, owners before dependents: by depth in the ownership graph, ties by name.
	depth := map[string]int{}
	var visit func(gr string, seen map[string]bool) int
	visit = func(gr string, seen map[string]bool) int {
		if d, ok := depth[gr]; ok {
			return d
		}
		if seen[gr] {
			return 0 // a cycle: break it here
		}
		seen[gr] = true
		d := 0
		for owner := range edges[gr] {
			if _, ok := wave[owner]; ok && wave[owner] == wave[gr] {
				d = max(d, visit(owner, seen)+1)
			}
		}
		depth[gr] = d
		return d
	}
	out := append([]Resource(nil), resources...)
	for i := range out {
		gr := out[i].GroupResource()
		out[i].Wave = wave[gr]
		visit(gr, map[string]bool{})
		out[i].OwnedBy = nil
		for owner := range ownership[gr] {
			if _, ok := wave[owner]; ok {
				out[i].OwnedBy = append(out[i].OwnedBy, owner)
			}
		}
		sort.Strings(out[i].OwnedBy)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Wave != b.Wave {
			return a.Wave < b.Wave
		}
		if da, db := depth[a.GroupResource()], depth[b.GroupResource()]; da != db {
			return da < db
		}
		return a.GroupResource() < b.GroupResource()
	})
	var waves []Wave
	for i, w := range rules.Waves() {
		wv := Wave{Index: i, Name: w.Name, WaitFor: w.WaitFor}
		for _, r := range out {
			if r.Wave == i {
				wv.Resources = append(wv.Resources, r.GroupResource())
			}
		}
		if len(wv.Resources) > 0 {
			waves = append(waves, wv)
		}
	}
	return out, waves
}

// restoreEdges turns ownership (dependent -> owners) into what must be restored first
// (type -> types before it): the owners, but for history types their owners come after them; and
// the types a type's rule names as After.
func restoreEdges(ownership map[string]map[string]bool) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	add := func(from, to string) {
		if out[from] == nil {
			out[from] = map[string]bool{}
		}
		out[from][to] = true
	}
	for _, gr := range rules.Types() {
		for _, before := range rules.For(gr).After {
			add(gr, before)
		}
	}
	for dep, owners := range ownership {
		for owner := range owners {
			if rules.For(dep).History {
				add(owner, dep)
			} else {
				add(dep, owner)
			}
		}
	}
	return out
}
