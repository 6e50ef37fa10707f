package plans

import (
	"context"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// VersionChoice is the version an upgrade reads a custom resource type from blue in and writes it
// to green in: one both serve, so that blue's API server converts and green's stores the objects
// as its release expects.
type VersionChoice struct {
	// Resource is the type ("notebooks.kubeflow.org"), Blue the version blue's plan listed it in.
	Resource string `json:"resource"`
	Blue     string `json:"blue"`
	// Moved is the version its objects move in; "" when the two releases share none.
	Moved string `json:"moved,omitempty"`
	Why   string `json:"why"`
}

// chooseVersion picks, among the versions blue's and green's CRDs both serve, green's storage
// version (the objects are then stored as green's release writes them), else the version blue's
// plan lists (what was read until now), else green's first served one. ok is false when the
// releases serve no version in common.
func chooseVersion(current string, blue, green CRD) (version, why string, ok bool) {
	both := func(v string) bool {
		return v != "" && slices.Contains(blue.ServedVersions, v) && slices.Contains(green.ServedVersions, v)
	}
	switch {
	case both(green.StorageVersion):
		return green.StorageVersion, "green's storage version, served by both", true
	case both(current):
		return current, "served by both; green stores " + green.StorageVersion, true
	}
	for _, v := range green.ServedVersions {
		if both(v) {
			return v, "the only version both serve", true
		}
	}
	return "", "blue serves " + strings.Join(blue.ServedVersions, ", ") + ", green " + strings.Join(green.ServedVersions, ", "), false
}

// chooseVersions sets, for each custom resource type both releases have, the version its objects
// move in (Resource.Version, which the backup reads and the restore writes), and lists the types
// whose version changes. A type the releases serve in no common version blocks by each of its
// state objects; one with none is only listed.
func chooseVersions(ctx context.Context, p *Plan, blue, green Release, blueClients Clients, filter *Filter, sides *Sides, u *Upgrade) error {
	blueCRDs, greenCRDs := byName(blue.CRDs, func(c CRD) string { return c.Name }), byName(green.CRDs, func(c CRD) string { return c.Name })
	for i, r := range p.Resources {
		b, onBlue := blueCRDs[r.GroupResource()]
		g, onGreen := greenCRDs[r.GroupResource()]
		if !onBlue || !onGreen {
			continue // a built-in type, or one green's release removed (stranded)
		}
		version, why, ok := chooseVersion(r.Version, b, g)
		if ok && version == r.Version && version == g.StorageVersion {
			continue
		}
		u.Versions = append(u.Versions, VersionChoice{Resource: r.GroupResource(), Blue: r.Version, Moved: version, Why: why})
		if ok {
			p.Resources[i].Version = version
			continue
		}
		objects, err := stateObjects(ctx, blueClients, r, filter, sides)
		if err != nil {
			return err
		}
		for _, o := range objects {
			p.block(r.Kind+" "+strings.TrimPrefix(o.GetNamespace()+"/"+o.GetName(), "/"),
				"blue and green serve %s in no common version (%s): it cannot be read from blue in a version green serves", r.GroupResource(), why)
		}
	}
	return nil
}

// stateObjects lists the objects of r on blue that the plan moves as state.
func stateObjects(ctx context.Context, cl Clients, r Resource, filter *Filter, sides *Sides) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	err := eachItem(ctx, cl.Dynamic, schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource}, func(obj *unstructured.Unstructured) {
		if filter.Reason(r, obj) != "" {
			return
		}
		if side, _ := sides.Of(r.GroupResource(), obj.GetNamespace(), obj.GetName()); side == State {
			out = append(out, obj)
		}
	})
	return out, err
}
