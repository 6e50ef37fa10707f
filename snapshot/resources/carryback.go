package resources

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/plans/rules"
	"github.com/ferrykube/ferry/snapshot"
	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
)

// CarryBack is what carrying a cluster's objects back to the cluster they were restored from
// does: blue got a backup restored onto green, green took writes, and blue must now hold exactly
// what green holds.
type CarryBack struct {
	// Expected are green's objects as blue must hold them: in blue's names, prepared (spooled
	// when green's were: Close removes the spool).
	Expected *Archive
	// Deleted are the objects of the original backup, in blue's names, that green no longer holds
	// (their keys: Object is nil).
	Deleted []Entry
	// Created and Changed name the objects green holds that the restore did not put there, and
	// those it holds differently, in blue's names.
	Created, Changed []string
	// Differences gives the first difference of each changed object, by its name.
	Differences map[string]string
	// Admitted names, by object key (group-resource/namespace/name in green's names), the fields
	// green's admission set as the restore made the object there (Admission's): blue is given them
	// as the restore had them. Its rollout history on green, of the template the admission
	// changed, is left to blue's controller.
	Admitted map[string][]string
}

// Close removes the spool of Expected.
func (cb *CarryBack) Close() error {
	if cb == nil {
		return nil
	}
	return cb.Expected.Close()
}

// PlanCarryBack compares the backup restored onto green (original, in blue's names) with
// green's objects taken later (carried, in green's names); m is the forward restore's mapping and
// since when the restore began: an object green made before that (its own StorageClass, say) was
// never blue's and is left out. Objects the restore does not create (finished pods, tokens, pods
// of controllers, volumes of claims) are left out on both sides. A claim green holds as restored
// keeps blue's storage class, which a many-to-one class mapping could not give back. After an
// upgrade (placement), only the objects it moved are compared: each release's own stay as they are.
// admission (nil: none) names what green's admission set on the objects the restore made, which
// are not green's writes (CarryBack.Admitted).
// It holds the objects' keys only; each object is read from its archive when its turn comes.
func PlanCarryBack(ctx context.Context, original, carried *Archive, m snapshot.Mapping, since time.Time, cfg config.Planning, placement *plans.Placement, admission Admission) (*CarryBack, error) {
	back := m.Inverse()
	original.index()
	carried.index()
	// Green's objects are listed as cfg selects them (Live): the original's objects it leaves
	// out (a cluster's own namespaces, which an older ferry backed up) are not compared, nor
	// taken for deleted on green.
	filter, err := plans.NewFilter(cfg)
	if err != nil {
		return nil, err
	}
	origClaims, origOwners := claimsOf(original), original.owners()
	restored := map[string]Entry{} // group-resource/namespace/name on green -> the original's entry
	for gr, entries := range original.ByResource {
		for _, e := range entries {
			obj, err := original.Object(e)
			if err != nil {
				return nil, err
			}
			if rules.For(gr).SkipReason(obj, origClaims) != "" || recreated(gr, obj, origClaims, origOwners, original) || !placement.Moves(gr, e.Namespace, e.Name) ||
				filter.Reason(resourceOf(gr, e), &unstructured.Unstructured{Object: obj}) != "" {
				continue
			}
			restored[gr+"/"+targetKey(m, gr, e)] = e
		}
	}
	var expected *Archive
	if carried.spool != nil {
		var err error
		if expected, err = newSpooledArchive(); err != nil {
			return nil, err
		}
	} else {
		expected = &Archive{ByResource: map[string][]Entry{}}
	}
	cb := &CarryBack{Expected: expected, Differences: map[string]string{}, Admitted: map[string][]string{}}
	claims, owners := claimsOf(carried), carried.owners()
	// Workloads whose template green's admission changed (templateKey): their rollout history on
	// green is of that template. Rollout history comes after the workloads.
	admittedTemplates := map[string]bool{}
	types := slices.SortedFunc(maps.Keys(carried.ByResource), func(a, b string) int {
		return cmp.Or(cmp.Compare(b2i(rules.For(a).History), b2i(rules.For(b).History)), strings.Compare(a, b))
	})
	for _, gr := range types {
		for _, e := range carried.ByResource[gr] {
			obj, err := carried.Object(e)
			if err != nil {
				cb.Close()
				return nil, err
			}
			if rules.For(gr).SkipReason(obj, claims) != "" || recreated(gr, obj, claims, owners, carried) {
				continue
			}
			key := gr + "/" + e.Namespace + "/" + e.Name
			orig, had := restored[key]
			delete(restored, key)
			live := &unstructured.Unstructured{Object: obj}
			if created := live.GetCreationTimestamp(); !had && !created.IsZero() && created.Time.Before(since.Truncate(time.Second)) {
				continue
			}
			if rules.For(gr).History && admittedTemplates[controllerKey(live.Object, e.Namespace)] {
				continue // left to blue's controller, which makes its own of blue's template
			}
			restoredForm, origObj := map[string]any(nil), map[string]any(nil)
			green := Prepare(gr, obj, snapshot.Mapping{})
			if had {
				if origObj, err = original.Object(orig); err != nil {
					cb.Close()
					return nil, err
				}
				restoredForm = Prepare(gr, origObj, m)
				if admission != nil && len(differences(restoredForm, green, cfg.Sensitivity(gr))) > 0 {
					paths, err := admission(ctx, key, gr, restoredForm, live)
					if err != nil {
						cb.Close()
						return nil, fmt.Errorf("%s %s/%s on green: %w", gr, e.Namespace, e.Name, err)
					}
					if len(paths) > 0 {
						cb.Admitted[key] = paths
						obj = revertPaths(obj, restoredForm, paths)
						green = Prepare(gr, obj, snapshot.Mapping{})
						if slices.ContainsFunc(paths, underTemplate) {
							admittedTemplates[templateKey(live.GetAPIVersion(), live.GetKind(), e.Namespace, e.Name)] = true
						}
					}
				}
			}
			blue := Prepare(gr, obj, back)
			if u := (unstructured.Unstructured{Object: blue}); !placement.Moves(gr, u.GetNamespace(), u.GetName()) {
				continue // an upgrade's: green's release's own, or never moved
			}
			if !had {
				keepStatus(gr, blue, obj)
			} else {
				if !sameJSON(obj["status"], restoredStatus(origObj, 1)) {
					keepStatus(gr, blue, obj) // the work went on on green: blue's status is stale
				}
				// Green's admission may have given a claim without a class its default, and
				// the class of a claim (template) is blue's as the restore had it, whatever the
				// mapping back would make of it.
				sameStorageClass(gr, green, restoredForm)
				sameStorageClass(gr, blue, origObj)
			}
			u := unstructured.Unstructured{Object: blue}
			if err := expected.add(gr, u.GetNamespace(), u.GetName(), blue, nil); err != nil {
				cb.Close()
				return nil, err
			}
			id := objectID(blue, u.GetNamespace())
			if !had {
				cb.Created = append(cb.Created, id)
			} else if diffs := differences(restoredForm, green, cfg.Sensitivity(gr)); len(diffs) > 0 {
				cb.Changed = append(cb.Changed, id)
				cb.Differences[id] = diffs[0]
			}
		}
	}
	for key, e := range restored {
		if rules.For(e.GroupResource).History && len(admittedTemplates) > 0 {
			// Blue's history of a workload whose template green's admission changed is blue's
			// controller's, whatever green's kept of it (its revisionHistoryLimit).
			obj, err := original.Object(e)
			if err != nil {
				cb.Close()
				return nil, err
			}
			if admittedTemplates[controllerKey(obj, m.Namespace(e.Namespace))] {
				delete(restored, key)
				continue
			}
		}
		e.Object = nil // its keys name it
		cb.Deleted = append(cb.Deleted, e)
	}
	sort.Slice(cb.Deleted, func(i, j int) bool { return cb.Deleted[i].ID() < cb.Deleted[j].ID() })
	sort.Strings(cb.Created)
	sort.Strings(cb.Changed)
	return cb, nil
}

// templateKey names a workload: its API group, kind, namespace and name.
func templateKey(apiVersion, kind, namespace, name string) string {
	gv, _ := schema.ParseGroupVersion(apiVersion)
	return gv.Group + "/" + kind + "/" + namespace + "/" + name
}

// controllerKey is the templateKey of obj's controller, in namespace ("" when it has none).
func controllerKey(obj map[string]any, namespace string) string {
	ref := metav1.GetControllerOfNoCopy(&unstructured.Unstructured{Object: obj})
	if ref == nil {
		return ""
	}
	return templateKey(ref.APIVersion, ref.Kind, namespace, ref.Name)
}

// b2i is 1 for true.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// resourceOf is the resource type of an archive's entry of group-resource gr.
func resourceOf(gr string, e Entry) plans.Resource {
	parsed := schema.ParseGroupResource(gr)
	gv, _ := schema.ParseGroupVersion(e.APIVersion)
	return plans.Resource{Group: parsed.Group, Version: gv.Version, Resource: parsed.Resource, Kind: e.Kind, Namespaced: e.Namespace != ""}
}

// DeletedIDs names the objects deleted on green.
func (cb *CarryBack) DeletedIDs() []string {
	out := make([]string, len(cb.Deleted))
	for i, e := range cb.Deleted {
		out[i] = e.ID()
	}
	return out
}

// CheckDeletions refuses the deletions green's plan cannot vouch for. An object is taken as
// deleted on green only when green's plan listed its type and discovered its API group without
// a warning: a group whose discovery failed on green (a dead aggregated API, say) lists none of
// its objects, which says nothing of whether green holds them, and deleting blue's copies would
// lose them on both clusters. The error names each such group and what of blue's it would delete.
func (cb *CarryBack) CheckDeletions(green *plans.Plan) error {
	unsure := cb.unsureGroups(green)
	if len(unsure) == 0 {
		return nil
	}
	var parts []string
	for _, group := range slices.Sorted(maps.Keys(unsure)) {
		parts = append(parts, unsure[group])
	}
	return fmt.Errorf("green's plan does not vouch for the deletion of blue's objects of %d API groups, so none is deleted: %s", len(unsure), strings.Join(parts, "; "))
}

// unsureGroups describes, by API group, the objects deleted on green whose deletion green's plan
// does not vouch for.
func (cb *CarryBack) unsureGroups(green *plans.Plan) map[string]string {
	listed, undiscovered := map[string]bool{}, map[string]string{}
	if green != nil {
		for _, r := range green.Resources {
			listed[r.GroupResource()] = true
		}
		undiscovered = green.Undiscovered()
	}
	type group struct {
		n       int
		example string
		why     string
	}
	byGroup := map[string]*group{}
	for _, e := range cb.Deleted {
		name := schema.ParseGroupResource(e.GroupResource).Group
		why, failed := undiscovered[name]
		switch {
		case green == nil:
			why = "green's plan is unknown"
		case failed:
		case !listed[e.GroupResource]:
			why = e.GroupResource + " is not a type green's plan lists"
		default:
			continue
		}
		g := byGroup[name]
		if g == nil {
			g = &group{example: e.ID(), why: why}
			byGroup[name] = g
		}
		g.n++
	}
	out := map[string]string{}
	for name, g := range byGroup {
		label := name
		if label == "" {
			label = "core"
		}
		out[name] = fmt.Sprintf("API group %s (%s): %d objects, e.g. %s", label, g.why, g.n, g.example)
	}
	return out
}

// SureDeletions leaves in Deleted only the objects whose deletion green's plan vouches for (see
// CheckDeletions), and returns what it took out, by API group.
func (cb *CarryBack) SureDeletions(green *plans.Plan) []string {
	unsure := cb.unsureGroups(green)
	if len(unsure) == 0 {
		return nil
	}
	cb.Deleted = slices.DeleteFunc(cb.Deleted, func(e Entry) bool {
		_, out := unsure[schema.ParseGroupResource(e.GroupResource).Group]
		return out
	})
	return slices.Sorted(maps.Values(unsure))
}

// differences lists how green's object differs from what the restore put there, in either
// direction, in words of the two (Compare's are of a backup and a target).
func differences(restored, green map[string]any, sensitive config.Sensitivity) []string {
	if d := Compare(restored, green, sensitive); len(d) > 0 {
		return reword(d, strings.NewReplacer("missing on the target (backup: ", "removed on green (was ", "backup ", "restored ", "target ", "green "))
	}
	return reword(Compare(green, restored, sensitive), strings.NewReplacer("missing on the target (backup: ", "added on green (", "backup ", "green ", "target ", "restored "))
}

func reword(diffs []string, r *strings.Replacer) []string {
	for i, d := range diffs {
		diffs[i] = r.Replace(d)
	}
	return diffs
}

// sameStorageClass gives a claim or volume, or each claim template of a StatefulSet, of resource
// gr the storage class of ref's, or none when ref's has none.
func sameStorageClass(gr string, obj, ref map[string]any) {
	specs := rules.For(gr).StorageClasses
	if specs == nil {
		return
	}
	objs, refs := specs(obj), specs(ref)
	for i := range min(len(objs), len(refs)) {
		copyStorageClass(objs[i], refs[i])
	}
}

func copyStorageClass(spec, ref map[string]any) {
	if spec == nil {
		return
	}
	if class, ok := ref["storageClassName"]; ok {
		spec["storageClassName"] = class
	} else {
		delete(spec, "storageClassName")
	}
}

// Carried restores a carry-back onto blue (implements snapshot.Restorer in place of Objects):
// green's objects replace blue's copies (ExistingReplace), then the objects deleted on green are
// deleted on blue; verify checks both.
type Carried struct {
	Objects
	CarryBack *CarryBack
}

// Restore implements snapshot.Restorer.
func (c Carried) Restore(ctx context.Context, r *snapshot.Reader, report *snapshot.Report) error {
	return c.RestoreFilling(ctx, r, report, nil)
}

// RestoreFilling implements snapshot.FillingRestorer (it must: Objects' would restore without the
// deletions). It gives fill's signals and holds nothing back: blue's writers are stopped while
// green's state is carried back onto it.
func (c Carried) RestoreFilling(ctx context.Context, r *snapshot.Reader, report *snapshot.Report, fill *snapshot.Fill) error {
	// The backup's plan is green's: nothing is applied when a deletion cannot be trusted.
	if err := c.CarryBack.CheckDeletions(r.Manifest.Plan); err != nil {
		return err
	}
	c.Existing, c.Exact = ExistingReplace, true
	c.Mapping = snapshot.Mapping{} // Expected is in blue's names already
	if err := c.restoreArchive(ctx, r.Manifest.Plan, c.CarryBack.Expected, report, fill, nil); err != nil {
		return err
	}
	if err := c.deleteAll(ctx, r.Manifest.Plan, report); err != nil {
		return err
	}
	c.settleHistory(ctx)
	return nil
}

// settleHistory gives each rollout-history object blue should hold green's revision number again,
// until blue's controllers leave the numbers so or WaitTimeout passes. The carry-back updates
// workloads whose controllers on blue then number the new current template above every other
// revision, in between ferry's updates; green's numbers, made by the same rule, are stable once
// set. A history object that differs in more than its number is left to verify to name.
func (c Carried) settleHistory(ctx context.Context) {
	c.Objects = c.withDefaults()
	var history []Entry
	for _, gr := range slices.Sorted(slices.Values(rules.Types())) {
		if !rules.For(gr).History {
			continue
		}
		for _, e := range c.CarryBack.Expected.ByResource[gr] {
			// Only rollout history: a few objects per workload, read once.
			obj, err := c.CarryBack.Expected.Object(e)
			if err != nil {
				c.Log.Info("renumbering a revision", "object", e.ID(), "err", err)
				continue
			}
			e.Object = obj
			history = append(history, e)
		}
	}
	if len(history) == 0 {
		return
	}
	_ = wait.PollUntilContextTimeout(ctx, time.Second, c.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		settled := true
		for _, e := range history {
			client := c.clientFor(e)
			live, err := client.Get(ctx, e.Name, metav1.GetOptions{})
			if err != nil {
				continue // verify names a history object that is not there
			}
			if patch := renumber(e.GroupResource, e.Object, normalizedLive(e.GroupResource, live)); patch != nil {
				settled = false
				if _, err := client.Patch(ctx, e.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
					c.Log.Info("renumbering a revision", "object", e.ID(), "err", err)
				}
			}
		}
		return settled, nil
	})
}

// Verify implements snapshot.Restorer.
func (c Carried) Verify(ctx context.Context, r *snapshot.Reader, report *snapshot.Report) error {
	c.Mapping, c.Exact = snapshot.Mapping{}, true
	// Health is checked of what green made or changed: the rest is as blue had it, still
	// quiesced, and blue's health was never the run's to judge.
	carried := map[string]bool{}
	for _, id := range append(slices.Clone(c.CarryBack.Created), c.CarryBack.Changed...) {
		carried[id] = true
	}
	if err := c.verifyArchive(ctx, r.Manifest.Plan, c.CarryBack.Expected, func(id string) bool { return carried[id] }, report); err != nil {
		return err
	}
	c = Carried{Objects: c.withDefaults(), CarryBack: c.CarryBack}
	for _, e := range c.CarryBack.Deleted {
		live, err := c.clientFor(e).Get(ctx, e.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err), err == nil && live.GetDeletionTimestamp() != nil:
			report.Count("objects", snapshot.StatusDeleted)
		case err != nil:
			report.Add("objects", snapshot.StatusFailed, e.ID(), "deleted on green; could not be checked on the target: "+err.Error())
		default:
			report.Add("objects", snapshot.StatusDifferent, e.ID(), "deleted on green, still on the target")
		}
	}
	return nil
}

// deleteAll deletes the objects deleted on green, dependents first (the plan's order reversed).
func (c Carried) deleteAll(ctx context.Context, plan *plans.Plan, report *snapshot.Report) error {
	c.Objects = c.withDefaults()
	rank := map[string]int{}
	if plan != nil {
		for i, res := range plan.Resources {
			rank[res.GroupResource()] = i
		}
	}
	byRank := map[int][]Entry{}
	for _, e := range c.CarryBack.Deleted {
		r, ok := rank[e.GroupResource]
		if !ok {
			r = len(rank) // a type the plan does not know: first
		}
		byRank[r] = append(byRank[r], e)
	}
	ranks := make([]int, 0, len(byRank))
	for r := range byRank {
		ranks = append(ranks, r)
	}
	slices.Sort(ranks)
	slices.Reverse(ranks)
	for _, r := range ranks {
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(c.Concurrency)
		for _, e := range byRank[r] {
			g.Go(func() error {
				err := c.admitted(gctx, func() error {
					return retry.OnError(retry.DefaultBackoff, transient, func() error {
						return c.clientFor(e).Delete(gctx, e.Name, metav1.DeleteOptions{})
					})
				})
				switch {
				case err == nil || apierrors.IsNotFound(err):
					report.Add("objects", snapshot.StatusDeleted, e.ID(), "deleted on green")
				default:
					status, why := c.refusal(err)
					report.Add("objects", status, e.ID(), "deleted on green; deleting it on the target failed: "+why+err.Error())
				}
				return gctx.Err()
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
	}
	return nil
}

func (c Carried) clientFor(e Entry) dynamic.ResourceInterface {
	apiVersion := e.APIVersion
	if e.Object != nil {
		apiVersion = (&unstructured.Unstructured{Object: e.Object}).GetAPIVersion()
	}
	gv, _ := schema.ParseGroupVersion(apiVersion)
	gvr := gv.WithResource(schema.ParseGroupResource(e.GroupResource).Resource)
	return c.client(gvr, e.Namespace)
}

// Live lists the plan's objects on the cluster into an archive, as a backup would hold them,
// without storing anything but a local spool: to tell what changed on a cluster since a backup.
// Close removes the spool.
func (c Objects) Live(ctx context.Context) (*Archive, error) {
	c = c.listDefaults()
	filter, err := plans.NewFilter(c.Plan.Config)
	if err != nil {
		return nil, err
	}
	a, err := newSpooledArchive()
	if err != nil {
		return nil, err
	}
	items := make(chan item, 256)
	listed := c.listAll(ctx, filter, items)
	var addErr error
	for it := range items {
		if addErr != nil {
			continue // drain, so that the listing ends
		}
		var obj map[string]any
		if err := json.Unmarshal(it.data, &obj); err != nil {
			addErr = fmt.Errorf("%s/%s: %w", it.obj.Namespace, it.obj.Name, err)
			continue
		}
		gr := schema.GroupResource{Group: it.obj.Group, Resource: it.obj.Resource}.String()
		addErr = a.add(gr, it.obj.Namespace, it.obj.Name, obj, it.data)
	}
	if err := <-listed; err != nil {
		a.Close()
		return nil, err
	}
	if addErr != nil {
		a.Close()
		return nil, addErr
	}
	return a, nil
}

// Only is the carry-back narrowed to the objects ids names (as Entry.ID does, in blue's names):
// those a restore left awaiting their admission webhook's server, made once blue's writers
// start. It shares Expected's spool: Close the carry-back it came from, not it.
func (cb *CarryBack) Only(ids []string) *CarryBack {
	keep := map[string]bool{}
	for _, id := range ids {
		keep[id] = true
	}
	cb.Expected.index()
	expected := *cb.Expected
	expected.ByResource, expected.Count = map[string][]Entry{}, 0
	for gr, entries := range cb.Expected.ByResource {
		for _, e := range entries {
			if keep[e.ID()] {
				expected.ByResource[gr] = append(expected.ByResource[gr], e)
				expected.Count++
			}
		}
	}
	out := &CarryBack{Expected: &expected, Differences: cb.Differences}
	for _, e := range cb.Deleted {
		if keep[e.ID()] {
			out.Deleted = append(out.Deleted, e)
		}
	}
	in := func(id string) bool { return keep[id] }
	out.Created = slices.DeleteFunc(slices.Clone(cb.Created), func(id string) bool { return !in(id) })
	out.Changed = slices.DeleteFunc(slices.Clone(cb.Changed), func(id string) bool { return !in(id) })
	return out
}

// Unmade takes out of the deletions the objects green never held because its restore left them
// awaiting its writers and they were not made (unmade, as green's reports name them; m is the
// forward restore's mapping): they are not deleted on green, and blue keeps them. It returns the
// IDs it took out.
func (cb *CarryBack) Unmade(unmade []string, m snapshot.Mapping) []string {
	var kept []string
	cb.Deleted = slices.DeleteFunc(cb.Deleted, func(e Entry) bool {
		if slices.Contains(unmade, TargetID(m, e.GroupResource, e)) {
			kept = append(kept, e.ID())
			return true
		}
		return false
	})
	return kept
}
