package config

import (
	"fmt"
	"regexp"
	"strings"
)

// Sensitive marks fields of one resource type whose values ferry never shows: a difference in
// them names the field and the two lengths, as for a Secret's data. ferry.yaml lists them where
// objects other than Secrets hold credentials (a ConfigMap with a token, a Deployment's literal
// env values, a custom resource's spec.password).
type Sensitive struct {
	// Resource is the plural resource name with its group: "configmaps", "deployments.apps".
	Resource string `yaml:"resource" json:"resource"`
	// Paths are field paths as differences name them ("data.token",
	// "spec.template.spec.containers[*].env"); [*] stands for any index of a list. A path covers
	// what is beneath it. No paths: every field but the object's identity (kind, name, labels).
	Paths []string `yaml:"paths,omitempty" json:"paths,omitempty"`
}

// sensitivePath is a field path: segments joined by '.', list indexes as [*], keys that hold
// '.', '[' or ']' quoted as ["a.b"].
var sensitivePath = regexp.MustCompile(`^[A-Za-z0-9_$-]+(\.[A-Za-z0-9_$-]+|\[\*\]|\["[^"]+"\])*$`)

func (s Sensitive) validate(field string, bad func(field, format string, args ...any)) {
	if !resourceName.MatchString(s.Resource) {
		bad(field+".resource", "%q: want a plural resource name with its group, e.g. configmaps or deployments.apps", s.Resource)
	}
	for i, p := range s.Paths {
		if !sensitivePath.MatchString(p) {
			bad(fmt.Sprintf("%s.paths[%d]", field, i), "%q: want a field path such as data.token or spec.template.spec.containers[*].env", p)
		}
	}
}

// Sensitivity is what a configuration marks sensitive in one type's objects: the fields its
// paths cover, or all of them but the identity.
type Sensitivity struct {
	Paths []string
	All   bool
}

// Sensitivity is what the configuration marks sensitive in objects of gr ("configmaps").
func (c Planning) Sensitivity(gr string) Sensitivity {
	var s Sensitivity
	for _, m := range c.Sensitive {
		if m.Resource != gr {
			continue
		}
		s.All = s.All || len(m.Paths) == 0
		s.Paths = append(s.Paths, m.Paths...)
	}
	return s
}

// resourceName is a plural resource name, optionally with its group.
var resourceName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// CoveredBy says whether the field at path is at or beneath one of the patterns (Sensitive.Paths).
func CoveredBy(path string, patterns []string) bool {
	general := listIndex.ReplaceAllString(path, "[*]")
	for _, p := range patterns {
		if general == p || strings.HasPrefix(general, p+".") || strings.HasPrefix(general, p+"[") {
			return true
		}
	}
	return false
}

var listIndex = regexp.MustCompile(`\[[0-9]+\]`)
