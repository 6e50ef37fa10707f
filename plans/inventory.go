package plans

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans/rules"

	"github.com/ferrykube/ferry/plans/config"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
)

// Clients reach the cluster being planned.
type Clients struct {
	Discovery discovery.DiscoveryInterface
	Dynamic   dynamic.Interface
}

// Options tune planning.
type Options struct {
	Config config.Planning
	// Context names the source in the plan.
	Context string
	// Concurrency is how many resource types are listed at once (default 8).
	Concurrency int
	// PageSize is the LIST page size (default 500).
	PageSize int64
	// Data, when set, leaves the databases and buckets out whose namespace it leaves out
	// (Filter.DataReason), as the restore of a backup does by the same selection: the selection
	// flags of ferry plan and ferry backup narrow the data as they narrow the objects. ferry.yaml's
	// own selection does not: its databases and buckets are what it names.
	Data *Filter
	Log  *slog.Logger
}

// servedResource is a resource type the API server serves in its preferred version.
type servedResource struct {
	gvr        schema.GroupVersionResource
	kind       string
	namespaced bool
}

func (r servedResource) groupResource() string { return groupResource(r.gvr.Group, r.gvr.Resource) }

// typeTally is what listing one resource type found.
type typeTally struct {
	res       Resource
	excluded  map[[2]string]*Exclusion // by namespace and reason
	single    []Exclusion              // per-object exclusions with names
	owners    map[schema.GroupKind]bool
	crds      []CRD
	claims    []Volume
	podUses   map[string][]PodUse // "ns/claim" -> pods
	names     []string            // object names, for namespaces and tenants
	ports     []NodePort          // node ports users chose for Services
	ips       []ClusterIP         // cluster IPs users chose for Services
	hostPaths []hostPathUse       // pods that write to a node's folder
	unlisted  string              // what of the type the plan misses: this identity may not list it
}

// hostPathUse is a pod that writes to a hostPath volume: data on the node's disk, which no claim holds.
type hostPathUse struct{ namespace, pod, path string }

// Inventory lists every served resource type of the cluster and makes a plan of it, without a
// target (see Preflight).
func Inventory(ctx context.Context, cl Clients, opts Options) (*Plan, error) {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 8
	}
	if opts.PageSize <= 0 {
		opts.PageSize = 500
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	started := time.Now()
	p := &Plan{APIVersion: APIVersion, Kind: Kind, CreatedAt: started.UTC().Truncate(time.Second), Config: opts.Config}
	var err error
	if p.Source, err = identify(ctx, cl, opts.Context); err != nil {
		return nil, err
	}
	served, err := discover(cl.Discovery, p)
	if err != nil {
		return nil, err
	}
	sel, err := newSelector(opts.Config)
	if err != nil {
		return nil, err
	}
	kinds := map[schema.GroupKind]string{}
	for _, r := range served {
		kinds[schema.GroupKind{Group: r.gvr.Group, Kind: r.kind}] = r.groupResource()
	}

	var mu sync.Mutex
	var tallies []*typeTally
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(opts.Concurrency)
	for _, r := range served {
		g.Go(func() error {
			t, err := listType(gctx, cl.Dynamic, r, sel, opts)
			if err != nil {
				return err
			}
			mu.Lock()
			tallies = append(tallies, t)
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	sort.Slice(tallies, func(i, j int) bool { return tallies[i].res.GroupResource() < tallies[j].res.GroupResource() })

	podUses := map[string][]PodUse{}
	var hostPaths []hostPathUse
	namespaces := map[string]bool{}
	edges := map[string]map[string]bool{}
	for _, t := range tallies {
		for _, e := range t.excluded {
			p.Excluded = append(p.Excluded, *e)
		}
		p.Excluded = append(p.Excluded, t.single...)
		p.CRDs = append(p.CRDs, t.crds...)
		p.Volumes = append(p.Volumes, t.claims...)
		p.NodePorts = append(p.NodePorts, t.ports...)
		p.ClusterIPs = append(p.ClusterIPs, t.ips...)
		if t.unlisted != "" {
			p.warn(t.res.GroupResource(), "this identity may not list them, so %s are not in the plan: grant it list (a schedule: create it again)", t.unlisted)
		}
		hostPaths = append(hostPaths, t.hostPaths...)
		for k, v := range t.podUses {
			podUses[k] = append(podUses[k], v...)
		}
		if t.res.Resource == "namespaces" && t.res.Group == "" {
			for _, n := range t.names {
				namespaces[n] = true
			}
		}
		for gk := range t.owners {
			if owner, ok := kinds[gk]; ok && owner != t.res.GroupResource() {
				if edges[t.res.GroupResource()] == nil {
					edges[t.res.GroupResource()] = map[string]bool{}
				}
				edges[t.res.GroupResource()][owner] = true
			}
		}
		if t.res.Count > 0 {
			p.Resources = append(p.Resources, t.res)
		}
	}
	for i := range p.Volumes {
		v := &p.Volumes[i]
		v.Pods = podUses[v.Namespace+"/"+v.Name]
	}
	p.Resources, p.Waves = Order(p.Resources, edges)
	countCRs(p)
	if err := findData(ctx, cl.Dynamic, p, served, namespaces, opts.Data); err != nil {
		return nil, err
	}
	sortExclusions(p.Excluded)
	for _, v := range p.Volumes {
		if why := v.FilesUnread(); why == blockVolume {
			p.warn("claim "+v.Namespace+"/"+v.Name, "%s", why)
		}
	}
	warnHostData(p, hostPaths)
	p.Estimate = estimate(p)
	opts.Log.Info("inventory done", "resourceTypes", len(served), "objects", p.Estimate.Objects, "elapsed", time.Since(started).Round(time.Millisecond))
	return p, nil
}

// Identify says which cluster the clients reach: server, version and the kube-system
// namespace's UID, which tells one cluster from another.
func Identify(ctx context.Context, cl Clients, context string) (Cluster, error) {
	return identify(ctx, cl, context)
}

func identify(ctx context.Context, cl Clients, context string) (Cluster, error) {
	c := Cluster{Context: context}
	v, err := cl.Discovery.ServerVersion()
	if err != nil {
		return c, fmt.Errorf("reach the API server: %w", err)
	}
	c.Version = v.GitVersion
	if rc := cl.Discovery.RESTClient(); rc != nil {
		if u := rc.Get().URL(); u != nil {
			c.Server = u.Scheme + "://" + u.Host
		}
	}
	ns, err := cl.Dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Get(ctx, "kube-system", metav1.GetOptions{})
	if err == nil {
		c.UID = string(ns.GetUID())
	}
	return c, nil
}

// discover returns every resource type served in its preferred version that can be listed and
// created. Groups whose discovery failed (a dead aggregated API) become warnings, not a failure.
func discover(dc discovery.DiscoveryInterface, p *Plan) ([]servedResource, error) {
	lists, err := dc.ServerPreferredResources()
	if err != nil {
		var failed *discovery.ErrGroupDiscoveryFailed
		if !errors.As(err, &failed) {
			return nil, fmt.Errorf("discover the API: %w", err)
		}
		for gv, gerr := range failed.Groups {
			p.warn(gv.String(), NotDiscovered+", its objects are not in the plan: %v", gerr)
		}
	}
	var out []servedResource
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") || !slices.Contains(r.Verbs, "create") {
				continue
			}
			out = append(out, servedResource{gvr: gv.WithResource(r.Name), kind: r.Kind, namespaced: r.Namespaced})
		}
	}
	return out, nil
}

// selector applies the include/exclude configuration.
type selector struct {
	inNS, exNS   map[string]bool
	namedNS      map[string]bool // include.namespaces as written, "*" or not
	anyNS        bool            // a cluster's own namespaces are not left out by themselves
	namedObjects map[string]bool // group-resource/namespace/name of include.objects and state.objects
	inRes, exRes map[string]bool
	labels       labels.Selector
}

func newSelector(cfg config.Planning) (*selector, error) {
	set := func(items []string) map[string]bool {
		if len(items) == 0 || slices.Contains(items, "*") {
			return nil
		}
		m := map[string]bool{}
		for _, i := range items {
			m[strings.ToLower(i)] = true
		}
		return m
	}
	ls, err := labels.Parse(cfg.Include.LabelSelector)
	if err != nil {
		return nil, err
	}
	named := map[string]bool{}
	for _, ns := range cfg.Include.Namespaces {
		named[strings.ToLower(ns)] = true
	}
	// An upgrade's state objects are named as much as the selection's.
	objects := map[string]bool{}
	for _, o := range slices.Concat(cfg.Include.Objects, cfg.State.Objects) {
		for _, name := range o.Names {
			objects[strings.ToLower(o.Resource)+"/"+o.Namespace+"/"+name] = true
		}
	}
	return &selector{inNS: set(cfg.Include.Namespaces), exNS: set(cfg.Exclude.Namespaces), namedNS: named, namedObjects: objects, inRes: set(cfg.Include.Resources), exRes: set(cfg.Exclude.Resources), labels: ls}, nil
}

// resourceReason says why a whole resource type is left out by the user's selection, or "".
func (s *selector) resourceReason(r servedResource) string {
	names := []string{r.gvr.Resource, r.groupResource(), strings.ToLower(r.kind)}
	matches := func(m map[string]bool) bool {
		for _, n := range names {
			if m[n] {
				return true
			}
		}
		return false
	}
	if s.inRes != nil && !matches(s.inRes) {
		return "not in the included resources"
	}
	if matches(s.exRes) {
		return "in the excluded resources"
	}
	return ""
}

// namespaceReason says why the user's selection leaves out what lives in namespace ns, or "";
// cluster-scoped things (ns "") are never left out for their namespace. The contents of a
// cluster's own namespaces (kube-system) move only when include.namespaces names them (beside
// "*" for the rest).
func (s *selector) namespaceReason(ns string) string {
	switch {
	case ns == "":
		return ""
	case s.inNS != nil && !s.inNS[ns]:
		return "namespace not included"
	case s.exNS[ns]:
		return "namespace excluded"
	case rules.ClusterOwnNamespace(ns) && !s.namedNS[ns] && !s.anyNS:
		return rules.ClusterOwnReason
	}
	return ""
}

// named says whether include.objects (or an upgrade's state.objects) names obj, of type r.
func (s *selector) named(r servedResource, obj *unstructured.Unstructured) bool {
	for _, resource := range []string{r.groupResource(), r.gvr.Resource} {
		if s.namedObjects[resource+"/"+obj.GetNamespace()+"/"+obj.GetName()] {
			return true
		}
	}
	return false
}

// objectReason says why the user's selection leaves an object out, or "".
func (s *selector) objectReason(r servedResource, obj *unstructured.Unstructured) string {
	ns := obj.GetNamespace()
	if r.groupResource() == "namespaces" {
		ns = obj.GetName()
	}
	if reason := s.namespaceReason(ns); reason != "" && (reason != rules.ClusterOwnReason || !s.named(r, obj)) {
		return reason
	}
	// A volume bound to a claim of a namespace the selection leaves out is that namespace's: the
	// target's copy would point at the source's storage, and a carry-back would write it back.
	if bound := rules.For(r.groupResource()).BoundTo; ns == "" && bound != nil {
		if owner := bound.Namespace(obj.Object); owner != "" {
			if reason := s.namespaceReason(owner); reason != "" && !s.named(r, obj) {
				return "bound to " + bound.What + " in namespace " + owner + ": " + reason
			}
		}
	}
	// CRDs and namespaces carry what the selected objects need, whatever their labels.
	if gr := r.groupResource(); gr != "namespaces" && gr != "customresourcedefinitions.apiextensions.k8s.io" && !s.labels.Matches(labels.Set(obj.GetLabels())) {
		return "labels do not match the selector"
	}
	return ""
}

func listType(ctx context.Context, dyn dynamic.Interface, r servedResource, sel *selector, opts Options) (*typeTally, error) {
	t := &typeTally{
		res:      Resource{Group: r.gvr.Group, Version: r.gvr.Version, Resource: r.gvr.Resource, Kind: r.kind, Namespaced: r.namespaced},
		excluded: map[[2]string]*Exclusion{}, owners: map[schema.GroupKind]bool{}, podUses: map[string][]PodUse{},
	}
	gr := r.groupResource()
	typeReason := rules.For(gr).Never
	if typeReason == "" {
		typeReason = sel.resourceReason(r)
	}
	exclude := func(ns, reason string) {
		key := [2]string{ns, reason}
		if t.excluded[key] == nil {
			t.excluded[key] = &Exclusion{Resource: gr, Namespace: ns, Reason: reason}
		}
		t.excluded[key].Count++
	}
	err := kube.EachObject(ctx, dyn, r.gvr, "", opts.PageSize, func(obj *unstructured.Unstructured) error {
		if typeReason != "" {
			exclude("", typeReason)
			return nil
		}
		if reason := rules.For(gr).ExcludeReason(obj.Object); reason != "" {
			if rules.For(gr).Counted {
				exclude(obj.GetNamespace(), reason)
				return nil
			}
			t.single = append(t.single, Exclusion{Resource: gr, Namespace: obj.GetNamespace(), Name: obj.GetName(), Count: 1, Reason: reason})
			if gr == "namespaces" {
				t.names = append(t.names, obj.GetName()) // exists, though it does not move
			}
			return nil
		}
		if reason := sel.objectReason(r, obj); reason != "" {
			exclude(obj.GetNamespace(), reason)
			return nil
		}
		data, err := json.Marshal(obj.Object)
		if err != nil {
			return err
		}
		size := int64(len(data))
		t.res.Count++
		t.res.Bytes += size
		if ns := obj.GetNamespace(); ns != "" {
			if t.res.Namespaces == nil {
				t.res.Namespaces = map[string]Count{}
			}
			c := t.res.Namespaces[ns]
			c.Count++
			c.Bytes += size
			t.res.Namespaces[ns] = c
		}
		for _, ref := range obj.GetOwnerReferences() {
			if gv, err := schema.ParseGroupVersion(ref.APIVersion); err == nil {
				t.owners[schema.GroupKind{Group: gv.Group, Kind: ref.Kind}] = true
			}
		}
		t.observe(gr, obj)
		return nil
	})
	if err != nil && typeReason != "" && apierrors.IsForbidden(err) {
		// A type that does not move may be closed to a least-privilege identity (a schedule's):
		// it is left out as it would be, uncounted.
		t.excluded = map[[2]string]*Exclusion{{"", typeReason}: {Resource: gr, Reason: typeReason + " (not counted: this identity may not list them)"}}
		return t, nil
	}
	if unlisted := rules.For(gr).Unlisted; err != nil && unlisted != "" && apierrors.IsForbidden(err) {
		t.res.Count, t.res.Bytes, t.res.Namespaces = 0, 0, nil
		t.unlisted = unlisted
		t.excluded = map[[2]string]*Exclusion{{"", "unlisted"}: {Resource: gr, Reason: "not read: this identity may not list them"}}
		return t, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", gr, err)
	}
	return t, nil
}

// alwaysRead are the types a backup reads whatever the selection: namespaces (the cluster's
// identity, the volumes' namespaces), the pods and claims that locate volumes and data, the
// volumes and classes of those claims, the quotas and limits mover pods must fit, and the
// definitions of custom resources.
var alwaysRead = []schema.GroupResource{
	{Resource: "namespaces"}, {Resource: "pods"}, {Resource: "persistentvolumeclaims"}, {Resource: "persistentvolumes"},
	{Resource: "resourcequotas"}, {Resource: "limitranges"}, {Group: "storage.k8s.io", Resource: "storageclasses"},
	{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"},
}

// Readable lists the resource types a backup with cfg lists cluster-wide: every served type that
// may move (not left out by type nor by cfg's resources), and alwaysRead; sorted. A
// least-privilege identity for backups (a schedule's) may get and list these and no more.
func Readable(dc discovery.DiscoveryInterface, cfg config.Planning) ([]schema.GroupResource, error) {
	served, err := discover(dc, &Plan{})
	if err != nil {
		return nil, err
	}
	sel, err := newSelector(cfg)
	if err != nil {
		return nil, err
	}
	seen := map[schema.GroupResource]bool{}
	for _, gr := range alwaysRead {
		seen[gr] = true
	}
	for _, r := range served {
		if rules.For(r.groupResource()).Never == "" && sel.resourceReason(r) == "" {
			seen[r.gvr.GroupResource()] = true
		}
	}
	out := slices.Collect(maps.Keys(seen))
	slices.SortFunc(out, func(a, b schema.GroupResource) int { return strings.Compare(a.String(), b.String()) })
	return out, nil
}

// writtenHostPaths are the paths of the pod's hostPath volumes that a container mounts writable,
// but sockets and devices: where the pod may keep data on its node's disk.
func writtenHostPaths(pod map[string]any) []string {
	writable := map[string]bool{}
	for _, list := range []string{"initContainers", "containers"} {
		containers, _, _ := unstructured.NestedSlice(pod, "spec", list)
		for _, c := range containers {
			mounts, _, _ := unstructured.NestedSlice(c.(map[string]any), "volumeMounts")
			for _, m := range mounts {
				mm := m.(map[string]any)
				if ro, _ := mm["readOnly"].(bool); !ro {
					name, _ := mm["name"].(string)
					writable[name] = true
				}
			}
		}
	}
	var out []string
	vols, _, _ := unstructured.NestedSlice(pod, "spec", "volumes")
	for _, v := range vols {
		vm := v.(map[string]any)
		path, _, _ := unstructured.NestedString(vm, "hostPath", "path")
		kind, _, _ := unstructured.NestedString(vm, "hostPath", "type")
		name, _ := vm["name"].(string)
		if path != "" && writable[name] && kind != "Socket" && kind != "CharDevice" && kind != "BlockDevice" {
			out = append(out, path)
		}
	}
	return out
}

// warnHostData warns of each folder of the nodes that the plan's pods write to, by namespace:
// what they keep there is on a node of the source, in no claim, and does not move.
func warnHostData(p *Plan, uses []hostPathUse) {
	type key struct{ namespace, path string }
	pods := map[key][]string{}
	for _, u := range uses {
		k := key{u.namespace, u.path}
		pods[k] = append(pods[k], u.pod)
	}
	keys := slices.SortedFunc(maps.Keys(pods), func(a, b key) int {
		return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.path, b.path))
	})
	for _, k := range keys {
		names := slices.Sorted(slices.Values(pods[k]))
		who := "pod " + names[0]
		if len(names) > 1 {
			who = fmt.Sprintf("pods %s and %d more", names[0], len(names)-1)
		}
		p.warn("namespace "+k.namespace, "hostPath %s is written by %s: ferry moves claims, not a node's folders, so what is kept there does not move", k.path, who)
	}
}

// observe keeps what later steps need from particular kinds of objects.
func (t *typeTally) observe(gr string, obj *unstructured.Unstructured) {
	switch gr {
	case "namespaces":
		t.names = append(t.names, obj.GetName())
	case "customresourcedefinitions.apiextensions.k8s.io":
		t.crds = append(t.crds, crdInfo(obj))
	case "persistentvolumeclaims":
		t.claims = append(t.claims, claimInfo(obj))
	case "services":
		t.ports = append(t.ports, rules.ChosenNodePortsOf(obj.Object)...)
		t.ips = append(t.ips, rules.ChosenClusterIPOf(obj.Object)...)
	case "pods":
		node, _, _ := unstructured.NestedString(obj.Object, "spec", "nodeName")
		vols, _, _ := unstructured.NestedSlice(obj.Object, "spec", "volumes")
		for _, path := range writtenHostPaths(obj.Object) {
			t.hostPaths = append(t.hostPaths, hostPathUse{namespace: obj.GetNamespace(), pod: obj.GetName(), path: path})
		}
		var placement *NodePlacement
		placed := false
		for _, v := range vols {
			claim, _, _ := unstructured.NestedString(v.(map[string]any), "persistentVolumeClaim", "claimName")
			ro, _, _ := unstructured.NestedBool(v.(map[string]any), "persistentVolumeClaim", "readOnly")
			if claim == "" {
				continue
			}
			if !placed {
				placement, placed = podPlacement(obj.Object), true
			}
			key := obj.GetNamespace() + "/" + claim
			t.podUses[key] = append(t.podUses[key], PodUse{Name: obj.GetName(), Node: node, ReadOnly: ro, Placement: placement})
		}
	}
}

// podPlacement is the placement of a pod as listed (placementOf), of its spec's fields that say
// it alone (the rest is not decoded); nil when they do not decode, as a pod's always do.
func podPlacement(pod map[string]any) *NodePlacement {
	spec, _ := pod["spec"].(map[string]any) // read, not copied as NestedMap would
	fields := map[string]any{}
	for _, f := range []string{"nodeSelector", "affinity", "tolerations"} {
		if v, ok := spec[f]; ok {
			fields[f] = v
		}
	}
	var placing corev1.PodSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(fields, &placing); err != nil {
		return nil
	}
	return placementOf(placing)
}

func crdInfo(obj *unstructured.Unstructured) CRD {
	c := CRD{Name: obj.GetName(), Conversion: "None"}
	c.Group, _, _ = unstructured.NestedString(obj.Object, "spec", "group")
	c.Kind, _, _ = unstructured.NestedString(obj.Object, "spec", "names", "kind")
	c.Scope, _, _ = unstructured.NestedString(obj.Object, "spec", "scope")
	if s, ok, _ := unstructured.NestedString(obj.Object, "spec", "conversion", "strategy"); ok {
		c.Conversion = s
	}
	versions, _, _ := unstructured.NestedSlice(obj.Object, "spec", "versions")
	for _, v := range versions {
		vm := v.(map[string]any)
		name, _ := vm["name"].(string)
		if served, _ := vm["served"].(bool); served {
			c.ServedVersions = append(c.ServedVersions, name)
		}
		if storage, _ := vm["storage"].(bool); storage {
			c.StorageVersion = name
		}
	}
	c.StoredVersions, _, _ = unstructured.NestedStringSlice(obj.Object, "status", "storedVersions")
	return c
}

func claimInfo(obj *unstructured.Unstructured) Volume {
	v := Volume{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	var set bool
	v.StorageClass, set, _ = unstructured.NestedString(obj.Object, "spec", "storageClassName")
	v.NoClass = set && v.StorageClass == ""
	if sel, ok, _ := unstructured.NestedMap(obj.Object, "spec", "selector"); ok && len(sel) > 0 {
		v.Selector = &metav1.LabelSelector{}
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(sel, v.Selector) // as the API server wrote it
	}
	v.AccessModes, _, _ = unstructured.NestedStringSlice(obj.Object, "spec", "accessModes")
	v.Phase, _, _ = unstructured.NestedString(obj.Object, "status", "phase")
	v.VolumeName, _, _ = unstructured.NestedString(obj.Object, "spec", "volumeName")
	if mode, _, _ := unstructured.NestedString(obj.Object, "spec", "volumeMode"); mode != "Filesystem" {
		v.VolumeMode = mode
	}
	capacity, ok, _ := unstructured.NestedString(obj.Object, "status", "capacity", "storage")
	if !ok {
		capacity, _, _ = unstructured.NestedString(obj.Object, "spec", "resources", "requests", "storage")
	}
	v.Capacity = capacity
	if q, err := resource.ParseQuantity(capacity); err == nil {
		v.Bytes = q.Value()
	}
	return v
}

func sortExclusions(ex []Exclusion) {
	sort.Slice(ex, func(i, j int) bool {
		a, b := ex[i], ex[j]
		if a.Resource != b.Resource {
			return a.Resource < b.Resource
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
}

// countCRs fills in each CRD's number of custom resources in the plan.
func countCRs(p *Plan) {
	counts := map[string]int{}
	for _, r := range p.Resources {
		counts[r.GroupResource()] += r.Count
	}
	for i := range p.CRDs {
		p.CRDs[i].Count = counts[p.CRDs[i].Name]
	}
}

// Filter decides object by object what a plan moves, so that a backup taken after planning applies
// the same rules to the live cluster.
type Filter struct{ sel *selector }

// NewFilter makes the filter of a configuration.
func NewFilter(cfg config.Planning) (*Filter, error) {
	sel, err := newSelector(cfg)
	if err != nil {
		return nil, err
	}
	return &Filter{sel: sel}, nil
}

// NewBackupFilter makes the filter of a restore's or verify's selection: it leaves out what the
// selection does and no more. The backup holds what its own plan chose, the contents of a
// cluster's own namespaces too when it named them (a Velero backup holds them whatever it names:
// its restore leaves them unless NamesNamespace).
func NewBackupFilter(cfg config.Planning) (*Filter, error) {
	f, err := NewFilter(cfg)
	if err != nil {
		return nil, err
	}
	f.sel.anyNS = true
	return f, nil
}

// NamesNamespace says whether the selection names namespace ns in include.namespaces.
func (f *Filter) NamesNamespace(ns string) bool { return f != nil && f.sel.namedNS[ns] }

// DataReason says why the selection leaves out data that lives in namespace ns (a database's or
// a bucket's pod, a claim), or "": data goes with its namespace. A claim's files go with the
// persistentvolumeclaims resource type too. Labels select objects only.
func (f *Filter) DataReason(ns string, claim bool) string {
	if claim {
		pvc := servedResource{gvr: schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}, kind: "PersistentVolumeClaim", namespaced: true}
		if reason := f.sel.resourceReason(pvc); reason != "" {
			return "claims " + reason
		}
	}
	return f.sel.namespaceReason(ns)
}

// Namespaces are the namespaces the selection names, less the excluded ones, sorted; nil when it
// names none (it then selects every namespace but the excluded ones). A lister of a namespaced type
// lists these one by one: the cluster's whole list of the type, which the filter would mostly drop,
// can be many times larger.
func (f *Filter) Namespaces() []string {
	if f.sel.inNS == nil {
		return nil
	}
	names := []string{}
	for ns := range f.sel.inNS {
		if !f.sel.exNS[ns] {
			names = append(names, ns)
		}
	}
	slices.Sort(names)
	return names
}

// Reason says why obj, of resource type r, does not move, or "" when it does.
func (f *Filter) Reason(r Resource, obj *unstructured.Unstructured) string {
	served := servedResource{gvr: schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource}, kind: r.Kind, namespaced: r.Namespaced}
	gr := served.groupResource()
	for _, reason := range []string{rules.For(gr).Never, f.sel.resourceReason(served), rules.For(gr).ExcludeReason(obj.Object), f.sel.objectReason(served, obj)} {
		if reason != "" {
			return reason
		}
	}
	return ""
}
