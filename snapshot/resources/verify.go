package resources

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/rules"
	"github.com/ferrykube/ferry/snapshot"
	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
)

// Verify implements snapshot.Kind: every object of the backup that a restore creates must be on the
// target and contain every field of its prepared form (Prepare) with the same value; each
// workload's rollout history must be the backup's (verifyHistory); then the
// restored workloads must become healthy within WaitTimeout: Deployments Available, StatefulSets
// ready, PersistentVolumeClaims Bound, Jobs not failed.
func (c Objects) Verify(ctx context.Context, r *snapshot.Reader, report *snapshot.Report) error {
	c.velero = r.Velero
	archive, err := c.readArchive(ctx, r)
	if err != nil {
		return err
	}
	defer archive.Close()
	return c.verifyArchive(ctx, r.Manifest.Plan, archive, nil, report)
}

// verifyArchive verifies the archive's objects on the target, and the health of its workloads
// (those healthOf names by ID, or all when it is nil).
func (c Objects) verifyArchive(ctx context.Context, plan *plans.Plan, archive *Archive, healthOf func(id string) bool, report *snapshot.Report) error {
	c, err := c.withDefaults().forUpgrade(plan)
	if err != nil {
		return err
	}
	archive.index()
	order, err := restoreOrder(plan, archive)
	if err != nil {
		return err
	}
	claims, archived := claimsOf(archive), archive.owners()
	var health []healthCheck
	var admitted admissions
	if len(archive.ByResource["horizontalpodautoscalers.autoscaling"]) > 0 {
		admitted.autoscaled = c.autoscaled(ctx)
	}
	for _, res := range order {
		entries := archive.ByResource[res.GroupResource()]
		if len(entries) == 0 {
			continue
		}
		if c.unserved(res) != "" {
			report.CountN("objects", snapshot.StatusLeft, len(entries)) // the restore lists them
			continue
		}
		checks, err := c.verifyType(ctx, res, archive, entries, claims, archived, &admitted, report)
		if err != nil {
			return err
		}
		for _, h := range checks {
			if healthOf == nil || healthOf(h.id) {
				health = append(health, h)
			}
		}
	}
	admitted.settle(report)
	c.verifyHistory(ctx, order, archive, &admitted.revisions, report)
	c.verifyHealth(ctx, health, report)
	return nil
}

// admissions is what verify found the target's admission made: the objects it holds as its
// admission makes the backup's (IDs -> the revision their controller numbered them by), and the
// ReplicaSets that differ only in what their Deployment scales, settled once the Deployments are
// verified.
type admissions struct {
	revisions sync.Map
	mu        sync.Mutex
	scaled    []scaledDiff
	// autoscaled are the workloads the target's autoscalers scale (scaleKey).
	autoscaled map[string]bool
}

// scaledDiff is a ReplicaSet (id) whose Deployment (owner, by ID) may have scaled it, and how it
// differs; autoscaled when the target's autoscaler scales that Deployment.
type scaledDiff struct {
	id, owner, diffs string
	autoscaled       bool
}

// settle reports each ReplicaSet of scaled: one whose Deployment the target's admission changed
// is its rollout's to scale (to the template the admission made), one whose Deployment an
// autoscaler scales is the autoscaler's, notes; any other differs.
func (a *admissions) settle(report *snapshot.Report) {
	for _, s := range a.scaled {
		if s.autoscaled {
			report.Add("objects", snapshot.StatusAutoscaled, s.id, "scaled by its Deployment, which the target's autoscaler scales: "+s.diffs)
		} else if _, ok := a.revisions.Load(s.owner); ok {
			report.Add("objects", snapshot.StatusAdmitted, s.id, "scaled by the rollout of its Deployment to the template the target's admission changed: "+s.diffs)
		} else {
			report.Add("objects", snapshot.StatusDifferent, s.id, s.diffs)
		}
	}
}

// autoscaled are the workloads the target's HorizontalPodAutoscalers scale, by scaleKey (read
// when the backup holds autoscalers). Where they cannot be listed (the API is not served, or not
// to ferry), none: differences stand.
func (c Objects) autoscaled(ctx context.Context) map[string]bool {
	gvr := schema.GroupVersionResource{Group: "autoscaling", Version: "v2", Resource: "horizontalpodautoscalers"}
	scaled := map[string]bool{}
	err := kube.EachObject(ctx, c.Dynamic, gvr, "", c.PageSize, func(hpa *unstructured.Unstructured) error {
		ref, _, _ := unstructured.NestedStringMap(hpa.Object, "spec", "scaleTargetRef")
		if gv, err := schema.ParseGroupVersion(ref["apiVersion"]); err == nil {
			scaled[scaleKey(gv.Group, ref["kind"], hpa.GetNamespace(), ref["name"])] = true
		}
		return nil
	})
	if err != nil {
		c.Log.Warn("the target's autoscalers cannot be listed: the replicas they set count as differences", "error", err)
	}
	return scaled
}

// replicas is a workload's spec.replicas (0 when unset): an int64 as the API server's objects
// hold it, a float64 as JSON decodes the archive's.
func replicas(obj map[string]any) int64 {
	v, _, _ := unstructured.NestedFieldNoCopy(obj, "spec", "replicas")
	switch n := v.(type) {
	case int64:
		return n
	case float64:
		return int64(n)
	}
	return 0
}

// scaleKey names a workload an autoscaler may scale.
func scaleKey(group, kind, namespace, name string) string {
	return group + "/" + kind + "/" + namespace + "/" + name
}

// scaledByItsDeployment is the ID of the Deployment that controls live, a ReplicaSet whose
// differences (diffs) are all in what a Deployment's controller sets on its ReplicaSets (their
// replicas and its annotations), or "".
func scaledByItsDeployment(gr string, live *unstructured.Unstructured, diffs []string) string {
	ref := metav1.GetControllerOfNoCopy(live)
	if gr != "replicasets.apps" || ref == nil || ref.Kind != "Deployment" || ref.APIVersion != "apps/v1" {
		return ""
	}
	for _, d := range diffs {
		if path := diffPath(d); path != "spec.replicas" && !strings.HasPrefix(path, `metadata.annotations["deployment.kubernetes.io/`) {
			return ""
		}
	}
	return "apps/v1 Deployment " + live.GetNamespace() + "/" + ref.Name
}

// admittedAs says whether live (of type gvr, gr), which differs from exp as diffs say, is what the
// target makes of exp on create: a dry run of exp's create there, under a name the API server
// makes (exp's is taken) and with live's owners, changed every field that differs, and live holds
// all the dry run made (admissionExplains). A target's mutating admission (an image registry's
// mirror, an enforced pull policy) changes what ferry restores as it changes anything made there.
// A dry run the target refuses (a webhook with side effects, a port already taken, a field its
// schema lacks: the field validation is strict) leaves the difference standing. It returns the
// revision the workload's controller numbered it by (0: none).
func (c Objects) admittedAs(ctx context.Context, gvr schema.GroupVersionResource, gr string, exp map[string]any, live *unstructured.Unstructured, diffs []string) (bool, int64) {
	norm, err := dryRunCreate(ctx, c.Dynamic, gvr, gr, exp, live)
	if err != nil {
		return false, 0
	}
	explained, newRevision := admissionExplains(gr, exp, norm, diffs)
	if !explained {
		return false, 0
	}
	var revision int64
	if newRevision {
		// The changed template is a new revision to the Deployment's controller, which numbers
		// it on the Deployment.
		number := live.GetAnnotations()[deploymentRevision]
		revision, _ = strconv.ParseInt(number, 10, 64)
		annotations, _, _ := unstructured.NestedStringMap(norm, "metadata", "annotations")
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[deploymentRevision] = number
		_ = unstructured.SetNestedStringMap(norm, annotations, "metadata", "annotations")
	}
	return len(c.compare(gr, norm, live)) == 0, revision
}

// dryRunCreate is what the target (dyn) makes of exp, an object of type gvr (gr) that live is its
// copy of, on create, normalized, in live's name: a dry run of exp's create under a name the API
// server makes (live's is taken), with live's owners and strict field validation.
func dryRunCreate(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource, gr string, exp map[string]any, live *unstructured.Unstructured) (map[string]any, error) {
	obj := &unstructured.Unstructured{Object: runtime.DeepCopyJSON(exp)}
	obj.SetName("")
	obj.SetGenerateName(generatedNamePrefix(live.GetName()))
	obj.SetOwnerReferences(live.GetOwnerReferences())
	var client dynamic.ResourceInterface = dyn.Resource(gvr)
	if ns := live.GetNamespace(); ns != "" {
		client = dyn.Resource(gvr).Namespace(ns)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	made, err := client.Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: FieldManager, FieldValidation: metav1.FieldValidationStrict})
	if err != nil {
		return nil, fmt.Errorf("dry run of %s %s: %w", gr, live.GetName(), err)
	}
	made.SetName(live.GetName())
	made.SetGenerateName("")
	return Normalize(gr, made.Object), nil
}

// admissionExplains says whether made, what a dry run of exp's create made of it (normalized),
// explains diffs, how the target's object differs from exp (Compare's): the dry run changed each
// field that differs, no field's removal is among its changes (a pruned or dropped field is a
// loss, whatever drops it), and no owner reference differs (the restore drops those it cannot
// link). A Deployment whose template the dry run changed is given a new revision by its
// controller (newRevision): its revision annotation may differ too.
func admissionExplains(gr string, exp, made map[string]any, diffs []string) (explained, newRevision bool) {
	changed := map[string]bool{}
	for _, d := range Compare(exp, made) {
		if strings.Contains(d, ": missing on the target") {
			return false, false
		}
		path := diffPath(d)
		changed[path] = true
		newRevision = newRevision || (gr == "deployments.apps" && strings.HasPrefix(path, "spec.template"))
	}
	if len(changed) == 0 || len(diffs) == 0 {
		return false, false
	}
	for _, d := range diffs {
		switch path := diffPath(d); {
		case strings.HasPrefix(path, "metadata.ownerReferences"):
			return false, false
		case newRevision && path == revisionPath:
		case !changed[path]:
			return false, false
		}
	}
	return true, newRevision
}

// diffPath is the field a difference of Compare's names.
func diffPath(d string) string {
	path, _, _ := strings.Cut(d, ": ")
	return path
}

// deploymentRevision is the annotation a Deployment's controller numbers its template by.
const deploymentRevision = "deployment.kubernetes.io/revision"

// revisionPath is how Compare names deploymentRevision.
const revisionPath = `metadata.annotations["` + deploymentRevision + `"]`

// generatedNamePrefix is the generateName of a dry run's copy of the object name: short enough
// for the API server's random suffix to fit a DNS label.
func generatedNamePrefix(name string) string {
	cut := name
	if len(cut) > 50 {
		cut = strings.ToValidUTF8(cut[:50], "") // a character cut in two goes
	}
	return cmp.Or(strings.TrimRight(cut, "-."), "ferry") + "-"
}

// expect says what verify expects on the target of an entry (its object, obj): not there, by
// design, when it returns false (and has counted it so).
func (c Objects) expect(res plans.Resource, e Entry, obj map[string]any, archive *Archive, claims, archived map[string]bool, report *snapshot.Report) bool {
	gr := res.GroupResource()
	e.Object = obj
	// In the restore's order, so that each is counted as the restore counted it.
	if !c.selected(res, e) {
		return false
	}
	if c.clusterOwn(e) {
		report.Count("objects", snapshot.StatusLeft) // the source cluster's own, as restore left it
		return false
	}
	if rules.For(gr).SkipReason(obj, claims) != "" {
		return false // not restored, by design; the restore's report lists them
	}
	if why, _ := c.leftOut(gr, e); why != "" {
		report.Count("objects", snapshot.StatusLeft) // not moved, so not compared
		return false
	}
	if recreated(gr, obj, claims, archived, archive) {
		report.Count("objects", snapshot.StatusRecreated)
		return false
	}
	return !(c.SkipOwned && controlled(obj))
}

// targetKey is where an entry is restored under the mapping m: namespace/name, as Prepare maps them.
func targetKey(m snapshot.Mapping, gr string, e Entry) string {
	ns, name := e.Namespace, e.Name
	if ns != "" {
		ns = m.Namespace(ns)
	}
	if gr == "namespaces" {
		name = m.Namespace(name)
	}
	return ns + "/" + name
}

// verifyType compares the entries of one type with the target's objects as it lists them. It
// holds the entries' keys only: each object is read from the archive when its live copy comes.
func (c Objects) verifyType(ctx context.Context, res plans.Resource, archive *Archive, entries []Entry, claims, archived map[string]bool, admitted *admissions, report *snapshot.Report) ([]healthCheck, error) {
	gr := res.GroupResource()
	want := make(map[string]int, len(entries)) // target namespace/name -> index in entries
	for i, e := range entries {
		want[targetKey(c.Mapping, gr, e)] = i
	}
	gvr := schema.GroupVersionResource{Group: res.Group, Version: res.Version, Resource: res.Resource}
	var health []healthCheck
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.Concurrency)
	compare := func(e Entry, live *unstructured.Unstructured) error {
		obj, err := archive.Object(e)
		if err != nil {
			return err
		}
		if !c.expect(res, e, obj, archive, claims, archived, report) {
			return nil
		}
		e.Object = obj
		neverReady := rules.For(gr).NeverReady != nil && rules.For(gr).NeverReady(obj)
		exp := c.prepare(gr, obj)
		id := objectID(exp, live.GetNamespace())
		diffs := c.compare(gr, exp, live)
		var scaled []string
		// An autoscaler never scales from or to none: a writer the quiesce stopped, or one
		// started on the target by something else, still differs.
		running := replicas(exp) > 0 && replicas(live.Object) > 0
		if running && admitted.autoscaled[scaleKey(live.GroupVersionKind().Group, live.GetKind(), live.GetNamespace(), live.GetName())] {
			// Its replicas are its autoscaler's: green's load decides them, not blue's.
			scaled = slices.DeleteFunc(slices.Clone(diffs), func(d string) bool { return diffPath(d) != "spec.replicas" })
			diffs = slices.DeleteFunc(diffs, func(d string) bool { return diffPath(d) == "spec.replicas" })
		}
		if c.greensOwn(gr, e) && len(diffs) > 0 {
			report.Count("objects", snapshot.StatusLeft)
		} else if len(diffs) == 0 && len(scaled) > 0 {
			report.Add("objects", snapshot.StatusAutoscaled, id, "the target's autoscaler scales it: "+strings.Join(scaled, "; "))
		} else if len(diffs) == 0 {
			report.Count("objects", snapshot.StatusIdentical)
		} else if ok, revision := c.admittedAs(gctx, gvr, gr, exp, live, diffs); ok {
			admitted.revisions.Store(id, revision)
			report.Add("objects", snapshot.StatusAdmitted, id, "as the target's admission makes the backup's on create: "+strings.Join(diffs, "; "))
		} else if owner := scaledByItsDeployment(gr, live, diffs); owner != "" {
			deployment := metav1.GetControllerOfNoCopy(live)
			admitted.mu.Lock()
			admitted.scaled = append(admitted.scaled, scaledDiff{id: id, owner: owner, diffs: strings.Join(diffs, "; "),
				autoscaled: running && admitted.autoscaled[scaleKey("apps", "Deployment", live.GetNamespace(), deployment.Name)]})
			admitted.mu.Unlock()
		} else {
			report.Add("objects", snapshot.StatusDifferent, id, strings.Join(diffs, "; "))
		}
		if check := rules.For(gr).Health; check != nil && !neverReady {
			mu.Lock()
			health = append(health, healthCheck{gvr: gvr, namespace: live.GetNamespace(), name: live.GetName(), id: id, healthy: check})
			mu.Unlock()
		}
		return nil
	}
	var listMu sync.Mutex
	lists, lctx := errgroup.WithContext(gctx)
	lists.SetLimit(listsAtOnce)
	for _, ns := range verifyScopes(res, want) {
		lists.Go(func() error {
			return kube.EachObject(lctx, c.Dynamic, gvr, ns, c.PageSize, func(live *unstructured.Unstructured) error {
				key := live.GetNamespace() + "/" + live.GetName()
				listMu.Lock()
				i, ok := want[key]
				delete(want, key)
				listMu.Unlock()
				if ok {
					g.Go(func() error { return compare(entries[i], live) })
				}
				return nil
			})
		})
	}
	err := lists.Wait()
	if werr := g.Wait(); err == nil && werr != nil {
		return nil, werr
	}
	if err != nil {
		return nil, fmt.Errorf("list %s on the target: %w", gr, err)
	}
	for _, i := range want {
		e := entries[i]
		obj, err := archive.Object(e)
		if err != nil {
			return nil, err
		}
		if !c.expect(res, e, obj, archive, claims, archived, report) {
			continue
		}
		if controlled(obj) {
			// Its controller, restored too, replaced it (a ReplicaSet's pod, say).
			report.Count("objects", snapshot.StatusRecreated)
			continue
		}
		exp := c.prepare(gr, obj)
		report.Add("objects", snapshot.StatusMissing, objectID(exp, (&unstructured.Unstructured{Object: exp}).GetNamespace()), "not on the target")
	}
	return health, nil
}

// verifyScopes are the namespaces verify lists a type's live objects in, given want's keys
// (target namespace/name): each namespace of them when they are few, or hold many objects each
// (their lists then run at once, and the target's other namespaces are not read); else the
// whole cluster ("") in one list.
func verifyScopes(res plans.Resource, want map[string]int) []string {
	if !res.Namespaced {
		return []string{""}
	}
	seen := map[string]bool{}
	for key := range want {
		ns, _, _ := strings.Cut(key, "/")
		seen[ns] = true
	}
	if len(seen) > fewNamespaces && len(want) < manyObjects*len(seen) {
		return []string{""}
	}
	return slices.Sorted(maps.Keys(seen))
}

// fewNamespaces and manyObjects decide between lists of each namespace and one of the cluster.
const fewNamespaces, manyObjects = 16, 100

// listsAtOnce bounds verify's lists of namespaces: each holds pages ahead of the comparisons, and
// 32 of them (the objects' concurrency) held 312 MiB at 50,000 objects where one list held 173.
const listsAtOnce = 4

type healthCheck struct {
	gvr             schema.GroupVersionResource
	namespace, name string
	id              string
	healthy         func(obj map[string]any) (bool, string)
}

// verifyHealth waits up to WaitTimeout for every restored workload to be healthy, then reports
// those that are not.
func (c Objects) verifyHealth(ctx context.Context, checks []healthCheck, report *snapshot.Report) {
	pending := checks
	why := map[string]string{}
	_ = wait.PollUntilContextTimeout(ctx, time.Second, c.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		var still []healthCheck
		for _, h := range pending {
			client := c.Dynamic.Resource(h.gvr).Namespace(h.namespace)
			// Each read gets its own deadline, so that the wait's end is not taken for the reason.
			getCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			live, err := client.Get(getCtx, h.name, metav1.GetOptions{})
			cancel()
			if err != nil {
				why[h.id] = err.Error()
				still = append(still, h)
				continue
			}
			if ok, reason := h.healthy(live.Object); !ok {
				why[h.id] = reason
				still = append(still, h)
				continue
			}
			report.Count("health", snapshot.StatusHealthy)
		}
		pending = still
		return len(pending) == 0, nil
	})
	for _, h := range pending {
		report.Addf("health", snapshot.StatusUnhealthy, h.id, "%s after %s", why[h.id], c.WaitTimeout)
	}
}
