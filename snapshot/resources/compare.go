package resources

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/plans/rules"
)

// Compare lists how actual fails to contain expected: every field of expected must be in actual
// with the same value; actual may have more (defaults the target adds). Lists must have the same
// length and contain their counterparts item by item. Each difference names the field path and
// both values. Empty maps, lists and nulls in expected match a missing field.
//
// When either object is a Secret, its values are never shown, nor a part of them: a difference
// names the field and the two lengths. Every difference restore, verify and carry-back report
// comes from here, so this is the one place that rule lives.
//
// Fields ferry.yaml marks sensitive (config.Planning.Sensitivity of the objects' type) are shown the
// same way.
func Compare(expected, actual map[string]any, sensitive ...config.Sensitivity) []string {
	c := comparer{secret: isSecret(expected) || isSecret(actual)}
	c.all = c.secret
	for _, s := range sensitive {
		c.all = c.all || s.All
		c.paths = append(c.paths, s.Paths...)
		if len(s.Paths) > 0 { // kubectl's record of what it applied repeats every field
			c.paths = append(c.paths, lastAppliedPath)
		}
	}
	c.value("", expected, actual, true)
	// kubectl's record of what it applied differs wherever a field it applied does: the field
	// itself says more, so it is named first.
	var applied []string
	out := slices.DeleteFunc(c.out, func(d string) bool {
		if strings.HasPrefix(d, lastAppliedPath) {
			applied = append(applied, d)
			return true
		}
		return false
	})
	return append(out, applied...)
}

// lastAppliedPath is the path Compare names kubectl's record of what it applied by.
const lastAppliedPath = `metadata.annotations["` + rules.LastApplied + `"]`

type comparer struct {
	secret bool     // a Secret: its data is base64
	all    bool     // every field but the identity is hidden
	paths  []string // the fields hidden beside them
	out    []string
}

func (c *comparer) value(path string, want, got any, present bool) {
	if isEmpty(want) && (!present || isEmpty(got)) {
		return
	}
	if !present {
		c.out = append(c.out, fmt.Sprintf("%s: missing on the target (backup: %s)", orRoot(path), c.show(path, want)))
		return
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			c.differ(path, want, got)
			return
		}
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			gv, ok := g[k]
			c.value(joinPath(path, k), w[k], gv, ok)
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			c.differ(path, want, got)
			return
		}
		for i := range w {
			c.value(fmt.Sprintf("%s[%d]", path, i), w[i], g[i], true)
		}
	default:
		if !sameScalar(want, got) {
			c.differ(path, want, got)
		}
	}
}

func (c *comparer) differ(path string, want, got any) {
	if c.hidden(path) {
		c.out = append(c.out, fmt.Sprintf("%s: differs (backup %s, target %s)", orRoot(path), c.size(path, want), c.size(path, got)))
		return
	}
	c.out = append(c.out, fmt.Sprintf("%s: backup %s, target %s", orRoot(path), show(want), show(got)))
}

func (c *comparer) show(path string, v any) string {
	if c.hidden(path) {
		return c.size(path, v)
	}
	return show(v)
}

// secretClear are the fields of a Secret (or of an object ferry.yaml marks sensitive as a whole)
// that identify it and hold no secret: any other (data, stringData, annotations such as kubectl's
// last-applied configuration, which repeats the data, and fields unknown today) shows only its
// length.
var secretClear = []string{"apiVersion", "kind", "type", "immutable", "metadata.name", "metadata.namespace", "metadata.labels", "metadata.ownerReferences", "metadata.finalizers"}

// hidden says whether the value at path may not be shown.
func (c *comparer) hidden(path string) bool {
	if config.CoveredBy(path, c.paths) {
		return true
	}
	if !c.all {
		return false
	}
	for _, p := range secretClear {
		if path == p || strings.HasPrefix(path, p+".") || strings.HasPrefix(path, p+"[") {
			return false
		}
	}
	return true
}

// isSecret says whether obj is a core Secret.
func isSecret(obj map[string]any) bool {
	return obj["kind"] == "Secret" && obj["apiVersion"] == "v1"
}

// size describes a hidden value by its length alone: a Secret's data by its decoded bytes.
func (c *comparer) size(path string, v any) string {
	switch t := v.(type) {
	case nil:
		return "none"
	case string:
		n := len(t)
		if c.secret && (strings.HasPrefix(path, "data.") || strings.HasPrefix(path, "data[")) {
			if b, err := base64.StdEncoding.DecodeString(t); err == nil {
				n = len(b)
			}
		}
		return plural(n, "byte")
	case map[string]any:
		return plural(len(t), "key")
	case []any:
		return plural(len(t), "item")
	case bool:
		return "a boolean"
	}
	return "a number"
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func isEmpty(v any) bool {
	switch t := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(t) == 0
	case []any:
		return len(t) == 0
	}
	return false
}

// sameScalar compares JSON scalars whatever their Go number types (float64 from encoding/json,
// int64 from the API machinery).
func sameScalar(a, b any) bool {
	if na, ok := number(a); ok {
		nb, ok := number(b)
		return ok && na == nb
	}
	return reflect.DeepEqual(a, b)
}

func number(v any) (string, bool) {
	switch n := v.(type) {
	case float64:
		return strconv.FormatFloat(n, 'g', -1, 64), true
	case int64:
		return strconv.FormatInt(n, 10), true
	case int:
		return strconv.Itoa(n), true
	case json.Number:
		f, err := n.Float64()
		if err != nil {
			return n.String(), true
		}
		return strconv.FormatFloat(f, 'g', -1, 64), true
	}
	return "", false
}

func joinPath(path, key string) string {
	if strings.ContainsAny(key, ".[]") {
		return fmt.Sprintf("%s[%q]", path, key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func orRoot(path string) string {
	if path == "" {
		return "(object)"
	}
	return path
}

// show prints a value briefly: long values are cut so a report line stays readable.
func show(v any) string {
	if v == nil {
		return "none"
	}
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	s := string(data)
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}
