package plans

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Upgrade is what ferry plan --upgrade adds to a plan: what moves from blue as state, what is left
// to the release green runs, and how green's release differs from blue's.
type Upgrade struct {
	// Moves are blue's objects that move to green; LeftToRelease those green's release provides.
	// Each line is a namespace, a resource type (in a namespace or cluster-wide) or one object.
	Moves         []SideItem  `json:"moves"`
	LeftToRelease []SideItem  `json:"leftToRelease"`
	Release       ReleaseDiff `json:"release"`
	// LeaveBehind are the CRDs of green's release's removed kinds whose state objects stay on blue
	// (--leave-behind); Stranded the state objects of removed kinds, left behind or blocking.
	LeaveBehind []string         `json:"leaveBehind,omitempty"`
	Stranded    []StrandedObject `json:"stranded,omitempty"`
	// Versions are the custom resource types that move in another version than blue's plan
	// listed, or that green stores in another one (see chooseVersions).
	Versions []VersionChoice `json:"versions,omitempty"`
}

// SideItem is a part of blue on one side of an upgrade.
type SideItem struct {
	Namespace string `json:"namespace,omitempty"`
	// Resource is set when a type, not a whole namespace, is on this side.
	Resource string `json:"resource,omitempty"`
	// Name is set for a single object a rule names (an exception in the other side's namespace).
	Name    string `json:"name,omitempty"`
	Objects int    `json:"objects"`
	Why     string `json:"why"`
}

// StrandedObject is a state object whose kind green's release no longer has.
type StrandedObject struct {
	CRD       string `json:"crd"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// LeftBehind: --leave-behind names its CRD, so it stays on blue and does not block.
	LeftBehind bool `json:"leftBehind"`
}

// Release is what a cluster runs of a platform's release: its namespaces, CRDs and components.
type Release struct {
	Namespaces []string    `json:"namespaces"`
	CRDs       []CRD       `json:"crds"`
	Components []Component `json:"components"`
}

// Component is a Deployment, StatefulSet or DaemonSet with its containers' images.
type Component struct {
	Kind       string      `json:"kind"`
	Namespace  string      `json:"namespace"`
	Name       string      `json:"name"`
	Containers []Container `json:"containers"`
}

// Container is a container (or init container) of a component's pod template.
type Container struct {
	Name  string `json:"name"`
	Image string `json:"image"`
	Init  bool   `json:"init,omitempty"`
}

// ComponentRef names a component.
type ComponentRef struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

func (c ComponentRef) String() string { return c.Kind + " " + c.Namespace + "/" + c.Name }

// ReleaseDiff is how green's release differs from blue's.
type ReleaseDiff struct {
	NamespacesAdded   []string       `json:"namespacesAdded,omitempty"`
	NamespacesRemoved []string       `json:"namespacesRemoved,omitempty"`
	CRDsAdded         []CRDChange    `json:"crdsAdded,omitempty"`
	CRDsRemoved       []CRDChange    `json:"crdsRemoved,omitempty"`
	CRDsChanged       []CRDChange    `json:"crdsChanged,omitempty"`
	ComponentsAdded   []ComponentRef `json:"componentsAdded,omitempty"`
	ComponentsRemoved []ComponentRef `json:"componentsRemoved,omitempty"`
	ImagesChanged     []ImageChange  `json:"imagesChanged,omitempty"`
}

// CRDChange is a CRD added, removed, or whose versions changed between the releases.
type CRDChange struct {
	Name         string   `json:"name"`
	Kind         string   `json:"kind"`
	BlueServed   []string `json:"blueServed,omitempty"`
	GreenServed  []string `json:"greenServed,omitempty"`
	BlueStorage  string   `json:"blueStorage,omitempty"`
	GreenStorage string   `json:"greenStorage,omitempty"`
	// Note says what the change means for objects moving between the releases.
	Note string `json:"note,omitempty"`
	// CustomResources counts blue's objects of a removed CRD; StateObjects are those that would move.
	CustomResources int `json:"customResources,omitempty"`
	StateObjects    int `json:"stateObjects,omitempty"`
}

// ImageChange is a container of a component on both sides whose image differs; an image is ""
// on the side that lacks the container.
type ImageChange struct {
	ComponentRef
	Container string `json:"container"`
	Blue      string `json:"blue"`
	Green     string `json:"green"`
}

// String names the component, the container and both images ("-" where there is none); without it
// the component's String would stand for the whole change.
func (c ImageChange) String() string {
	return fmt.Sprintf("%s [%s]: %s → %s", c.ComponentRef, c.Container, orDefault(c.Blue, "-"), orDefault(c.Green, "-"))
}

// PlatformOf keeps of a cluster's release what the sides call platform.
func (s *Sides) PlatformOf(r Release) Release {
	out := Release{}
	for _, ns := range r.Namespaces {
		if side, _ := s.Of("namespaces", "", ns); side == Platform {
			out.Namespaces = append(out.Namespaces, ns)
		}
	}
	for _, c := range r.CRDs {
		if side, _ := s.Of("customresourcedefinitions.apiextensions.k8s.io", "", c.Name); side == Platform {
			out.CRDs = append(out.CRDs, c)
		}
	}
	for _, c := range r.Components {
		if side, _ := s.Of(workloadResource(c.Kind), c.Namespace, c.Name); side == Platform {
			out.Components = append(out.Components, c)
		}
	}
	return out
}

func workloadResource(kind string) string { return strings.ToLower(kind) + "s.apps" }

// CompareReleases lists how green's release differs from blue's: namespaces, CRDs added and
// removed and those whose served or storage versions changed, components only on one side (by
// kind, namespace and name), and the images of containers of components on both.
func CompareReleases(blue, green Release) ReleaseDiff {
	var d ReleaseDiff
	d.NamespacesAdded, d.NamespacesRemoved = onlyIn(green.Namespaces, blue.Namespaces), onlyIn(blue.Namespaces, green.Namespaces)

	blueCRDs, greenCRDs := byName(blue.CRDs, func(c CRD) string { return c.Name }), byName(green.CRDs, func(c CRD) string { return c.Name })
	for _, name := range sortedKeys(greenCRDs) {
		g := greenCRDs[name]
		b, ok := blueCRDs[name]
		if !ok {
			d.CRDsAdded = append(d.CRDsAdded, CRDChange{Name: name, Kind: g.Kind, GreenServed: sorted(g.ServedVersions), GreenStorage: g.StorageVersion})
			continue
		}
		if note := versionNote(b, g); note != "" {
			d.CRDsChanged = append(d.CRDsChanged, CRDChange{Name: name, Kind: g.Kind, BlueServed: sorted(b.ServedVersions), GreenServed: sorted(g.ServedVersions),
				BlueStorage: b.StorageVersion, GreenStorage: g.StorageVersion, Note: note})
		}
	}
	for _, name := range sortedKeys(blueCRDs) {
		if _, ok := greenCRDs[name]; !ok {
			b := blueCRDs[name]
			d.CRDsRemoved = append(d.CRDsRemoved, CRDChange{Name: name, Kind: b.Kind, BlueServed: sorted(b.ServedVersions), BlueStorage: b.StorageVersion,
				Note: "green does not serve " + b.Kind + ": its objects have no place there", CustomResources: b.Count})
		}
	}

	ref := func(c Component) string { return c.Kind + " " + c.Namespace + "/" + c.Name }
	blueComps, greenComps := byName(blue.Components, ref), byName(green.Components, ref)
	for _, key := range sortedKeys(greenComps) {
		g := greenComps[key]
		b, ok := blueComps[key]
		if !ok {
			d.ComponentsAdded = append(d.ComponentsAdded, ComponentRef{g.Kind, g.Namespace, g.Name})
			continue
		}
		d.ImagesChanged = append(d.ImagesChanged, imageChanges(b, g)...)
	}
	for _, key := range sortedKeys(blueComps) {
		if _, ok := greenComps[key]; !ok {
			b := blueComps[key]
			d.ComponentsRemoved = append(d.ComponentsRemoved, ComponentRef{b.Kind, b.Namespace, b.Name})
		}
	}
	return d
}

// versionNote says how a CRD's versions changed between blue (b) and green (g), or "".
func versionNote(b, g CRD) string {
	var notes []string
	if b.StorageVersion != g.StorageVersion {
		note := "storage version " + b.StorageVersion + " → " + g.StorageVersion
		if slices.Contains(g.ServedVersions, b.StorageVersion) {
			note += " (the old one still served)"
		}
		notes = append(notes, note)
	}
	if gone := onlyIn(b.ServedVersions, g.ServedVersions); len(gone) > 0 {
		notes = append(notes, "no longer served: "+strings.Join(gone, ", "))
	}
	if added := onlyIn(g.ServedVersions, b.ServedVersions); len(added) > 0 {
		notes = append(notes, "newly served: "+strings.Join(added, ", "))
	}
	if len(notes) > 0 && !slices.ContainsFunc(b.ServedVersions, func(v string) bool { return slices.Contains(g.ServedVersions, v) }) {
		notes = append(notes, "no version served by both")
	}
	return strings.Join(notes, "; ")
}

// imageChanges compares the containers of one component on both sides, by container name.
func imageChanges(b, g Component) []ImageChange {
	ref := ComponentRef{g.Kind, g.Namespace, g.Name}
	key := func(c Container) string {
		if c.Init {
			return "init:" + c.Name
		}
		return c.Name
	}
	bc, gc := byName(b.Containers, key), byName(g.Containers, key)
	var out []ImageChange
	for _, k := range sortedKeys(mergeKeys(bc, gc)) {
		bi, gi := bc[k].Image, gc[k].Image
		if bi != gi {
			out = append(out, ImageChange{ComponentRef: ref, Container: k, Blue: bi, Green: gi})
		}
	}
	return out
}

// upgradeFindings names every stranded state object: blocking, unless --leave-behind names its
// CRD, then a warning that it stays on blue.
func upgradeFindings(p *Plan, u *Upgrade) {
	for _, o := range u.Stranded {
		subject := o.Kind + " " + strings.TrimPrefix(o.Namespace+"/"+o.Name, "/")
		if o.LeftBehind {
			p.warn(subject, "green's release has no %s: it stays on blue and does not move (--leave-behind %s)", o.CRD, o.CRD)
			continue
		}
		p.block(subject, "green's release has no %s, so it cannot move; --leave-behind %s goes on without it (it stays on blue)", o.CRD, o.CRD)
	}
}

// sideItems sorts blue's planned objects onto the two sides: by namespace (or by type, where a
// type decides), cluster-scoped types by type, and single objects a rule names on their own line
// when their side differs from their namespace's or type's. namespaces are the Namespace objects
// the plan moves; named are the named objects found in the plan.
func sideItems(p *Plan, s *Sides, namespaces []string, named []NamedObject) (moves, left []SideItem) {
	type key struct {
		side                      Side
		namespace, resource, name string
		why                       string
	}
	counts := map[key]int{}
	cellKey := func(gr, namespace, name string) key {
		side, why, byResource := s.cellOf(gr, namespace, name)
		k := key{side: side, namespace: namespace, why: why}
		if gr == "namespaces" {
			k.namespace = name
		}
		if byResource || (namespace == "" && gr != "namespaces") {
			k.resource = gr
		}
		return k
	}
	for _, r := range p.Resources {
		gr := r.GroupResource()
		switch {
		case gr == "namespaces":
			for _, ns := range namespaces {
				counts[cellKey(gr, "", ns)]++
			}
		case r.Namespaced:
			for ns, c := range r.Namespaces {
				counts[cellKey(gr, ns, "")] += c.Count
			}
		default:
			counts[cellKey(gr, "", "")] += r.Count
		}
	}
	for _, o := range named {
		gr := o.Resource
		cell := cellKey(gr, o.Namespace, o.Name)
		if cell.side == o.Side || counts[cell] == 0 {
			continue
		}
		counts[cell]--
		if counts[cell] == 0 {
			delete(counts, cell)
		}
		counts[key{side: o.Side, namespace: o.Namespace, resource: gr, name: o.Name, why: o.Why}]++
	}
	keys := make([]key, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	// Namespaces first, then cluster-scoped types, each by name; a namespace's whole line before
	// its types' and objects'.
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(cmp.Compare(boolInt(a.namespace == ""), boolInt(b.namespace == "")), strings.Compare(a.namespace, b.namespace),
			strings.Compare(a.resource, b.resource), strings.Compare(a.name, b.name), strings.Compare(a.why, b.why))
	})
	for _, k := range keys {
		item := SideItem{Namespace: k.namespace, Resource: k.resource, Name: k.name, Objects: counts[k], Why: k.why}
		if k.side == State {
			moves = append(moves, item)
		} else {
			left = append(left, item)
		}
	}
	return moves, left
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Describe names a side item for people: "namespace alice", "kubeflow persistentvolumeclaims/x",
// "clusterroles.rbac.authorization.k8s.io".
func (i SideItem) Describe() string {
	switch {
	case i.Resource == "":
		return "namespace " + i.Namespace
	case i.Name != "":
		return strings.TrimPrefix(i.Namespace+" ", " ") + i.Resource + "/" + i.Name
	case i.Namespace != "":
		return i.Namespace + " " + i.Resource
	}
	return i.Resource
}

// LeftNamespace reports whether green's release provides the whole namespace ns: none of blue's
// objects there moves.
func (u *Upgrade) LeftNamespace(ns string) bool {
	if u == nil {
		return false
	}
	left := slices.ContainsFunc(u.LeftToRelease, func(i SideItem) bool { return i.Namespace == ns && i.Resource == "" })
	moves := slices.ContainsFunc(u.Moves, func(i SideItem) bool { return i.Namespace == ns })
	return left && !moves
}

func byName[T any](items []T, key func(T) string) map[string]T {
	out := make(map[string]T, len(items))
	for _, i := range items {
		out[key(i)] = i
	}
	return out
}

func mergeKeys[V any](a, b map[string]V) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// onlyIn lists, sorted, what a holds and b does not.
func onlyIn(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
