package migrate

import (
	"context"
	"encoding/json"
	"path"
	"strings"

	"github.com/ferrykube/ferry/plans/config"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
	argoInClusterServer = "https://kubernetes.default.svc"
)

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
		out = append(out, manager{resource: argoApplicationSets, namespace: obj.GetNamespace(), name: ref.Name})
	}
	return out
}

// pausedManagers are the GitOps objects that apply what targets' rules stop, and those that apply
// them in turn (an app of apps), each with a rule that pauses it: a Flux Kustomization or
// HelmRelease suspended, an Argo CD Application's automated sync turned off, as is an
// ApplicationSet's template's. Stop pauses the
// farthest first and Start resumes them last (ordered). One already paused by its owner is left
// as it is; one a rule selects is that rule's. While Start leaves objects stopped (Later), they
// stay paused: Start resumes them once all runs.
func (q Quiescer) pausedManagers(ctx context.Context, targets []target) []target {
	if len(q.Later) > 0 {
		return nil
	}
	selected := map[string]bool{}
	level := make([]*unstructured.Unstructured, 0, len(targets))
	for _, t := range targets {
		selected[targetKey(t)] = true
		level = append(level, t.obj)
	}
	found := map[string]*target{}
	var keys []string
	for depth := 1; len(level) > 0 && depth <= maxManagerDepth; depth++ {
		var next []*unstructured.Unstructured
		for _, obj := range level {
			for _, m := range managersOf(obj) {
				for _, mobj := range q.managerObjects(ctx, m, obj) {
					key := targetKey(target{obj: mobj})
					if t, ok := found[key]; ok {
						if depth > t.manages { // farther through another path: its managers are too
							t.manages = depth
							next = append(next, mobj)
						}
						continue
					}
					rule, pause := managerRule(m.resource, mobj, obj)
					if !pause || selected[key] {
						continue
					}
					gvr, _, err := q.resolve(m.resource)
					if err != nil {
						continue
					}
					found[key] = &target{rule: rule, client: q.Dynamic.Resource(gvr).Namespace(mobj.GetNamespace()), obj: mobj, manages: depth}
					keys = append(keys, key)
					next = append(next, mobj)
				}
			}
		}
		level = next
	}
	out := make([]target, 0, len(keys))
	for _, key := range keys {
		out = append(out, *found[key])
	}
	return out
}

// gitOpsPaused names the GitOps objects among items ("Resource namespace/name").
func gitOpsPaused(items []QuiesceItem) []string {
	var out []string
	for _, it := range items {
		switch it.Resource {
		case argoApplications, argoApplicationSets, fluxKustomizations, fluxHelmReleases:
			out = append(out, it.Resource+" "+path.Join(it.Namespace, it.Name))
		}
	}
	return out
}

// managerObjects are the objects m names that apply obj. A manager the cluster does not serve, or
// does not hold, is none: a GitOps tool run from another cluster is paused by hand (said), and a
// writer it starts again stops the run (Stop's wait, Held). One that cannot be read is logged.
func (q Quiescer) managerObjects(ctx context.Context, m manager, obj *unstructured.Unstructured) []*unstructured.Unstructured {
	gvr, _, err := q.resolve(m.resource)
	if err != nil {
		if m.tracked {
			q.Log.Warn("quiesce: Argo CD applies a writer from another cluster: turn off its application's automated sync there before the run",
				"resource", obj.GetKind(), "namespace", obj.GetNamespace(), "name", obj.GetName(), "application", m.name)
		}
		return nil
	}
	unread := func(err error) []*unstructured.Unstructured {
		q.Log.Warn("quiesce: the GitOps object that applies a writer cannot be read: it is not paused with it (ferry's user needs get, list and patch on it)",
			"resource", m.resource, "namespace", m.namespace, "name", m.name, "error", err)
		return nil
	}
	if m.namespace != "" {
		mobj, err := q.Dynamic.Resource(gvr).Namespace(m.namespace).Get(ctx, m.name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return unread(err)
		}
		return []*unstructured.Unstructured{mobj}
	}
	list, err := q.Dynamic.Resource(gvr).List(ctx, metav1.ListOptions{})
	if err != nil {
		return unread(err)
	}
	var out []*unstructured.Unstructured
	for i := range list.Items {
		app := &list.Items[i]
		// An instance label matches an Application of that name that deploys to this cluster;
		// it may be only a Helm chart's.
		if app.GetName() == m.name && (m.tracked || deploysHere(app)) {
			out = append(out, app)
		}
	}
	return out
}

// deploysHere says whether an Argo CD Application deploys to the cluster that holds it.
func deploysHere(app *unstructured.Unstructured) bool {
	dest, _, _ := unstructured.NestedStringMap(app.Object, "spec", "destination")
	return dest["server"] == argoInClusterServer || dest["name"] == "in-cluster"
}

// argoAutomated is where an Argo CD object of resource holds its automated sync: an
// Application's own, the one an ApplicationSet's template gives its Applications.
var argoAutomated = map[string][]string{
	argoApplications:    {"spec", "syncPolicy", "automated"},
	argoApplicationSets: {"spec", "template", "spec", "syncPolicy", "automated"},
}

// managerRule is the rule that pauses mobj, a GitOps object of resource that applies obj, and
// whether it needs one: not when it is paused already, unless by ferry (Start resumes it).
func managerRule(resource string, mobj, obj *unstructured.Unstructured) (config.QuiesceRule, bool) {
	_, recorded := mobj.GetAnnotations()[QuiescedAnnotation]
	what := strings.ToLower(obj.GetKind()) + " " + obj.GetName()
	rule := config.QuiesceRule{Resource: resource, Namespace: mobj.GetNamespace(), Names: []string{mobj.GetName()}}
	if fields, ok := argoAutomated[resource]; ok {
		automated, on, _ := unstructured.NestedMap(mobj.Object, fields...)
		if enabled, set := automated["enabled"].(bool); set && !enabled {
			on = false // Argo CD 3's switch
		}
		off := map[string]any{fields[len(fields)-1]: nil}
		for i := len(fields) - 2; i >= 0; i-- {
			off = map[string]any{fields[i]: off}
		}
		patch, _ := json.Marshal(off)
		rule.Action, rule.Patch = Patch, string(patch)
		rule.Why = "Argo CD's automated sync would start " + what + " again: turned off with it"
		if resource == argoApplicationSets {
			rule.Why = "Argo CD's ApplicationSet would give " + what + " its automated sync back: turned off in its template"
		}
		return rule, on || recorded
	}
	suspended, _, _ := unstructured.NestedBool(mobj.Object, "spec", "suspend")
	rule.Action = Suspend
	rule.Why = "Flux would apply " + what + " again from its source: suspended with it"
	return rule, !suspended || recorded
}
