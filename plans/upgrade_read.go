package plans

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans/config"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

var crdsGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// LeaveBehindName names a CRD left behind in errors (a command line names its flag instead).
const LeaveBehindName = "leave-behind"

// UpgradeOptions tune PlanUpgrade.
type UpgradeOptions struct {
	// LeaveBehind are CRDs ("pytorchjobs.kubeflow.org") that green's release removed and whose
	// state objects stay on blue instead of blocking the upgrade.
	LeaveBehind []string
}

// PlanUpgrade adds to p, blue's plan, what an upgrade onto green (which runs the platform's new
// release) needs to know: which of blue's objects move as state and which are left to green's
// release, by the configuration's platform and state sections; how green's release differs from
// blue's; and, as blocking findings, every state object whose kind green's release removed, but
// those whose CRD opts.LeaveBehind names.
func PlanUpgrade(ctx context.Context, p *Plan, blue, green Clients, opts UpgradeOptions) error {
	if p.Config.Platform.IsZero() {
		return badinput.Value("upgrade", "", "no platform section says what green's release installs; use a preset that has one (kubeflow) or add platform to ferry.yaml")
	}
	filter, err := NewFilter(p.Config)
	if err != nil {
		return err
	}
	served, err := discover(blue.Discovery, &Plan{})
	if err != nil {
		return err
	}
	sides := NewSides(p.Config, p.Tenants, append(slices.Clone(p.Databases), p.Buckets...))
	namespaces, err := movingNamespaces(ctx, blue.Dynamic, filter)
	if err != nil {
		return err
	}
	named, err := findNamed(ctx, blue.Dynamic, served, filter, sides.Named())
	if err != nil {
		return err
	}
	u := &Upgrade{}
	u.Moves, u.LeftToRelease = sideItems(p, sides, namespaces, named)
	// The claims green's release provides keep green's volumes: their files do not move.
	p.Volumes = slices.DeleteFunc(p.Volumes, func(v Volume) bool {
		side, _ := sides.Of("persistentvolumeclaims", v.Namespace, v.Name)
		return side == Platform
	})

	blueRelease, err := ReadRelease(ctx, blue.Dynamic)
	if err != nil {
		return fmt.Errorf("blue: %w", err)
	}
	greenRelease, err := ReadRelease(ctx, green.Dynamic)
	if err != nil {
		return fmt.Errorf("green: %w", err)
	}
	// Green's objects in tenants' namespaces, blue's or green's own, are not its release's.
	greenTenants, err := tenantsOf(ctx, green, p.Config)
	if err != nil {
		return fmt.Errorf("green: %w", err)
	}
	greenSides := NewSides(p.Config, append(slices.Clone(p.Tenants), greenTenants...), nil)
	counts := map[string]int{}
	for _, c := range p.CRDs {
		counts[c.Name] = c.Count
	}
	for i := range blueRelease.CRDs {
		blueRelease.CRDs[i].Count = counts[blueRelease.CRDs[i].Name]
	}
	u.Release = CompareReleases(sides.PlatformOf(blueRelease), greenSides.PlatformOf(greenRelease))

	removed := map[string]int{}
	for i, c := range u.Release.CRDsRemoved {
		removed[c.Name] = i
	}
	for _, lb := range opts.LeaveBehind {
		if _, ok := removed[lb]; !ok {
			var names []string
			for _, c := range u.Release.CRDsRemoved {
				names = append(names, c.Name)
			}
			return badinput.Value(LeaveBehindName, lb, "not a CRD of blue's release that green's lacks (those are: %s)", orDefault(strings.Join(names, ", "), "none"))
		}
		if !slices.Contains(u.LeaveBehind, lb) {
			u.LeaveBehind = append(u.LeaveBehind, lb)
		}
	}
	slices.Sort(u.LeaveBehind)
	for _, r := range p.Resources {
		i, ok := removed[r.GroupResource()]
		if !ok {
			continue
		}
		stranded, err := strandedOf(ctx, blue, r, filter, sides, slices.Contains(u.LeaveBehind, r.GroupResource()))
		if err != nil {
			return err
		}
		u.Release.CRDsRemoved[i].StateObjects = len(stranded)
		u.Stranded = append(u.Stranded, stranded...)
	}
	if err := chooseVersions(ctx, p, blueRelease, greenRelease, blue, filter, sides, u); err != nil {
		return err
	}
	upgradeFindings(p, u)
	p.Upgrade = u
	return nil
}

// ReadRelease reads what a cluster runs: its namespaces, CRDs, and Deployments, StatefulSets and
// DaemonSets with their containers' images.
func ReadRelease(ctx context.Context, dyn dynamic.Interface) (Release, error) {
	var r Release
	err := eachItem(ctx, dyn, namespacesGVR, func(obj *unstructured.Unstructured) {
		r.Namespaces = append(r.Namespaces, obj.GetName())
	})
	if err != nil {
		return r, err
	}
	if err := eachItem(ctx, dyn, crdsGVR, func(obj *unstructured.Unstructured) { r.CRDs = append(r.CRDs, crdInfo(obj)) }); err != nil {
		return r, err
	}
	for _, kind := range []string{"Deployment", "StatefulSet", "DaemonSet"} {
		err := eachItem(ctx, dyn, workloadGVR(strings.ToLower(kind)), func(obj *unstructured.Unstructured) {
			r.Components = append(r.Components, componentOf(kind, obj))
		})
		if err != nil {
			return r, err
		}
	}
	return r, nil
}

func componentOf(kind string, obj *unstructured.Unstructured) Component {
	c := Component{Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName()}
	for _, field := range []string{"initContainers", "containers"} {
		list, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", field)
		for _, item := range list {
			m, _ := item.(map[string]any)
			name, _ := m["name"].(string)
			image, _ := m["image"].(string)
			c.Containers = append(c.Containers, Container{Name: name, Image: image, Init: field == "initContainers"})
		}
	}
	return c
}

// eachItem lists a resource type page by page.
func eachItem(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource, fn func(*unstructured.Unstructured)) error {
	err := kube.EachObject(ctx, dyn, gvr, "", 0, func(obj *unstructured.Unstructured) error {
		fn(obj)
		return nil
	})
	if err != nil {
		return fmt.Errorf("list %s: %w", groupResource(gvr.Group, gvr.Resource), err)
	}
	return nil
}

// movingNamespaces are the Namespace objects the plan moves.
func movingNamespaces(ctx context.Context, dyn dynamic.Interface, filter *Filter) ([]string, error) {
	res := Resource{Version: "v1", Resource: "namespaces", Kind: "Namespace"}
	var out []string
	err := eachItem(ctx, dyn, namespacesGVR, func(obj *unstructured.Unstructured) {
		if filter.Reason(res, obj) == "" {
			out = append(out, obj.GetName())
		}
	})
	return out, err
}

// findNamed keeps the named objects that exist on the cluster and that the plan moves, each with
// its type's full name.
func findNamed(ctx context.Context, dyn dynamic.Interface, served []servedResource, filter *Filter, named []NamedObject) ([]NamedObject, error) {
	var out []NamedObject
	for _, n := range named {
		r, ok := servedLoosely(served, n.Resource)
		if !ok || r.namespaced != (n.Namespace != "") {
			continue // not served, or a namespaced type named without a namespace: nothing of it moves
		}
		obj, err := dyn.Resource(r.gvr).Namespace(n.Namespace).Get(ctx, n.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get %s %s: %w", r.groupResource(), strings.TrimPrefix(n.Namespace+"/"+n.Name, "/"), err)
		}
		res := Resource{Group: r.gvr.Group, Version: r.gvr.Version, Resource: r.gvr.Resource, Kind: r.kind, Namespaced: r.namespaced}
		if filter.Reason(res, obj) != "" {
			continue
		}
		n.Resource = r.groupResource()
		out = append(out, n)
	}
	return out, nil
}

// servedLoosely finds a served type by a name of ferry.yaml: its full name, else its plural.
func servedLoosely(served []servedResource, name string) (servedResource, bool) {
	for _, exact := range []bool{true, false} {
		for _, r := range served {
			if (exact && strings.EqualFold(r.groupResource(), name)) || (!exact && config.MatchesResource(name, r.groupResource())) {
				return r, true
			}
		}
	}
	return servedResource{}, false
}

// tenantsOf lists the tenants of a cluster (none when it does not serve the tenants resource).
func tenantsOf(ctx context.Context, cl Clients, cfg config.Planning) ([]Tenant, error) {
	if cfg.Tenants == nil {
		return nil, nil
	}
	served, err := discover(cl.Discovery, &Plan{})
	if err != nil {
		return nil, err
	}
	r, ok := findServed(served, cfg.Tenants.Resource)
	if !ok {
		return nil, nil
	}
	var out []Tenant
	err = eachItem(ctx, cl.Dynamic, r.gvr, func(obj *unstructured.Unstructured) {
		out = append(out, Tenant{Name: obj.GetName(), Namespace: obj.GetName()})
	})
	return out, err
}

// strandedOf lists the state objects of r, a type whose CRD green's release removed.
func strandedOf(ctx context.Context, cl Clients, r Resource, filter *Filter, sides *Sides, leftBehind bool) ([]StrandedObject, error) {
	objects, err := stateObjects(ctx, cl, r, filter, sides)
	out := make([]StrandedObject, 0, len(objects))
	for _, obj := range objects {
		out = append(out, StrandedObject{CRD: r.GroupResource(), Kind: r.Kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), LeftBehind: leftBehind})
	}
	return out, err
}
