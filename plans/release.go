package plans

import (
	"fmt"
	"slices"
	"strings"
)

// ReleasePart is ferry.yaml's platform or state section, which an upgrade (ferry plan --upgrade)
// reads: platform is what green's new release installs and ferry leaves as green has it; state is
// what moves from blue. Tenants (the tenants resource and everything in their namespaces), the
// databases and buckets with their claims and Secrets are state without being listed.
type ReleasePart struct {
	// Namespaces: every object in them, and the Namespace objects themselves.
	Namespaces []string `yaml:"namespaces,omitempty" json:"namespaces,omitempty"`
	// Resources: every object of these types, wherever it lives ("profiles.kubeflow.org").
	Resources []string `yaml:"resources,omitempty" json:"resources,omitempty"`
	// Objects are single objects: the exceptions inside the other side's namespaces and types
	// (a database's claim in the platform's namespace).
	Objects []ObjectNames `yaml:"objects,omitempty" json:"objects,omitempty"`
	// ClusterScoped claims every cluster-scoped object no rule gives to the other side (a
	// release's CRDs, cluster roles, webhooks). Unset on both sides, they are state.
	ClusterScoped *bool `yaml:"clusterScoped,omitempty" json:"clusterScoped,omitempty"`
}

// ObjectNames names objects of one resource type in one namespace ("" for cluster-scoped ones).
type ObjectNames struct {
	Resource  string   `yaml:"resource" json:"resource"`
	Namespace string   `yaml:"namespace,omitempty" json:"namespace,omitempty"`
	Names     []string `yaml:"names" json:"names"`
	Why       string   `yaml:"why,omitempty" json:"why,omitempty"`
}

// IsZero reports an empty section (so that it is left out of plans and ferry.yaml alike).
func (r ReleasePart) IsZero() bool {
	return len(r.Namespaces) == 0 && len(r.Resources) == 0 && len(r.Objects) == 0 && r.ClusterScoped == nil
}

func (r ReleasePart) merge(over ReleasePart) ReleasePart {
	out := ReleasePart{
		Namespaces:    appendNew(r.Namespaces, over.Namespaces),
		Resources:     appendNew(r.Resources, over.Resources),
		Objects:       append(append([]ObjectNames(nil), r.Objects...), over.Objects...),
		ClusterScoped: r.ClusterScoped,
	}
	if over.ClusterScoped != nil {
		out.ClusterScoped = over.ClusterScoped
	}
	return out
}

func appendNew(a, b []string) []string {
	out := append([]string(nil), a...)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func (r ReleasePart) clusterScoped() bool { return r.ClusterScoped != nil && *r.ClusterScoped }

// validateRelease checks the platform and state sections, each alone and against the other: one
// namespace, type or object on both sides would make the other side's rule meaningless.
func (c Config) validateRelease(bad func(field, format string, args ...any)) {
	parts := []struct {
		field string
		part  ReleasePart
	}{{"platform", c.Platform}, {"state", c.State}}
	for _, p := range parts {
		for i, ns := range p.part.Namespaces {
			if !dnsLabel.MatchString(ns) {
				bad(fmt.Sprintf("%s.namespaces[%d]", p.field, i), "%q is not a namespace name", ns)
			}
		}
		for i, r := range p.part.Resources {
			if !validResource(r) {
				bad(fmt.Sprintf("%s.resources[%d]", p.field, i), "%q is not a resource such as configmaps or profiles.kubeflow.org", r)
			}
			if c.Tenants != nil && p.field == "platform" && sameResource(r, c.Tenants.Resource) {
				bad(fmt.Sprintf("%s.resources[%d]", p.field, i), "%q is the tenants resource, which is state", r)
			}
		}
		for i, o := range p.part.Objects {
			f := fmt.Sprintf("%s.objects[%d]", p.field, i)
			if !validResource(o.Resource) {
				bad(f+".resource", "%q is not a resource such as secrets or persistentvolumeclaims", o.Resource)
			}
			if o.Namespace != "" && !dnsLabel.MatchString(o.Namespace) {
				bad(f+".namespace", "%q is not a namespace name", o.Namespace)
			}
			if len(o.Names) == 0 {
				bad(f+".names", "missing")
			}
			for j, n := range o.Names {
				if n == "" || strings.ContainsAny(n, " /") {
					bad(fmt.Sprintf("%s.names[%d]", f, j), "%q is not an object name", n)
				}
			}
		}
	}
	for i, ns := range c.State.Namespaces {
		if slices.Contains(c.Platform.Namespaces, ns) {
			bad(fmt.Sprintf("state.namespaces[%d]", i), "%q is in platform.namespaces too", ns)
		}
	}
	for i, r := range c.State.Resources {
		if slices.ContainsFunc(c.Platform.Resources, func(p string) bool { return sameResource(p, r) }) {
			bad(fmt.Sprintf("state.resources[%d]", i), "%q is in platform.resources too", r)
		}
	}
	for i, o := range c.State.Objects {
		for _, n := range o.Names {
			if slices.ContainsFunc(c.Platform.Objects, func(p ObjectNames) bool {
				return sameResource(p.Resource, o.Resource) && p.Namespace == o.Namespace && slices.Contains(p.Names, n)
			}) {
				bad(fmt.Sprintf("state.objects[%d]", i), "%s %s is in platform.objects too", o.Resource, strings.TrimPrefix(o.Namespace+"/"+n, "/"))
			}
		}
	}
	if c.State.clusterScoped() && c.Platform.clusterScoped() {
		bad("state.clusterScoped", "platform.clusterScoped is set too: cluster-scoped objects belong to one side")
	}
}

func validResource(r string) bool { return r != "" && !strings.ContainsAny(r, " /") }

// sameResource compares resource names as ferry.yaml writes them: "secrets", "Secrets",
// "deployments.apps".
func sameResource(a, b string) bool { return strings.EqualFold(a, b) }

// matchesResource reports whether a resource name of ferry.yaml names the type gr
// ("deployments.apps"): by its full name, or by its plural alone.
func matchesResource(rule, gr string) bool {
	plural, _, _ := strings.Cut(gr, ".")
	return strings.EqualFold(rule, gr) || strings.EqualFold(rule, plural)
}

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
	platform, state ReleasePart
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
func NewSides(cfg Config, tenants []Tenant, data []DataItem) *Sides {
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
		p    ReleasePart
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
		what := "database " + d.Name
		if d.Engine == "" {
			what = "bucket " + d.Name
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
		if r.name == name && r.namespace == namespace && matchesResource(r.resource, gr) {
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
	if s.tenantsResource != "" && matchesResource(s.tenantsResource, gr) {
		return State, "the tenants", true
	}
	for _, p := range []struct {
		side Side
		p    ReleasePart
	}{{State, s.state}, {Platform, s.platform}} {
		if slices.ContainsFunc(p.p.Resources, func(r string) bool { return matchesResource(r, gr) }) {
			return p.side, "listed in " + string(p.side) + ".resources", true
		}
	}
	if namespace == "" {
		switch {
		case s.state.clusterScoped():
			return State, "cluster-scoped (state.clusterScoped)", false
		case s.platform.clusterScoped():
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
