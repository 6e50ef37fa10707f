package migrate

import (
	"context"
	"encoding/json"
	"path"
	"slices"
	"strings"

	"github.com/ferrykube/ferry/plans/config"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// A GitOps tool applies again what its repository holds: Argo CD's self-heal puts a stopped
// writer's replicas back at once, Flux at its next reconcile, while the data moves or after the
// cutover, on the cluster that is to stay stopped. pausedManagers pauses the tool's objects that
// apply the writers with them, as an operator's runbook does by hand.
const (
	argoApplications    = "applications.argoproj.io"
	argoApplicationSets = "applicationsets.argoproj.io"
	fluxKustomizations  = "kustomizations.kustomize.toolkit.fluxcd.io"
	fluxHelmReleases    = "helmreleases.helm.toolkit.fluxcd.io"
	argoTrackingID      = "argocd.argoproj.io/tracking-id"
	argoInstanceLabel   = "app.kubernetes.io/instance"
	maxManagerDepth     = 8 // an app of apps of apps ...; a cycle ends here
	argoAutomatedOff    = `{"spec":{"syncPolicy":{"automated":null}}}`
)

// gitOpsResources are the GitOps objects' types the quiesce pauses.
var gitOpsResources = []string{argoApplications, argoApplicationSets, fluxKustomizations, fluxHelmReleases}

// fluxManagers are Flux's kinds of object that apply others, by the prefix of the labels
// ("<prefix>/name", "<prefix>/namespace") they put on what they apply.
var fluxManagers = [...]struct{ labelPrefix, resource string }{
	{"kustomize.toolkit.fluxcd.io", fluxKustomizations},
	{"helm.toolkit.fluxcd.io", fluxHelmReleases},
}

// manager names a GitOps object that says it applies another; namespace "" is any (an Argo CD
// Application of Argo CD's own namespace, which the tracking mark leaves out).
type manager struct {
	resource, namespace, name string
	// tracked says the object names it in Argo CD's tracking annotation, not its instance label,
	// which Helm charts set too.
	tracked bool
}

// managersOf names the GitOps objects whose marks obj carries: Flux's labels, Argo CD's tracking
// annotation (its default since 3.0) or, without one, its instance label ("<namespace>_<name>"
// for an Application outside Argo CD's namespace), and the ApplicationSet that controls an
// Application (it puts back what its template says).
func managersOf(obj *unstructured.Unstructured) []manager {
	labels := obj.GetLabels()
	var out []manager
	for _, flux := range fluxManagers {
		name, ns := labels[flux.labelPrefix+"/name"], labels[flux.labelPrefix+"/namespace"]
		if name != "" && ns != "" {
			out = append(out, manager{resource: flux.resource, namespace: ns, name: name})
		}
	}
	app, tracked := labels[argoInstanceLabel], false
	if id := obj.GetAnnotations()[argoTrackingID]; id != "" {
		app, _, _ = strings.Cut(id, ":")
		tracked = true
	}
	if app != "" {
		ns, name, inNamespace := strings.Cut(app, "_")
		if !inNamespace {
			ns, name = "", app
		}
		out = append(out, manager{resource: argoApplications, namespace: ns, name: name, tracked: tracked})
	}
	if ref := metav1.GetControllerOf(obj); ref != nil && ref.Kind == "ApplicationSet" && strings.HasPrefix(ref.APIVersion, "argoproj.io/") {
		out = append(out, manager{resource: argoApplicationSets, namespace: obj.GetNamespace(), name: ref.Name, tracked: true})
	}
	return out
}

// pausedManagers are the GitOps objects that apply what targets' rules stop, and those that apply
// them in turn (an app of apps), each with a rule that pauses it (managerRule): a Flux
// Kustomization or HelmRelease suspended, an Argo CD Application's automated sync turned off, an
// ApplicationSet told to leave its Applications' sync alone. Stop pauses the farthest first and
// Start resumes them last (ordered). One paused already by its owner is left as it is, and one a
// rule selects is that rule's, but what applies them is walked up to all the same. Those that
// carry ferry's record are among them however they are found (a writer deleted since, a
// namespace the run maps). While Start leaves objects stopped (Later), they stay paused: Start
// resumes them once all runs.
func (q Quiescer) pausedManagers(ctx context.Context, targets []target) []target {
	if len(q.Later) > 0 || len(targets) == 0 {
		return nil
	}
	lists := &managerLists{gvr: map[string]schema.GroupVersionResource{}, objs: map[string][]*unstructured.Unstructured{}, read: map[string]bool{}}
	selected := map[string]bool{}
	level := make([]*unstructured.Unstructured, 0, len(targets))
	for _, t := range targets {
		selected[targetKey(t)] = true
		level = append(level, t.obj)
	}
	found := map[string]*target{}
	children := map[string][]string{} // an ApplicationSet's key -> the Applications paused of it
	var keys []string
	walked := map[string]int{}
	for depth := 1; len(level) > 0 && depth <= maxManagerDepth; depth++ {
		var next []*unstructured.Unstructured
		for _, obj := range level {
			for _, m := range managersOf(obj) {
				if m.namespace != "" && q.Namespace != nil {
					m.namespace = q.Namespace(m.namespace)
				}
				for _, mobj := range q.managerObjects(ctx, lists, m, obj) {
					key := targetKey(target{obj: mobj})
					if walked[key] < depth { // first seen, or farther through another path
						walked[key] = depth
						next = append(next, mobj)
					}
					if t, ok := found[key]; ok {
						t.manages = max(t.manages, depth)
					} else if rule, pause := managerRule(m.resource, mobj, obj); pause && !selected[key] {
						found[key] = &target{rule: rule, client: q.Dynamic.Resource(lists.gvr[m.resource]).Namespace(mobj.GetNamespace()), obj: mobj, manages: depth}
						keys = append(keys, key)
					}
					if m.resource == argoApplicationSets && found[key] != nil && !slices.Contains(children[key], obj.GetName()) {
						children[key] = append(children[key], obj.GetName())
					}
				}
			}
		}
		level = next
	}
	for _, resource := range gitOpsResources {
		for _, mobj := range lists.all(ctx, q, resource) {
			key := targetKey(target{obj: mobj})
			if _, recorded := mobj.GetAnnotations()[QuiescedAnnotation]; recorded && found[key] == nil && !selected[key] {
				rule, _ := managerRule(resource, mobj, mobj)
				found[key] = &target{rule: rule, client: q.Dynamic.Resource(lists.gvr[resource]).Namespace(mobj.GetNamespace()), obj: mobj, manages: maxManagerDepth}
				keys = append(keys, key)
			}
		}
	}
	out := make([]target, 0, len(keys))
	for _, key := range keys {
		t := *found[key]
		if t.rule.Resource == argoApplicationSets && len(children[key]) > 0 {
			t.rule.Patch = appSetLeavesSync(t.obj, children[key])
		}
		out = append(out, t)
	}
	return out
}

// managerLists holds, for one pausedManagers, the GitOps types' resources and every object of
// those it listed whole.
type managerLists struct {
	gvr  map[string]schema.GroupVersionResource
	objs map[string][]*unstructured.Unstructured
	read map[string]bool
}

// all are the objects of resource on the cluster, listed once; none when it is not served or
// cannot be listed (logged).
func (l *managerLists) all(ctx context.Context, q Quiescer, resource string) []*unstructured.Unstructured {
	if l.read[resource] {
		return l.objs[resource]
	}
	l.read[resource] = true
	gvr, _, err := q.resolve(resource)
	if err != nil {
		return nil
	}
	l.gvr[resource] = gvr
	list, err := q.Dynamic.Resource(gvr).List(ctx, metav1.ListOptions{})
	if err != nil {
		q.Log.Warn("quiesce: GitOps objects cannot be listed: those that apply the writers are not paused with them (ferry's user needs get, list and patch on them)",
			"resource", resource, "error", err)
		return nil
	}
	for i := range list.Items {
		l.objs[resource] = append(l.objs[resource], &list.Items[i])
	}
	return l.objs[resource]
}

// managerObjects are the objects m names that apply obj. A manager the cluster does not serve, or
// does not hold, is none: a GitOps tool run from another cluster is paused by hand (said), and a
// writer it starts again stops the run (Stop's wait, Held). An Application named only by an
// instance label (which Helm charts set too) must list obj among the resources it manages.
func (q Quiescer) managerObjects(ctx context.Context, lists *managerLists, m manager, obj *unstructured.Unstructured) []*unstructured.Unstructured {
	all := lists.all(ctx, q, m.resource)
	if _, served := lists.gvr[m.resource]; !served && m.tracked && m.resource == argoApplications {
		q.Log.Warn("quiesce: Argo CD applies a writer from another cluster: turn off its application's automated sync there before the run",
			"resource", obj.GetKind(), "namespace", obj.GetNamespace(), "name", obj.GetName(), "application", m.name)
	}
	var out []*unstructured.Unstructured
	for _, mobj := range all {
		if mobj.GetName() != m.name || (m.namespace != "" && mobj.GetNamespace() != m.namespace) {
			continue
		}
		if m.resource == argoApplications && !m.tracked && !manages(mobj, obj) {
			continue
		}
		out = append(out, mobj)
	}
	return out
}

// manages says whether an Argo CD Application lists obj among the resources it manages.
func manages(app, obj *unstructured.Unstructured) bool {
	resources, _, _ := unstructured.NestedSlice(app.Object, "status", "resources")
	gvk := obj.GroupVersionKind()
	for _, r := range resources {
		res, _ := r.(map[string]any)
		group, _ := res["group"].(string)
		ns, _ := res["namespace"].(string)
		if group == gvk.Group && res["kind"] == gvk.Kind && res["name"] == obj.GetName() && ns == obj.GetNamespace() {
			return true
		}
	}
	return false
}

// gitOpsPaused names the GitOps objects among items ("Resource namespace/name").
func gitOpsPaused(items []QuiesceItem) []string {
	var out []string
	for _, it := range items {
		if slices.Contains(gitOpsResources, it.Resource) {
			out = append(out, it.Resource+" "+path.Join(it.Namespace, it.Name))
		}
	}
	return out
}

// managerRule is the rule that pauses mobj, a GitOps object of resource that applies obj, and
// whether it needs one: not when it is paused already, unless by ferry (Start resumes it).
func managerRule(resource string, mobj, obj *unstructured.Unstructured) (config.QuiesceRule, bool) {
	_, recorded := mobj.GetAnnotations()[QuiescedAnnotation]
	what := strings.ToLower(obj.GetKind()) + " " + obj.GetName()
	rule := config.QuiesceRule{Resource: resource, Namespace: mobj.GetNamespace(), Names: []string{mobj.GetName()}, Action: Patch}
	switch resource {
	case argoApplications:
		rule.Patch = argoAutomatedOff
		rule.Why = "Argo CD's automated sync would start " + what + " again: turned off with it"
		return rule, syncsByItself(mobj) || recorded
	case argoApplicationSets:
		// It would put its template's sync policy back on the Application and drop ferry's
		// record from it: it is told to leave both (pausedManagers names every such Application).
		rule.Patch = appSetLeavesSync(mobj, []string{obj.GetName()})
		rule.Why = "Argo CD's ApplicationSet would give " + what + " its automated sync back: told to leave it alone"
		return rule, syncsByItself(obj) || recorded
	}
	suspended, _, _ := unstructured.NestedBool(mobj.Object, "spec", "suspend")
	rule.Action = Suspend
	rule.Why = "Flux would apply " + what + " again from its source: suspended with it"
	return rule, !suspended || recorded
}

// syncsByItself says whether an Argo CD Application has automated sync on (an empty automated
// is on; Argo CD 3's enabled: false turns it off).
func syncsByItself(app *unstructured.Unstructured) bool {
	automated, on, _ := unstructured.NestedMap(app.Object, "spec", "syncPolicy", "automated")
	if enabled, set := automated["enabled"].(bool); set && !enabled {
		return false
	}
	return on
}

// appSetLeavesSync is the merge patch that has an ApplicationSet leave the sync policy of its
// Applications apps as they are (ignoreApplicationDifferences) and keep ferry's record on them
// (preservedFields): its lists with those added.
func appSetLeavesSync(appSet *unstructured.Unstructured, apps []string) string {
	ignored, _, _ := unstructured.NestedSlice(appSet.Object, "spec", "ignoreApplicationDifferences")
	ignored = slices.Clone(ignored)
	for _, app := range apps {
		entry := map[string]any{"name": app, "jsonPointers": []any{"/spec/syncPolicy"}}
		if !slices.ContainsFunc(ignored, func(e any) bool { m, _ := e.(map[string]any); return m["name"] == app }) {
			ignored = append(ignored, entry)
		}
	}
	preserved, _, _ := unstructured.NestedStringSlice(appSet.Object, "spec", "preservedFields", "annotations")
	if !slices.Contains(preserved, QuiescedAnnotation) {
		preserved = append(preserved, QuiescedAnnotation)
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"ignoreApplicationDifferences": ignored,
		"preservedFields": map[string]any{"annotations": preserved}}})
	return string(patch)
}
