package plans

import (
	"slices"
	"strings"

	"github.com/ferrykube/ferry/plans/config"
)

// Side is where an object belongs in an upgrade.
type Side string

// The sides of an upgrade.
const (
	// State moves from blue to green.
	State Side = "state"
	// Platform is installed on green by the new release; ferry leaves it to that release.
	Platform Side = "platform"
)

// Sides decides, object by object, on which side of an upgrade an object is: the configuration's
// platform and state sections, the tenants and their namespaces, and the data items' claims and
// Secrets, most specific first.
type Sides struct {
	platform, state config.ReleasePart
	tenantsResource string
	// tenants are the tenants' namespaces, by the tenant owning each.
	tenants map[string]string
	objects []sideRule
}

type sideRule struct {
	resource, namespace, name string
	side                      Side
	why                       string
}

// NewSides makes the sides of cfg for a cluster whose tenants and data items (databases and
// buckets, found or not) are these.
func NewSides(cfg config.Planning, tenants []Tenant, data []DataItem) *Sides {
	s := &Sides{platform: cfg.Platform, state: cfg.State, tenants: map[string]string{}}
	if cfg.Tenants != nil {
		s.tenantsResource = cfg.Tenants.Resource
	}
	for _, t := range tenants {
		s.tenants[t.Namespace] = t.Name
	}
	// Listed objects come first: what the user wrote wins over what ferry derives.
	for _, part := range []struct {
		side Side
		p    config.ReleasePart
	}{{State, cfg.State}, {Platform, cfg.Platform}} {
		for _, o := range part.p.Objects {
			why := o.Why
			if why == "" {
				why = "listed in " + string(part.side) + ".objects"
			}
			for _, n := range o.Names {
				s.objects = append(s.objects, sideRule{resource: o.Resource, namespace: o.Namespace, name: n, side: part.side, why: why})
			}
		}
	}
	for _, d := range data {
		what, kind := "database "+d.Name, "database"
		if d.Engine == "" {
			what, kind = "bucket "+d.Name, "bucket"
		}
		if cfg.TargetOf(kind, d.Name) != "" {
			continue // green keeps it in a server of its own: the source's claims and Secret are the source server's
		}
		for _, claim := range d.Volumes {
			s.objects = append(s.objects, sideRule{resource: "persistentvolumeclaims", namespace: d.Namespace, name: claim, side: State, why: "holds " + what})
		}
		if d.Secret != "" {
			s.objects = append(s.objects, sideRule{resource: "secrets", namespace: d.Namespace, name: d.Secret, side: State, why: "credentials of " + what})
		}
	}
	return s
}

// Named are the single objects the sides name (listed ones and the data items' claims and
// Secrets), each once, with its side.
func (s *Sides) Named() []NamedObject {
	var out []NamedObject
	seen := map[[3]string]bool{}
	for _, r := range s.objects {
		key := [3]string{strings.ToLower(r.resource), r.namespace, r.name}
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, NamedObject{Resource: r.resource, Namespace: r.namespace, Name: r.name, Side: r.side, Why: r.why})
	}
	return out
}

// NamedObject is an object a rule of the sides names.
type NamedObject struct {
	Resource  string `json:"resource"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Side      Side   `json:"side"`
	Why       string `json:"why"`
}

// Of says on which side the object of type gr ("persistentvolumeclaims", "deployments.apps")
// named namespace/name is, and why. namespace is "" for cluster-scoped objects.
func (s *Sides) Of(gr, namespace, name string) (Side, string) {
	for _, r := range s.objects {
		if r.name == name && r.namespace == namespace && config.MatchesResource(r.resource, gr) {
			return r.side, r.why
		}
	}
	side, why, _ := s.cellOf(gr, namespace, name)
	return side, why
}

// Cell says on which side the objects of type gr in namespace are, but for single objects a rule
// names (see Of). byResource is true when the type decided, not the namespace. For "namespaces",
// namespace is the Namespace object's name.
func (s *Sides) Cell(gr, namespace string) (side Side, why string, byResource bool) {
	if s.tenantsResource != "" && config.MatchesResource(s.tenantsResource, gr) {
		return State, "the tenants", true
	}
	for _, p := range []struct {
		side Side
		p    config.ReleasePart
	}{{State, s.state}, {Platform, s.platform}} {
		if slices.ContainsFunc(p.p.Resources, func(r string) bool { return config.MatchesResource(r, gr) }) {
			return p.side, "listed in " + string(p.side) + ".resources", true
		}
	}
	if namespace == "" {
		switch {
		case s.state.IsClusterScoped():
			return State, "cluster-scoped (state.clusterScoped)", false
		case s.platform.IsClusterScoped():
			return Platform, "cluster-scoped, of the release (platform.clusterScoped)", false
		}
		return State, "not part of the release", false
	}
	if tenant, ok := s.tenants[namespace]; ok {
		return State, "namespace of tenant " + tenant, false
	}
	switch {
	case slices.Contains(s.state.Namespaces, namespace):
		return State, "listed in state.namespaces", false
	case slices.Contains(s.platform.Namespaces, namespace):
		return Platform, "namespace of the release", false
	}
	return State, "not part of the release", false
}

// cellOf is Cell for an object of a namespaced type in namespace, or of a cluster-scoped one
// (namespace ""), with Namespace objects placed by their name.
func (s *Sides) cellOf(gr, namespace, name string) (Side, string, bool) {
	if gr == "namespaces" {
		return s.Cell(gr, name)
	}
	return s.Cell(gr, namespace)
}

// Placement says which of an upgrade backup's objects a restore onto green, and its verify, leave
// out: those green's release provides (platform), and those --leave-behind keeps on blue.
type Placement struct {
	sides       *Sides
	leaveBehind []string
}

// PlacementOf is the placement of an upgrade's plan, or nil for a plan without an upgrade section.
func PlacementOf(p *Plan) *Placement {
	if p == nil || p.Upgrade == nil {
		return nil
	}
	return &Placement{sides: NewSides(p.Config, p.Tenants, append(slices.Clone(p.Databases), p.Buckets...)), leaveBehind: p.Upgrade.LeaveBehind}
}

// LeftOut says why the object of type gr ("deployments.apps") named namespace/name does not move,
// or "" when it does; behind is set for the objects --leave-behind keeps on blue.
func (pl *Placement) LeftOut(gr, namespace, name string) (why string, behind bool) {
	if slices.ContainsFunc(pl.leaveBehind, func(lb string) bool { return strings.EqualFold(lb, gr) }) {
		return "green's release has no " + gr + ": it stays on blue (--leave-behind " + gr + ")", true
	}
	if side, why := pl.sides.Of(gr, namespace, name); side == Platform {
		return "left to green's release (" + why + ")", false
	}
	return "", false
}

// GreensOwn reports whether the object is state that a rule names inside the release's part (a
// database's claim or Secret in the release's namespace): green's release has its own copy, which
// its own servers use (the data moves by dump or copy), so an existing one is kept as it is.
func (pl *Placement) GreensOwn(gr, namespace, name string) bool {
	side, _ := pl.sides.Of(gr, namespace, name)
	cell, _, _ := pl.sides.cellOf(gr, namespace, name)
	return side == State && cell == Platform
}

// Moves reports whether an upgrade moves the object, to green or back to blue: neither left to
// the release or behind, nor a copy of the release's own (GreensOwn). A nil placement (no
// upgrade) moves everything.
func (pl *Placement) Moves(gr, namespace, name string) bool {
	if pl == nil {
		return true
	}
	why, _ := pl.LeftOut(gr, namespace, name)
	return why == "" && !pl.GreensOwn(gr, namespace, name)
}

// CarryBackVersions makes a plan of green for a carry-back after an upgrade read each type the
// upgrade moved in the version it moved in (one blue serves), and gives it the upgrade's
// placement: what it left to green's release or behind on blue is not carried back either.
func CarryBackVersions(green, run *Plan) {
	moved := map[string]string{}
	for _, r := range run.Resources {
		moved[r.GroupResource()] = r.Version
	}
	for i, r := range green.Resources {
		if v, ok := moved[r.GroupResource()]; ok {
			green.Resources[i].Version = v
		}
	}
	if run.Upgrade != nil {
		green.Upgrade = &Upgrade{LeaveBehind: run.Upgrade.LeaveBehind}
	}
}
