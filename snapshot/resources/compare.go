package resources

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// Compare lists how actual fails to contain expected: every field of expected must be in actual
// with the same value; actual may have more (defaults the target adds). Lists must have the same
// length and contain their counterparts item by item. Each difference names the field path and
// both values. Empty maps, lists and nulls in expected match a missing field.
func Compare(expected, actual map[string]any) []string {
	var out []string
	compareValue("", expected, actual, true, &out)
	return out
}

func compareValue(path string, want, got any, present bool, out *[]string) {
	if isEmpty(want) && (!present || isEmpty(got)) {
		return
	}
	if !present {
		*out = append(*out, fmt.Sprintf("%s: missing on the target (backup: %s)", orRoot(path), show(want)))
		return
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			*out = append(*out, fmt.Sprintf("%s: backup %s, target %s", orRoot(path), show(want), show(got)))
			return
		}
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			gv, ok := g[k]
			compareValue(joinPath(path, k), w[k], gv, ok, out)
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			*out = append(*out, fmt.Sprintf("%s: backup %s, target %s", orRoot(path), show(want), show(got)))
			return
		}
		for i := range w {
			compareValue(fmt.Sprintf("%s[%d]", path, i), w[i], g[i], true, out)
		}
	default:
		if !sameScalar(want, got) {
			*out = append(*out, fmt.Sprintf("%s: backup %s, target %s", orRoot(path), show(want), show(got)))
		}
	}
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
