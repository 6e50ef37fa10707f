package config

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

// IsClusterScoped reports whether the section claims the cluster-scoped objects no rule gives to
// the other side.
func (r ReleasePart) IsClusterScoped() bool { return r.ClusterScoped != nil && *r.ClusterScoped }

// validateRelease checks the platform and state sections, each alone and against the other: one
// namespace, type or object on both sides would make the other side's rule meaningless.
func (c Planning) validateRelease(bad func(field, format string, args ...any)) {
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
			if c.Tenants != nil && p.field == "platform" && SameResource(r, c.Tenants.Resource) {
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
		if slices.ContainsFunc(c.Platform.Resources, func(p string) bool { return SameResource(p, r) }) {
			bad(fmt.Sprintf("state.resources[%d]", i), "%q is in platform.resources too", r)
		}
	}
	for i, o := range c.State.Objects {
		for _, n := range o.Names {
			if slices.ContainsFunc(c.Platform.Objects, func(p ObjectNames) bool {
				return SameResource(p.Resource, o.Resource) && p.Namespace == o.Namespace && slices.Contains(p.Names, n)
			}) {
				bad(fmt.Sprintf("state.objects[%d]", i), "%s %s is in platform.objects too", o.Resource, strings.TrimPrefix(o.Namespace+"/"+n, "/"))
			}
		}
	}
	if c.State.IsClusterScoped() && c.Platform.IsClusterScoped() {
		bad("state.clusterScoped", "platform.clusterScoped is set too: cluster-scoped objects belong to one side")
	}
}

func validResource(r string) bool { return r != "" && !strings.ContainsAny(r, " /") }

// SameResource compares resource names as ferry.yaml writes them: "secrets", "Secrets",
// "deployments.apps".
func SameResource(a, b string) bool { return strings.EqualFold(a, b) }

// MatchesResource reports whether a resource name of ferry.yaml names the type gr
// ("deployments.apps"): by its full name, or by its plural alone.
func MatchesResource(rule, gr string) bool {
	plural, _, _ := strings.Cut(gr, ".")
	return strings.EqualFold(rule, gr) || strings.EqualFold(rule, plural)
}
