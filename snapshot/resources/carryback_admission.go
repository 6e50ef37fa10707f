package resources

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// Admission names the fields of live, green's copy of a restored object (key, of type gr; restored
// is what the restore made of it, prepared in green's names), that green's admission set when the
// restore made it and green still holds so, as JSON pointers (RFC 6901). A carry-back gives blue
// each of them as the restore had it: an image registry's mirror, a pull policy green enforces,
// are green's rules, not writes.
type Admission func(ctx context.Context, key, gr string, restored map[string]any, live *unstructured.Unstructured) ([]string, error)

// DryRunAdmission asks green (a dry run of restored's create, as verify does) what its admission
// makes of each restored object. A dry run green refuses (a webhook that cannot be called, a field
// its schema lacks) names nothing, so the differences stand as green's writes; an API server that
// cannot be reached is an error.
func DryRunAdmission(green dynamic.Interface) Admission {
	return func(ctx context.Context, key, gr string, restored map[string]any, live *unstructured.Unstructured) ([]string, error) {
		gvr := live.GroupVersionKind().GroupVersion().WithResource(schema.ParseGroupResource(gr).Resource)
		made, err := dryRunCreate(ctx, green, gvr, gr, restored, live)
		var answered apierrors.APIStatus
		if errors.As(err, &answered) {
			return nil, nil
		} else if err != nil {
			return nil, err
		}
		return admittedPaths(gr, live.Object, restored, made), nil
	}
}

// admittedPaths names the fields of live (of type gr) that the admission set as it made made of
// restored (admissionPaths), and a Deployment's revision when that gives it restored's template.
func admittedPaths(gr string, live, restored, made map[string]any) []string {
	// Never the owners: the dry run was given green's, so a change of them on green (an
	// orphaned ReplicaSet) would look like the admission's.
	paths := slices.DeleteFunc(admissionPaths(live, restored, made, ""), func(p string) bool {
		return p == "/metadata/ownerReferences" || strings.HasPrefix(p, "/metadata/ownerReferences/")
	})
	if gr == "deployments.apps" && slices.ContainsFunc(paths, underTemplate) {
		// Its controller numbered the template the admission made a new revision; blue's,
		// given back, keeps its number.
		back := Normalize(gr, revertPaths(live, restored, paths))
		template, _, _ := unstructured.NestedFieldNoCopy(back, "spec", "template")
		was, _, _ := unstructured.NestedFieldNoCopy(restored, "spec", "template")
		if sameJSON(template, was) {
			paths = append(paths, "/metadata/annotations/"+pointerToken(deploymentRevision))
		}
	}
	return paths
}

// RecordedAdmission replays the fields an earlier DryRunAdmission named, by object key: the
// carry-back's verify and later steps see blue's objects as its restore did, whatever green's
// admission (or green) has become since.
func RecordedAdmission(paths map[string][]string) Admission {
	return func(_ context.Context, key, _ string, _ map[string]any, _ *unstructured.Unstructured) ([]string, error) {
		return paths[key], nil
	}
}

// underTemplate says whether path is within a workload's pod template.
func underTemplate(path string) bool {
	return path == "/spec/template" || strings.HasPrefix(path, "/spec/template/")
}

// admissionPaths names, as JSON pointers below at, the fields where green holds what the dry run
// made and the dry run made something other than restored: present in both with the same value,
// or absent from both, while restored has another value or none. Maps are walked key by key, lists
// of one length in all three index by index.
func admissionPaths(green, restored, made any, at string) []string {
	switch g := green.(type) {
	case map[string]any:
		r, rok := restored.(map[string]any)
		m, mok := made.(map[string]any)
		if !rok || !mok {
			break // the leaf's rule
		}
		keys := map[string]bool{}
		for _, obj := range []map[string]any{g, r, m} {
			for k := range obj {
				keys[k] = true
			}
		}
		var out []string
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			gv, gin := g[k]
			rv, rin := r[k]
			mv, min := m[k]
			path := at + "/" + pointerToken(k)
			switch {
			case gin && rin && min && alike(gv, rv, mv):
				out = append(out, admissionPaths(gv, rv, mv, path)...)
			case same(gv, gin, mv, min) && !same(rv, rin, mv, min):
				out = append(out, path)
			}
		}
		return out
	case []any:
		r, rok := restored.([]any)
		m, mok := made.([]any)
		if !rok || !mok || len(r) != len(g) || len(m) != len(g) {
			break
		}
		var out []string
		for i := range g {
			out = append(out, admissionPaths(g[i], r[i], m[i], at+"/"+strconv.Itoa(i))...)
		}
		return out
	}
	if at != "" && sameJSON(green, made) && !sameJSON(restored, made) {
		return []string{at}
	}
	return nil
}

// alike says whether three values are walked together: all maps, or all lists of one length.
func alike(green, restored, made any) bool {
	switch g := green.(type) {
	case map[string]any:
		_, rok := restored.(map[string]any)
		_, mok := made.(map[string]any)
		return rok && mok
	case []any:
		r, rok := restored.([]any)
		m, mok := made.([]any)
		return rok && mok && len(r) == len(g) && len(m) == len(g)
	}
	return false
}

// same says whether two fields, each with its value and whether it is there at all, are alike.
func same(a any, aThere bool, b any, bThere bool) bool {
	return aThere == bThere && (!aThere || sameJSON(a, b))
}

// revertPaths is a copy of obj with the field at each of paths as it is in restored (taken out
// where restored has none). A path whose parent obj lacks is passed over.
func revertPaths(obj, restored map[string]any, paths []string) map[string]any {
	out := runtime.DeepCopyJSON(obj)
	for _, path := range paths {
		tokens := pointerTokens(path)
		if len(tokens) == 0 {
			continue
		}
		parent, ok := lookup(out, tokens[:len(tokens)-1])
		if !ok {
			continue
		}
		want, there := lookup(restored, tokens)
		last := tokens[len(tokens)-1]
		switch p := parent.(type) {
		case map[string]any:
			if there {
				p[last] = runtime.DeepCopyJSONValue(want)
			} else {
				delete(p, last)
			}
		case []any:
			if i, err := strconv.Atoi(last); err == nil && i >= 0 && i < len(p) && there {
				p[i] = runtime.DeepCopyJSONValue(want)
			}
		}
	}
	return out
}

// lookup is the value at tokens within v.
func lookup(v any, tokens []string) (any, bool) {
	for _, t := range tokens {
		switch c := v.(type) {
		case map[string]any:
			next, ok := c[t]
			if !ok {
				return nil, false
			}
			v = next
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// pointerToken escapes a key for a JSON pointer.
func pointerToken(key string) string { return strings.NewReplacer("~", "~0", "/", "~1").Replace(key) }

// pointerTokens splits a JSON pointer into its keys.
func pointerTokens(path string) []string {
	if path == "" {
		return nil
	}
	tokens := strings.Split(strings.TrimPrefix(path, "/"), "/")
	unescape := strings.NewReplacer("~1", "/", "~0", "~")
	for i, t := range tokens {
		tokens[i] = unescape.Replace(t)
	}
	return tokens
}
