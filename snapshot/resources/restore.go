package resources

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/ferrykube/ferry/internal/human"
	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/plans/rules"
	"github.com/ferrykube/ferry/snapshot"
	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
)

// Existing-object policies of a restore.
const (
	ExistingSkip   = "skip"   // leave an existing object as it is (reported when it differs)
	ExistingUpdate = "update" // server-side apply the backed-up object, field manager "ferry"
	ExistingFail   = "fail"   // an existing object that differs is a failure
	// ExistingReplace makes an existing object that differs equal to the backup's: a JSON merge
	// patch from its normalized form to the backup's, so fields the backup lacks are removed too
	// (a carry-back, where blue must hold exactly what green holds).
	ExistingReplace = "replace"
)

// FieldManager is the field manager of ferry's server-side applies.
const FieldManager = "ferry"

// Restore implements snapshot.Kind: it reads and checks the whole archive first (a truncated or
// tampered archive fails before anything is applied; the objects checked wait in a local spool),
// then creates the objects type by type in the plan's
// order — CRDs first and waited on until Established, namespaces, storage, identity and
// configuration, the rest, admission webhooks last; owners before their dependents, whose owner
// references are linked to the owners' new UIDs. Objects are applied concurrently, and the types
// of a wave that do not own one another at once.
func (c Objects) Restore(ctx context.Context, r *snapshot.Reader, report *snapshot.Report) error {
	return c.RestoreFilling(ctx, r, report, nil)
}

// RestoreFilling implements snapshot.FillingRestorer: Restore, giving fill's signals. Once the
// storage wave is made the claims exist; the objects whose pods would mount a claim the backup
// holds files of (workloads, their rollout history, bare pods), and their owners and the claims'
// (an operator's resource), are set aside, and made once the volumes are filled, before the
// admission webhooks: no pod starts on an empty volume.
func (c Objects) RestoreFilling(ctx context.Context, r *snapshot.Reader, report *snapshot.Report, fill *snapshot.Fill) error {
	c.velero = r.Velero
	archive, err := c.readArchive(ctx, r)
	if err != nil {
		return err
	}
	defer archive.Close()
	var filled map[string]snapshot.Volume
	if fill != nil {
		filled = filledClaims(r.Manifest)
	}
	return c.restoreArchive(ctx, r.Manifest.Plan, archive, report, fill, filled)
}

// readArchive reads the backup's archive (ReadArchive), saying which objects' digests drifted.
func (c Objects) readArchive(ctx context.Context, r *snapshot.Reader) (*Archive, error) {
	archive, err := ReadArchive(ctx, r)
	if err == nil && len(archive.Drifted) > 0 && c.Log != nil {
		c.Log.Warn("objects whose digests differ under this ferry's rules", "backup", r.Name(), "count", len(archive.Drifted), "first", first(archive.Drifted, 3), "why", DriftNote)
	}
	return archive, err
}

// restoreArchive restores the archive's objects in the plan's order (or, without a plan, the
// order their owner references imply). The types of one step (see steps) are restored at once,
// their objects Concurrency at a time in all. The objects that mount one of the claims filled
// (source namespace/name: the volume filling it), and their owners (waitingOwners), wait for fill
// (see RestoreFilling); the claims are made large enough for their files (rules.FitClaim).
func (c Objects) restoreArchive(ctx context.Context, plan *plans.Plan, archive *Archive, report *snapshot.Report, fill *snapshot.Fill, filled map[string]snapshot.Volume) error {
	c, err := c.withDefaults().forUpgrade(plan)
	if err != nil {
		return err
	}
	archive.index()
	order, err := restoreOrder(plan, archive)
	if err != nil {
		return err
	}
	claims := map[string]bool{}
	for claim := range filled {
		claims[claim] = true
	}
	rs := &restorer{Objects: c, report: report, archive: archive, uids: map[string]string{}, absent: map[string]bool{}, namespaces: map[string]bool{}, quotas: map[string]bool{}, awaiting: map[string]bool{},
		claims: claimsOf(archive), archived: archive.owners(), owners: ownerKindsOf(archive), filled: claims, volumes: filled,
		statusPlaces: map[schema.GroupVersionResource]statusPlace{}, defaults: map[schema.GroupVersionResource]string{}}
	if rs.waiting, err = waitingOwners(archive, claims); err != nil {
		return err
	}
	if err := rs.raiseQuotas(ctx); err != nil {
		return err
	}
	// held are the objects set aside for the volumes, step by step.
	var held [][]heldEntry
	release := func() error {
		fill.ObjectsReady(nil)
		if len(held) == 0 {
			return nil
		}
		c.Log.Info("waiting for the volumes to be filled before making what mounts them", "steps", len(held))
		if err := fill.WaitFilled(ctx); err != nil {
			return err
		}
		for _, step := range held {
			if err := rs.restoreHeld(ctx, step); err != nil {
				return err
			}
			rs.linkDeferred(ctx, false)
		}
		held = nil
		return nil
	}
	released := false
	for _, step := range steps(order) {
		if step[0].Wave > rules.WaveStorage {
			fill.ClaimsExist()
		}
		if step[0].Wave >= rules.WaveQuotas && !released {
			if err := release(); err != nil {
				return err
			}
			released = true
		}
		var todo []plans.Resource
		for _, res := range step {
			entries := archive.ByResource[res.GroupResource()]
			if len(entries) == 0 {
				continue
			}
			if why := c.unserved(res); why != "" {
				for _, e := range entries {
					if c.Only == nil || c.selected(res, e) {
						report.Add("objects", snapshot.StatusLeft, e.ID(), why)
					}
				}
				continue
			}
			c.Log.Info("restoring", "resource", res.GroupResource(), "objects", len(entries))
			todo = append(todo, res)
		}
		if len(todo) == 0 {
			continue
		}
		setAside, err := rs.restoreTypes(ctx, todo)
		if err != nil {
			return err
		}
		if len(setAside) > 0 {
			held = append(held, setAside)
		}
		rs.linkDeferred(ctx, false)
	}
	if !released {
		if err := release(); err != nil {
			return err
		}
	}
	rs.linkDeferred(ctx, true)
	return nil
}

// heldEntry is an object set aside until the volumes are filled.
type heldEntry struct {
	res   plans.Resource
	entry Entry
}

// steps cuts the restore order into steps whose types can be restored at once: consecutive types
// of one wave, none of them owning another of the step (an owner goes first so that its
// dependents link to its UID; rollout history goes before its owner) nor named as made first by
// another's rule (rules.Rule.After), and CRDs on their own
// (their custom resources wait until they are Established).
func steps(order []plans.Resource) [][]plans.Resource {
	var out [][]plans.Resource
	var cur []plans.Resource
	in := map[string]bool{}
	for _, res := range order {
		gr := res.GroupResource()
		related := false
		for _, before := range slices.Concat(res.OwnedBy, rules.For(gr).After) {
			related = related || in[before]
		}
		for _, prev := range cur {
			related = related || slices.Contains(prev.OwnedBy, gr)
		}
		if len(cur) > 0 && (related || res.Wave != cur[0].Wave || gr == crdResource || cur[0].GroupResource() == crdResource) {
			out = append(out, cur)
			cur, in = nil, map[string]bool{}
		}
		cur = append(cur, res)
		in[gr] = true
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

func (c Objects) withDefaults() Objects {
	if c.Concurrency <= 0 {
		c.Concurrency = 32
	}
	if c.PageSize <= 0 {
		c.PageSize = 500
	}
	if c.Existing == "" {
		c.Existing = ExistingSkip
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.WaitTimeout <= 0 {
		c.WaitTimeout = 2 * time.Minute
	}
	return c
}

// restoreOrder is the order of the plan's resource types, or for a backup Velero wrote, the
// archive's types ordered by the same rules from the owner references its objects carry. A plan's
// types are ordered again from their owners, so that a backup planned before the rules changed
// (rollout history after its owners) is restored by today's.
func restoreOrder(plan *plans.Plan, a *Archive) ([]plans.Resource, error) {
	if plan != nil {
		edges := map[string]map[string]bool{}
		for _, r := range plan.Resources {
			for _, owner := range r.OwnedBy {
				if edges[r.GroupResource()] == nil {
					edges[r.GroupResource()] = map[string]bool{}
				}
				edges[r.GroupResource()][owner] = true
			}
		}
		ordered, _ := plans.Order(plan.Resources, edges)
		return ordered, nil
	}
	kinds := map[string]string{} // group/kind -> group-resource
	var types []plans.Resource
	a.index()
	for gr, entries := range a.ByResource {
		e := entries[0]
		gv, err := schema.ParseGroupVersion(e.APIVersion)
		if err != nil {
			return nil, fmt.Errorf("%s: apiVersion %q: %w", e.ID(), e.APIVersion, err)
		}
		r := resourceOf(gr, e)
		r.Count = len(entries)
		types = append(types, r)
		kinds[gv.Group+"/"+e.Kind] = gr
	}
	edges := map[string]map[string]bool{}
	for gr, owners := range a.ownerKinds {
		for groupKind := range owners {
			if owner, ok := kinds[groupKind]; ok && owner != gr {
				if edges[gr] == nil {
					edges[gr] = map[string]bool{}
				}
				edges[gr][owner] = true
			}
		}
	}
	ordered, _ := plans.Order(types, edges)
	return ordered, nil
}

type restorer struct {
	Objects
	report  *snapshot.Report
	archive *Archive
	owners  map[string]bool // group/Kind of every owner the archive's objects reference

	mu         sync.Mutex
	uids       map[string]string          // group/Kind/namespace/name on the target -> UID
	absent     map[string]bool            // owners looked up on the target and not found there (yet)
	deferred   []deferredLink             // objects created before owners the backup holds
	awaiting   map[string]bool            // ownerKeys of the objects that await the target's writers
	namespaces map[string]bool            // target namespaces known to exist
	quotas     map[string]bool            // target namespaces with a ResourceQuota, by quotaCharges
	claims     map[string]bool            // source ns/name of the backup's claims
	filled     map[string]bool            // source ns/name of the claims the volumes' restore fills
	volumes    map[string]snapshot.Volume // the backup's volume of each of them
	waiting    map[string]bool            // ownerKey of the owners that wait for them (waitingOwners)
	archived   map[string]bool            // ownerKey of every object of the backup, in the source's namespaces
	// statusPlaces are where the target keeps each type's status (see statusPlace).
	statusPlaces map[schema.GroupVersionResource]statusPlace
	// defaults are the names of the target's default objects of each type that marks one ("" for
	// none; see markDefault).
	defaults   map[schema.GroupVersionResource]string
	defaultsMu sync.Mutex
}

func ownerKey(group, kind, namespace, name string) string {
	return group + "/" + kind + "/" + namespace + "/" + name
}

// restoreTypes restores the objects of the types at once, Concurrency at a time in all, each read
// from the archive as its turn comes. It returns the objects it set aside because they mount a
// claim the volumes' restore fills, or own what does (waitingOwners).
func (rs *restorer) restoreTypes(ctx context.Context, types []plans.Resource) ([]heldEntry, error) {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(rs.Concurrency)
	var mu sync.Mutex
	created := map[string][]string{}
	var held []heldEntry
	var feeders sync.WaitGroup
	for _, res := range types {
		gvr := schema.GroupVersionResource{Group: res.Group, Version: res.Version, Resource: res.Resource}
		feeders.Go(func() {
			for _, e := range rs.archive.ByResource[res.GroupResource()] {
				if gctx.Err() != nil {
					return
				}
				g.Go(func() error {
					obj, err := rs.archive.Object(e)
					if err != nil {
						rs.report.Add("objects", snapshot.StatusFailed, e.ID(), err.Error())
						return gctx.Err()
					}
					if mountsFilledClaim(obj, e.Namespace, rs.filled) || rs.waiting[e.ownerKey()] {
						mu.Lock()
						held = append(held, heldEntry{res: res, entry: e})
						mu.Unlock()
						return nil
					}
					e.Object = obj
					name, ok := rs.restoreOne(gctx, res, gvr, e)
					if ok && name != "" && res.GroupResource() == crdResource {
						mu.Lock()
						created[res.GroupResource()] = append(created[res.GroupResource()], name)
						mu.Unlock()
					}
					return gctx.Err()
				})
			}
		})
	}
	feeders.Wait()
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for _, res := range types {
		if res.GroupResource() == crdResource {
			gvr := schema.GroupVersionResource{Group: res.Group, Version: res.Version, Resource: res.Resource}
			rs.waitEstablished(ctx, gvr, created[crdResource])
			if rs.Mapper != nil {
				meta.MaybeResetRESTMapper(rs.Mapper)
			}
		}
	}
	return held, nil
}

// restoreHeld restores objects restoreTypes set aside, Concurrency at a time.
func (rs *restorer) restoreHeld(ctx context.Context, held []heldEntry) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(rs.Concurrency)
	for _, h := range held {
		g.Go(func() error {
			obj, err := rs.archive.Object(h.entry)
			if err != nil {
				rs.report.Add("objects", snapshot.StatusFailed, h.entry.ID(), err.Error())
				return gctx.Err()
			}
			e := h.entry
			e.Object = obj
			rs.restoreOne(gctx, h.res, schema.GroupVersionResource{Group: h.res.Group, Version: h.res.Version, Resource: h.res.Resource}, e)
			return gctx.Err()
		})
	}
	return g.Wait()
}

// restoreOne restores one object and reports it; it returns the target name of an object that now
// exists on the target.
func (rs *restorer) restoreOne(ctx context.Context, res plans.Resource, gvr schema.GroupVersionResource, e Entry) (restored string, ok bool) {
	gr := res.GroupResource()
	id := e.ID()
	if !rs.selected(res, e) {
		return "", false // not part of this restore
	}
	if rs.clusterOwn(e) {
		rs.report.Count("objects", snapshot.StatusLeft)
		return "", false
	}
	if why, behind := rs.leftOut(gr, e); why != "" {
		if behind {
			rs.report.Add("objects", snapshot.StatusLeft, id, why)
		} else {
			rs.report.Count("objects", snapshot.StatusLeft)
		}
		return "", false
	}
	if reason := rules.For(gr).SkipReason(e.Object, rs.claims); reason != "" {
		rs.report.Add("objects", snapshot.StatusSkipped, id, reason)
		return "", false
	}
	if recreated(gr, e.Object, rs.claims, rs.archived, rs.archive) {
		rs.report.Count("objects", snapshot.StatusRecreated)
		return "", false
	}
	if rs.SkipOwned && controlled(e.Object) {
		rs.report.Add("objects", snapshot.StatusSkipped, id, "owned by a controller, which recreates it on the target (--skip-owned)")
		return "", false
	}
	expected := rs.prepare(gr, e.Object) // what verify will compare: owner references without UIDs
	obj := &unstructured.Unstructured{Object: runtime.DeepCopyJSON(expected)}
	id = objectID(obj.Object, obj.GetNamespace())
	if obj.GetNamespace() != "" {
		if err := rs.ensureNamespace(ctx, obj.GetNamespace()); err != nil {
			rs.report.Add("objects", snapshot.StatusFailed, id, err.Error())
			return "", false
		}
	}
	refs := obj.GetOwnerReferences()
	if owner := rs.awaitedOwner(refs, obj.GetNamespace()); owner != "" {
		rs.await(obj)
		rs.report.Add("objects", snapshot.StatusAwaiting, id, "awaits the target's writers with its owner "+owner+", which awaits them")
		return "", false
	}
	dropped, later := rs.linkOwners(ctx, obj, e.Namespace)
	if len(dropped) > 0 {
		defer rs.report.Add("objects", snapshot.StatusSkipped, id+" (owner reference)",
			"owner "+strings.Join(dropped, ", ")+" is not on the target: restored without that owner reference")
	}
	client := rs.client(gvr, obj.GetNamespace())
	if later {
		// Linked once its owners are restored (linkDeferred).
		defer func() {
			if !ok {
				return
			}
			rs.mu.Lock()
			rs.deferred = append(rs.deferred, deferredLink{gvr: gvr, namespace: obj.GetNamespace(), name: restored, id: id, refs: refs})
			rs.mu.Unlock()
		}()
	}
	if rs.greensOwn(gr, e) && rs.exists(ctx, client, obj.GetName()) {
		rs.report.Count("objects", snapshot.StatusLeft) // green's release's own: never changed
		return "", false
	}
	if account := serviceAccountOf(gr, obj); account != "" {
		if err := rs.waitServiceAccount(ctx, obj.GetNamespace(), account); err != nil {
			rs.report.Add("objects", snapshot.StatusFailed, id, err.Error())
			return "", false
		}
	}
	rs.markDefault(ctx, gvr, rules.For(gr).Default, obj.Object, e.Object)
	status, place := rs.statusFor(ctx, gvr, e.Object)
	var live *unstructured.Unstructured
	var note string // what the report says of a claim made larger than the backup's
	var err error
	if rs.quotaCharges(ctx, obj.GetNamespace()) && rs.exists(ctx, client, obj.GetName()) {
		err = apierrors.NewAlreadyExists(gvr.GroupResource(), obj.GetName()) // as a create would say, but for its charge
	} else {
		var made *unstructured.Unstructured
		made, note = rs.fitClaim(gr, e, obj)
		live, err = rs.create(ctx, client, id, made, status, place)
		if made != obj && apierrors.IsForbidden(err) {
			// A quota or a LimitRange of the target refused the larger request: the claim is
			// made as the backup's, which fits on storage that does not enforce sizes.
			note = fmt.Sprintf("the target refused a larger storage request than the backup's (%v): made with the backup's; if its storage enforces sizes, the files that do not fit fail the volume's restore", err)
			live, err = rs.create(ctx, client, id, obj, status, place)
		}
	}
	switch {
	case err == nil:
		rs.remember(gvr.Group, obj.GetKind(), live)
		if note != "" {
			rs.report.Add("objects", snapshot.StatusRestored, id, note)
		} else {
			rs.report.Count("objects", snapshot.StatusRestored)
		}
		if place == statusSubresource {
			rs.giveStatus(ctx, client, id, live, status)
		}
		rs.keepManagers(ctx, client, id, live, e.Object)
		return live.GetName(), true
	case apierrors.IsAlreadyExists(err), rs.exists(ctx, client, obj.GetName()):
		// The API server checks some fields before the name: a Service that holds its chosen node
		// port is refused as "port already allocated", not as already existing.
		restored, ok = rs.existing(ctx, gr, id, e, client, obj, expected)
		switch {
		case !ok:
		case rs.Existing == ExistingReplace:
			rs.replaceStatus(ctx, client, id, restored, e.Object, place)
		case place == statusSubresource:
			// A restore cut short between the create and the status left it without one.
			if live, err := client.Get(ctx, restored, metav1.GetOptions{}); err == nil && madeByFerry(live) {
				rs.giveStatus(ctx, client, id, live, status)
			}
		}
		return restored, ok
	default:
		rs.refused(obj, "", err)
		return "", false
	}
}

// fitClaim is the claim a restore makes of obj (of gr persistentvolumeclaims; other objects are
// returned as they are): large enough for the files the volumes' restore fills it with
// (rules.FitClaim), and the note the report gives a claim made larger than the backup's.
func (rs *restorer) fitClaim(gr string, e Entry, obj *unstructured.Unstructured) (*unstructured.Unstructured, string) {
	bytes, names, ok := rs.claimFiles(gr, e)
	if !ok {
		return obj, ""
	}
	made := obj.DeepCopy()
	from, to := rules.FitClaim(made.Object, bytes, names)
	if to == "" {
		return obj, ""
	}
	return made, fittedNote(from, to, bytes, names)
}

// growClaim grows claim live, already on the target, as fitClaim sizes a new one (a warm
// migration's later round fills it with more than its first did), and returns it as it is then,
// with the status and note the report gives it ("" when it holds the files as it is). A target
// that refuses (its class does not let claims grow) leaves it as it is, with a note that says
// so: on storage that enforces sizes, the files that do not fit then fail the volume's restore.
func (rs *restorer) growClaim(ctx context.Context, gr string, e Entry, client dynamic.ResourceInterface, live *unstructured.Unstructured) (now *unstructured.Unstructured, status, note string) {
	bytes, names, ok := rs.claimFiles(gr, e)
	if !ok {
		return live, "", ""
	}
	patch, from, to := rules.GrowClaim(live.Object, bytes, names)
	if patch == nil {
		return live, "", ""
	}
	data, err := json.Marshal(patch)
	if err == nil {
		var grown *unstructured.Unstructured
		if grown, err = client.Patch(ctx, live.GetName(), types.MergePatchType, data, metav1.PatchOptions{FieldManager: FieldManager}); err == nil {
			return grown, snapshot.StatusUpdated, fittedNote(from, to, bytes, names)
		}
	}
	return live, snapshot.StatusUnchanged, fmt.Sprintf("the target refused to grow its storage request from %s to %s for its files (%s in %d names): %v; if its storage enforces sizes, the files that do not fit fail the volume's restore",
		from, to, human.Bytes(bytes), names, err)
}

// claimFiles are the bytes and names of the files the volumes' restore puts into claim e (of gr
// persistentvolumeclaims), if it fills it.
func (rs *restorer) claimFiles(gr string, e Entry) (bytes, names int64, ok bool) {
	v, ok := rs.volumes[e.Namespace+"/"+e.Name]
	if gr != "persistentvolumeclaims" || !ok {
		return 0, 0, false
	}
	names = int64(len(v.Files))
	if v.List != nil {
		names = v.List.Entries
	}
	return v.Bytes, names, true
}

func fittedNote(from, to string, bytes, names int64) string {
	return fmt.Sprintf("its storage request raised from %s to %s: its files hold %s in %d names, which a volume of %s, as a provisioner that enforces sizes makes it, could not hold",
		from, to, human.Bytes(bytes), names, from)
}

// refused reports an object the target refused (refusal); what says what was refused, before
// the error. An object that awaits the writers is noted as an owner its dependents await too.
func (rs *restorer) refused(obj *unstructured.Unstructured, what string, err error) {
	status, why := rs.refusal(err)
	if status == snapshot.StatusAwaiting {
		rs.await(obj)
	}
	rs.report.Add("objects", status, objectID(obj.Object, obj.GetNamespace()), what+why+err.Error())
}

// await notes obj as awaiting the target's writers, by the key its dependents' owner references
// give it.
func (rs *restorer) await(obj *unstructured.Unstructured) {
	gv, _ := schema.ParseGroupVersion(obj.GetAPIVersion())
	rs.mu.Lock()
	rs.awaiting[ownerKey(gv.Group, obj.GetKind(), obj.GetNamespace(), obj.GetName())] = true
	rs.mu.Unlock()
}

// awaitedOwner names an owner among refs (of an object in namespace) that awaits the target's
// writers, or "": the object is made with it, its reference to it linked then.
func (rs *restorer) awaitedOwner(refs []metav1.OwnerReference, namespace string) string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, ref := range refs {
		gv, _ := schema.ParseGroupVersion(ref.APIVersion)
		if rs.awaiting[ownerKey(gv.Group, ref.Kind, namespace, ref.Name)] || rs.awaiting[ownerKey(gv.Group, ref.Kind, "", ref.Name)] {
			return ref.Kind + " " + ref.Name
		}
	}
	return ""
}

// refusal is how a report lists an object the target refused with err: awaiting, when an
// admission webhook's server does not run and the target's writers are stopped
// (AwaitAdmission), else failed; why goes before the error.
func (c Objects) refusal(err error) (status, why string) {
	if c.AwaitAdmission && kube.WebhookServerDown(err) {
		return snapshot.StatusAwaiting, "awaits the target's writers, one of which may serve the admission webhook that refused it: "
	}
	return snapshot.StatusFailed, ""
}

// admitted runs write, and again while an admission webhook's server cannot be called, for up to
// AdmissionWait.
func (c Objects) admitted(ctx context.Context, write func() error) error {
	return kube.RetryWhile(ctx, c.AdmissionWait, kube.WebhookUnreachable, write) // 0: once
}

// exists says whether an object of that name is on the target.
func (rs *restorer) exists(ctx context.Context, client dynamic.ResourceInterface, name string) bool {
	_, err := client.Get(ctx, name, metav1.GetOptions{})
	return err == nil
}

// existing applies the existing-object policy to an object that is already on the target; e is
// the backup's.
func (rs *restorer) existing(ctx context.Context, gr, id string, e Entry, client dynamic.ResourceInterface, obj *unstructured.Unstructured, expected map[string]any) (string, bool) {
	live, err := client.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if err != nil {
		rs.report.Add("objects", snapshot.StatusFailed, id, "exists on the target but cannot be read: "+err.Error())
		return "", false
	}
	var grownStatus, grown string
	if rs.Existing != ExistingFail {
		live, grownStatus, grown = rs.growClaim(ctx, gr, e, client, live)
	}
	rs.remember(schema.FromAPIVersionAndKind(obj.GetAPIVersion(), obj.GetKind()).Group, obj.GetKind(), live)
	diffs := rs.compare(gr, expected, live)
	if len(diffs) == 0 {
		if grown != "" {
			rs.report.Add("objects", grownStatus, id, grown)
		} else {
			rs.report.Count("objects", snapshot.StatusUnchanged)
		}
		return live.GetName(), true
	}
	if grown != "" {
		rs.report.Add("objects", grownStatus, id+" (storage request)", grown)
	}
	if gr == "persistentvolumeclaims" {
		// A claim never shrinks: what an update or replace writes keeps a larger request.
		obj = obj.DeepCopy()
		rules.KeepLargerRequest(obj.Object, live.Object)
		expected = runtime.DeepCopyJSON(expected)
		rules.KeepLargerRequest(expected, live.Object)
	}
	if merge := rules.For(gr).Merge; merge != nil {
		// The target made it by itself (a namespace's default ServiceAccount): the backup's
		// settings are added to it, whatever the existing-object policy.
		if patch := merge(expected, live.Object); patch != nil {
			data, err := json.Marshal(patch)
			if err == nil {
				err = retry.OnError(retry.DefaultBackoff, transient, func() error {
					_, err := client.Patch(ctx, obj.GetName(), types.MergePatchType, data, metav1.PatchOptions{FieldManager: FieldManager})
					return err
				})
			}
			if err != nil {
				rs.report.Add("objects", snapshot.StatusFailed, id, "made by the target; adding the backup's settings to it failed: "+err.Error())
				return "", false
			}
			rs.report.Count("objects", snapshot.StatusUpdated)
			return live.GetName(), true
		}
	}
	if patch := renumber(gr, expected, normalizedLive(gr, live)); patch != nil && rs.Existing != ExistingFail {
		// The workload's controller made this revision of the same template first, under its own
		// number: the backup's number is the history's.
		err := retry.OnError(retry.DefaultBackoff, transient, func() error {
			_, err := client.Patch(ctx, obj.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
			return err
		})
		if err != nil {
			rs.report.Add("objects", snapshot.StatusFailed, id, "exists on the target under another revision number ("+diffs[0]+"); renumbering it failed: "+err.Error())
			return "", false
		}
		rs.report.Count("objects", snapshot.StatusUpdated)
		return live.GetName(), true
	}
	switch rs.Existing {
	case ExistingUpdate, ExistingReplace:
		// update: a server-side apply of the backed-up object; replace: a merge patch that also
		// removes what the backup lacks.
		var written *unstructured.Unstructured
		write := func() error {
			var err error
			written, err = client.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
			if duplicateKeys(err) {
				// Server-side apply refuses a list that holds one key twice, which every other
				// write takes (a pod template naming one variable twice): the backed-up object
				// is merged in by a JSON merge patch instead, its lists replacing the target's.
				rs.Log.Info("server-side apply refuses a list of the object that holds one key twice: merged in by a JSON merge patch", "object", id)
				data, merr := json.Marshal(mergedOver(obj, live).Object)
				if merr != nil {
					return merr
				}
				written, err = client.Patch(ctx, obj.GetName(), types.MergePatchType, data, metav1.PatchOptions{FieldManager: FieldManager})
			}
			return err
		}
		verb := "updating"
		if rs.Existing == ExistingReplace {
			patch, err := replacePatch(normalizedLive(gr, live), expected, obj.GetOwnerReferences())
			write = func() error {
				if err != nil {
					return err
				}
				var perr error
				written, perr = client.Patch(ctx, obj.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
				return perr
			}
			verb = "replacing"
		}
		rule := rules.For(gr)
		if fixed := rule.Fixed; fixed != nil && rule.Remake != nil {
			if d := fixed(expected, live.Object); d != "" {
				return rs.remake(ctx, gr, id, e, client, live, obj, diffs[0], errors.New("the target never changes "+fixedField(d)+" in place"))
			}
		}
		err := rs.admitted(ctx, func() error { return retry.OnError(retry.DefaultBackoff, transient, write) })
		if apierrors.IsInvalid(err) && rule.Remake != nil {
			return rs.remake(ctx, gr, id, e, client, live, obj, diffs[0], err)
		}
		if err != nil {
			rs.refused(obj, "exists on the target and differs ("+diffs[0]+"); "+verb+" it failed: ", err)
			return "", false
		}
		rs.keepManagers(ctx, client, id, written, e.Object)
		rs.report.Count("objects", snapshot.StatusUpdated)
		return live.GetName(), true
	case ExistingFail:
		rs.report.Add("objects", snapshot.StatusFailed, id, fmt.Sprintf("exists on the target and differs (%s; %d differences)", diffs[0], len(diffs)))
		return "", false
	default:
		rs.report.Add("objects", snapshot.StatusSkipped, id, fmt.Sprintf("exists on the target and differs (%s; %d differences): left as it is (--existing update replaces it)", diffs[0], len(diffs)))
		return live.GetName(), true
	}
}

// remake puts obj in the place of live, whose change the target refuses, or never makes in place
// (refused): a ConfigMap marked immutable, as a release changes one, a StatefulSet's claim
// templates, a binding's role, a Deployment's selector, a Service made headless. It does so only when the type's rule allows it (rules.Rule.Remake),
// nothing holds live back from going (a finalizer), and a dry run of obj's create shows the
// target takes it. live is then deleted, on the condition that it is still that object, with its
// dependents or leaving them for the new one (rules.Rule.RemakeOrphans: those it must not adopt
// are deleted); once it is gone, obj is made, with the target's default mark if live had it, or,
// when the target refuses it after all, live is made again as it was.
// diff is the first difference; e is the backup's object.
func (rs *restorer) remake(ctx context.Context, gr, id string, e Entry, client dynamic.ResourceInterface, live, obj *unstructured.Unstructured, diff string, refused error) (string, bool) {
	fail := func(why string) (string, bool) {
		rs.report.Add("objects", snapshot.StatusFailed, id, "exists on the target and differs ("+diff+"), which it changes only by making it again ("+refused.Error()+"); "+why)
		return "", false
	}
	rule := rules.For(gr)
	if why := rule.Remake(live.Object, obj.Object); why != "" {
		return fail(why + ": left as it is")
	}
	if finalizers := live.GetFinalizers(); len(finalizers) > 0 {
		return fail("finalizers " + strings.Join(finalizers, ", ") + " would hold it back from going: left as it is")
	}
	// A create's dry run under the object's own name meets live only once the target's validation
	// and admission took obj: "already exists" says it takes it. (Under another name a Job's
	// template, whose labels name the Job, would not pass.)
	if _, err := client.Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fail("the target refuses the backup's (a dry run: " + err.Error() + "): left as it is")
	}
	uid := live.GetUID()
	propagation := metav1.DeletePropagationBackground
	var former []dependent
	if rule.RemakeOrphans {
		propagation = metav1.DeletePropagationOrphan
		var err error
		if former, err = rs.dependentsOf(ctx, gr, live); err != nil {
			return fail(err.Error() + ": left as it is")
		}
	}
	err := client.Delete(ctx, live.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &propagation})
	if err != nil && !apierrors.IsNotFound(err) {
		return fail("deleting it failed: " + err.Error())
	}
	// An orphaning delete waits for the garbage collector to take its dependents off it.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, rs.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		now, err := client.Get(ctx, live.GetName(), metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && now.GetUID() != uid), nil
	})
	if err != nil {
		return fail("it was deleted and had not gone after " + rs.WaitTimeout.String() + "; the backup's is not made")
	}
	if mark := rule.Default; mark != nil && mark.Marked(live.Object) && !mark.Marked(obj.Object) {
		// The target's default stays its default, which the dry run could not check: the
		// target refuses a second one, live being the first.
		obj = obj.DeepCopy()
		mark.Mark(obj.Object, live.Object)
	}
	// Before the new one is made: its controller would adopt and number what it selects.
	left := rs.dropFormer(ctx, gr, obj, e.Namespace, former)
	made, err := rs.createInPlaceOf(ctx, client, obj, uid)
	group := schema.FromAPIVersionAndKind(obj.GetAPIVersion(), obj.GetKind()).Group
	if err != nil {
		deleted := "it was deleted,"
		if len(former) > 0 {
			deleted += " with what it controlled that the backup's must not adopt,"
		}
		deleted += " and making the backup's failed: " + err.Error()
		// What the dry run did not foresee (an admission that lets dry runs through, something
		// that made it first) must not cost the target its own: it is made again as it was, but
		// what a backup leaves out (a finished Job, which would run again).
		if rule.Exclude != nil {
			if why := rule.Exclude(live.Object); why != "" {
				rs.forget(group, live)
				return fail(deleted + "; the target's is not made again (" + why + ")")
			}
		}
		switch again, perr := rs.createInPlaceOf(ctx, client, asItWas(live, rule.Recreate), uid); {
		case perr == nil:
			rs.remember(group, live.GetKind(), again) // what the restore makes next is its
			return fail(deleted + "; the target's was made again as it was")
		case apierrors.IsAlreadyExists(perr):
			rs.forget(group, live)
			return fail(deleted + "; something on the target made it again first, and it is left as that made it")
		default:
			rs.forget(group, live)
			return fail(deleted + "; making the target's again failed too, so it is gone: " + perr.Error())
		}
	}
	rs.remember(group, obj.GetKind(), made)
	rs.keepManagers(ctx, client, id, made, e.Object)
	rs.Log.Info("made again: the target changes it only so", "object", id)
	if len(left) > 0 {
		rs.report.Add("objects", snapshot.StatusFailed, id, "made again, but what the one before controlled that it must not adopt could not be deleted: "+strings.Join(left, "; "))
		return made.GetName(), true
	}
	rs.report.Count("objects", snapshot.StatusUpdated)
	return made.GetName(), true
}

// createInPlaceOf makes obj where the object of UID former was deleted. A create whose answer was
// lost is sent again, and finds what the first one made: that is taken for made, not for
// something else's.
func (rs *restorer) createInPlaceOf(ctx context.Context, client dynamic.ResourceInterface, obj *unstructured.Unstructured, former types.UID) (*unstructured.Unstructured, error) {
	made, err := rs.createRetrying(ctx, client, obj)
	if apierrors.IsAlreadyExists(err) {
		if now, gerr := client.Get(ctx, obj.GetName(), metav1.GetOptions{}); gerr == nil && now.GetUID() != former && madeByFerry(now) {
			return now, nil
		}
	}
	return made, err
}

// fixedField is the field a rules.Rule.Fixed difference names.
func fixedField(diff string) string {
	field, _, _ := strings.Cut(diff, ": ")
	return field
}

// asItWas is live without what the API server set when it made it and what names it
// (rules.Rule.Recreate), to be made again as it was (its status, its owners' UIDs, a Service's
// allocated IP kept).
func asItWas(live *unstructured.Unstructured, recreate func(map[string]any)) *unstructured.Unstructured {
	out := live.DeepCopy()
	for _, f := range serverSetMetadata {
		unstructured.RemoveNestedField(out.Object, "metadata", f)
	}
	if recreate != nil {
		recreate(out.Object)
	}
	return out
}

// compare lists how the live object differs from the expected one: where it lacks or changes
// what expected holds and, when Exact or replacing, what it holds that expected lacks.
func (c Objects) compare(gr string, expected map[string]any, live *unstructured.Unstructured) []string {
	norm := normalizedLive(gr, live)
	var sensitive config.Sensitivity
	if c.Plan != nil { // the backup's plan says what its ferry.yaml marked sensitive
		sensitive = c.Plan.Config.Sensitivity(gr)
	}
	diffs := Compare(expected, norm, sensitive)
	if fixed := rules.For(gr).Fixed; fixed != nil {
		// First, unless the comparison named its field already.
		if d := fixed(expected, live.Object); d != "" && !slices.ContainsFunc(diffs, func(s string) bool { return strings.HasPrefix(s, fixedField(d)) }) {
			diffs = append([]string{d}, diffs...)
		}
	}
	if c.Exact || c.Existing == ExistingReplace {
		for _, d := range Compare(Prepare(gr, norm, snapshot.Mapping{}), expected, sensitive) {
			diffs = append(diffs, strings.NewReplacer("missing on the target (backup: ", "on the target, not in the backup (", "backup ", "target ", "target ", "backup ").Replace(d))
		}
	}
	return diffs
}

// replacePatch is the JSON merge patch that turns the live object (normalized) into the expected
// one: what differs is set, what expected lacks is removed. Owner references, when they differ,
// are sent with the owners' UIDs on the target (refs), which the API server requires.
func replacePatch(live, expected map[string]any, refs []metav1.OwnerReference) ([]byte, error) {
	from, err := json.Marshal(live)
	if err != nil {
		return nil, err
	}
	to, err := json.Marshal(expected)
	if err != nil {
		return nil, err
	}
	patch, err := jsonpatch.CreateMergePatch(from, to)
	if err != nil {
		return nil, err
	}
	var p map[string]any
	if err := json.Unmarshal(patch, &p); err != nil {
		return nil, err
	}
	if m, ok := p["metadata"].(map[string]any); ok {
		if _, ok := m["ownerReferences"]; ok && len(refs) > 0 {
			m["ownerReferences"] = refs
		}
	}
	return json.Marshal(p)
}

// normalizedLive is a live object's normalized form with JSON's types, to compare with a backup's;
// with what the target set that counts as the backup's (rules.Rule.Live: a Service's allocated
// node ports; extra fields do not count as differences).
func normalizedLive(gr string, live *unstructured.Unstructured) map[string]any {
	norm := Normalize(gr, live.Object)
	if withLive := rules.For(gr).Live; withLive != nil {
		withLive(norm, live.Object)
	}
	data, err := json.Marshal(norm)
	if err != nil {
		return live.Object
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		return live.Object
	}
	return out
}

func (c Objects) client(gvr schema.GroupVersionResource, namespace string) dynamic.ResourceInterface {
	if namespace == "" {
		return c.Dynamic.Resource(gvr)
	}
	return c.Dynamic.Resource(gvr).Namespace(namespace)
}

func (rs *restorer) remember(group, kind string, live *unstructured.Unstructured) {
	if kind != "Namespace" && rs.owners != nil && !rs.owners[group+"/"+kind] {
		return // no object of the backup names it as its owner: its UID is never asked for
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.uids[ownerKey(group, kind, live.GetNamespace(), live.GetName())] = string(live.GetUID())
	if kind == "Namespace" && group == "" {
		rs.namespaces[live.GetName()] = true
	}
}

// forget drops the UID remember recorded of an object deleted: what names it as its owner looks
// it up again.
func (rs *restorer) forget(group string, live *unstructured.Unstructured) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	delete(rs.uids, ownerKey(group, live.GetKind(), live.GetNamespace(), live.GetName()))
}

// prepare is the form of a backed-up object restore creates and verify expects (Prepare); with
// SkipOwned, owned objects stay behind (rules.Rule.SkipOwned: a Deployment's revision starts anew).
func (c Objects) prepare(gr string, obj map[string]any) map[string]any {
	out := Prepare(gr, obj, c.Mapping)
	if skipOwned := rules.For(gr).SkipOwned; c.SkipOwned && skipOwned != nil {
		skipOwned(out)
	}
	return out
}

// deferredLink is an object restored before owners of its that the backup holds (rollout history
// before its controller, see plans.Order): its owner references are set once they are restored.
type deferredLink struct {
	gvr             schema.GroupVersionResource
	namespace, name string
	id              string
	refs            []metav1.OwnerReference // as the backup has them, without UIDs
}

// linkOwners sets each owner reference's UID to the owner's UID on the target: owners are mostly
// restored first; an owner that is not in the backup is looked up on the target. A reference to
// an owner of the backup not on the target yet is left out for now (later: linkDeferred);
// references to owners found nowhere are dropped (the garbage collector would delete the object
// otherwise) and returned. sourceNS is the object's namespace in the backup.
func (rs *restorer) linkOwners(ctx context.Context, obj *unstructured.Unstructured, sourceNS string) (dropped []string, later bool) {
	refs := obj.GetOwnerReferences()
	if len(refs) == 0 {
		return nil, false
	}
	var kept []metav1.OwnerReference
	for _, ref := range refs {
		gv, _ := schema.ParseGroupVersion(ref.APIVersion)
		uid := rs.ownerUID(ctx, gv.WithKind(ref.Kind), obj.GetNamespace(), ref.Name)
		switch {
		case uid != "":
			ref.UID = uid
			kept = append(kept, ref)
		case rs.archived[ownerKey(gv.Group, ref.Kind, sourceNS, ref.Name)] || rs.archived[ownerKey(gv.Group, ref.Kind, "", ref.Name)]:
			later = true
		default:
			dropped = append(dropped, ref.Kind+" "+ref.Name)
		}
	}
	obj.SetOwnerReferences(kept)
	return dropped, later
}

// linkDeferred sets the owner references of objects restored before their owners, once every
// owner is known (final: looked up on the target, and those found nowhere dropped and reported).
// The owner's controller may have adopted the object already, with the same reference.
func (rs *restorer) linkDeferred(ctx context.Context, final bool) {
	rs.mu.Lock()
	pending := rs.deferred
	rs.deferred = nil
	rs.mu.Unlock()
	var still []deferredLink
	for _, d := range pending {
		var refs []metav1.OwnerReference
		var dropped []string
		ready := true
		for _, ref := range d.refs {
			gv, _ := schema.ParseGroupVersion(ref.APIVersion)
			gvk := gv.WithKind(ref.Kind)
			uid := rs.knownUID(gvk, d.namespace, ref.Name)
			if uid == "" && final {
				uid = rs.ownerUID(ctx, gvk, d.namespace, ref.Name)
			}
			switch {
			case uid != "":
				ref.UID = uid
				refs = append(refs, ref)
			case final:
				dropped = append(dropped, ref.Kind+" "+ref.Name)
			default:
				ready = false
			}
		}
		if !ready {
			still = append(still, d)
			continue
		}
		if len(dropped) > 0 {
			rs.report.Add("objects", snapshot.StatusSkipped, d.id+" (owner reference)",
				"owner "+strings.Join(dropped, ", ")+" is not on the target: restored without that owner reference")
		}
		if len(refs) == 0 {
			continue
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": refs}})
		if err == nil {
			err = retry.OnError(retry.DefaultBackoff, transient, func() error {
				_, err := rs.client(d.gvr, d.namespace).Patch(ctx, d.name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
				return err
			})
		}
		if err != nil {
			rs.report.Add("objects", snapshot.StatusFailed, d.id+" (owner reference)", "restored before its owners, whose references could not be set: "+err.Error())
		}
	}
	rs.mu.Lock()
	rs.deferred = append(rs.deferred, still...)
	rs.mu.Unlock()
}

// knownUID is an owner's UID on the target as this restore knows it, without asking the target.
func (rs *restorer) knownUID(gvk schema.GroupVersionKind, namespace, name string) types.UID {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, ns := range []string{namespace, ""} {
		if u, ok := rs.uids[ownerKey(gvk.Group, gvk.Kind, ns, name)]; ok {
			return types.UID(u)
		}
	}
	return ""
}

func (rs *restorer) ownerUID(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) (uid types.UID) {
	if uid := rs.knownUID(gvk, namespace, name); uid != "" {
		return uid
	}
	key := ownerKey(gvk.Group, gvk.Kind, namespace, name)
	rs.mu.Lock()
	absent := rs.absent[key]
	rs.mu.Unlock()
	if absent || rs.Mapper == nil {
		return ""
	}
	mapping, err := rs.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return ""
	}
	ns := namespace
	if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		ns = ""
	}
	live, err := rs.client(mapping.Resource, ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			// Not asked again for each of its dependents; restored later, it is remembered.
			rs.mu.Lock()
			rs.absent[key] = true
			rs.mu.Unlock()
		}
		return ""
	}
	rs.remember(gvk.Group, gvk.Kind, live)
	return live.GetUID()
}

// ensureNamespace creates a namespace that the backup does not hold (not selected, or a mapping's
// new name) before objects go into it, as Velero does.
func (rs *restorer) ensureNamespace(ctx context.Context, ns string) error {
	rs.mu.Lock()
	known := rs.namespaces[ns]
	rs.mu.Unlock()
	if known {
		return nil
	}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}
	live, err := rs.Dynamic.Resource(gvr).Create(ctx, obj, metav1.CreateOptions{FieldManager: FieldManager})
	if apierrors.IsAlreadyExists(err) {
		live, err = rs.Dynamic.Resource(gvr).Get(ctx, ns, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("namespace %s: %w", ns, err)
	}
	if live.GetDeletionTimestamp() != nil {
		return fmt.Errorf("namespace %s is being deleted on the target", ns)
	}
	rs.remember("", "Namespace", live)
	return nil
}

// serviceAccountOf is the ServiceAccount an object needs on the target before it is made, or "":
// a pod's (admission refuses a pod whose account is missing) and a token Secret's (the token
// controller deletes a token whose account is missing). A namespace's "default" account is made
// by the target's controller manager a moment after the namespace.
func serviceAccountOf(gr string, obj *unstructured.Unstructured) string {
	switch gr {
	case "pods":
		account, _, _ := unstructured.NestedString(obj.Object, "spec", "serviceAccountName")
		return cmp.Or(account, "default")
	case "secrets":
		if typ, _, _ := unstructured.NestedString(obj.Object, "type"); typ == "kubernetes.io/service-account-token" {
			return obj.GetAnnotations()["kubernetes.io/service-account.name"]
		}
	}
	return ""
}

// waitServiceAccount waits until the ServiceAccount exists in namespace.
func (rs *restorer) waitServiceAccount(ctx context.Context, namespace, account string) error {
	accounts := rs.Dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}).Namespace(namespace)
	return kube.WaitServiceAccount(ctx, namespace, account, kube.ServiceAccountWait, func(ctx context.Context) error {
		_, err := accounts.Get(ctx, account, metav1.GetOptions{})
		return err
	})
}

// waitEstablished waits until every CRD is Established with its names accepted, so that its
// custom resources can be created; a CRD that is not within WaitTimeout is reported.
func (rs *restorer) waitEstablished(ctx context.Context, gvr schema.GroupVersionResource, names []string) {
	pending := map[string][]any{}
	for _, name := range names {
		pending[name] = nil
	}
	wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, rs.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		for name := range pending {
			crd, err := rs.Dynamic.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			if rules.For(crdResource).Ready(crd.Object) {
				delete(pending, name)
			} else {
				pending[name], _, _ = unstructured.NestedSlice(crd.Object, "status", "conditions")
			}
		}
		return len(pending) == 0, nil
	})
	for name, conds := range pending {
		rs.report.Addf("objects", snapshot.StatusFailed, "apiextensions.k8s.io/v1 CustomResourceDefinition "+name,
			"not Established within %s (conditions %s): its custom resources may fail", rs.WaitTimeout, show(conds))
	}
}

func (c Objects) selected(res plans.Resource, e Entry) bool {
	if c.Only != nil && !slices.Contains(c.Only, c.targetID(res.GroupResource(), e)) {
		return false
	}
	return c.Select == nil || c.Select.Reason(res, &unstructured.Unstructured{Object: e.Object}) == ""
}

func (c Objects) targetID(gr string, e Entry) string { return TargetID(c.Mapping, gr, e) }

// TargetID names the entry of type gr as reports name it on the target of mapping m: Entry.ID,
// its names mapped.
func TargetID(m snapshot.Mapping, gr string, e Entry) string {
	if e.Object != nil {
		u := unstructured.Unstructured{Object: e.Object}
		e.APIVersion, e.Kind, e.Name = u.GetAPIVersion(), u.GetKind(), u.GetName()
	}
	return e.APIVersion + " " + e.Kind + " " + strings.TrimPrefix(targetKey(m, gr, e), "/")
}

// clusterOwn says whether the entry is the source cluster's own, which stays as a ferry backup
// leaves it: of a type that never moves or owned by a node (in a backup made before their rules,
// or Velero's: a network plugin's address blocks, rules.Rule.Never), or of a Velero backup's
// kube-system (or another of a cluster's own namespaces) that the selection does not name
// (rules.ClusterOwnNamespace), or bound to it (rules.Rule.BoundTo: a webhook served from there).
// What runs there is set up for the cluster it came from.
func (c Objects) clusterOwn(e Entry) bool {
	if rules.For(e.GroupResource).Never != "" || e.Object != nil && rules.OwnedByNode(e.Object) != "" {
		return true
	}
	if !c.velero {
		return false
	}
	ns := e.Namespace
	if ns == "" && e.Object != nil {
		// What is bound to kube-system's (a webhook served from there) stays with it.
		ns = rules.For(e.GroupResource).BoundTo.Namespace(e.Object)
	}
	return rules.ClusterOwnNamespace(ns) && !c.Select.NamesNamespace(ns)
}

const crdResource = "customresourcedefinitions.apiextensions.k8s.io"

// forUpgrade sets the placement of an upgrade's plan when Upgrade is set.
func (c Objects) forUpgrade(plan *plans.Plan) (Objects, error) {
	if !c.Upgrade {
		return c, nil
	}
	if c.placement = plans.PlacementOf(plan); c.placement == nil {
		return c, fmt.Errorf("the backup was not made for an upgrade: its plan has no upgrade section")
	}
	return c, nil
}

// unserved says why an upgrade leaves the objects of res where they are: the target's release has
// no such type (a kind green's release added, carried back to blue), or "".
func (c Objects) unserved(res plans.Resource) string {
	if c.placement == nil || c.Mapper == nil || res.Group == "" {
		return ""
	}
	_, err := c.Mapper.KindFor(schema.GroupVersionResource{Group: res.Group, Version: res.Version, Resource: res.Resource})
	if !meta.IsNoMatchError(err) {
		return ""
	}
	return "the target's release has no " + res.GroupResource() + " in " + res.Version + ": it stays on the cluster it came from"
}

// greensOwn says whether an upgrade keeps the target's copy of the entry as it is, when there is
// one: a CRD, or state the release's part holds (plans.Placement.GreensOwn).
func (c Objects) greensOwn(gr string, e Entry) bool {
	return c.placement != nil && (gr == crdResource || c.placement.GreensOwn(gr, e.Namespace, e.Name))
}

// leftOut says why an upgrade does not move the entry, or "" (see plans.Placement.LeftOut).
func (c Objects) leftOut(gr string, e Entry) (why string, behind bool) {
	if c.placement == nil {
		return "", false
	}
	return c.placement.LeftOut(gr, e.Namespace, e.Name)
}

func claimsOf(a *Archive) map[string]bool {
	claims := map[string]bool{}
	for _, e := range a.ByResource["persistentvolumeclaims"] {
		claims[e.Namespace+"/"+e.Name] = true
	}
	return claims
}

// owners indexes the archive's objects as owner references name them.
func (a *Archive) owners() map[string]bool {
	a.index()
	out := map[string]bool{}
	for _, entries := range a.ByResource {
		for _, e := range entries {
			out[e.ownerKey()] = true
		}
	}
	return out
}

// ownerKindsOf is the group/Kind of every owner the archive's objects reference.
func ownerKindsOf(a *Archive) map[string]bool {
	a.index()
	out := map[string]bool{}
	for _, kinds := range a.ownerKinds {
		for k := range kinds {
			out[k] = true
		}
	}
	return out
}

// recreated reports whether the target makes the object anew by itself once the rest is
// restored (rules.Rule.Recreated: a volume bound to a restored claim, a pod whose controller is
// restored), or its pods do (ownedByRecreatedPods). claims are the backup's claims, archived its
// objects (ownerKey), of the archive a.
func recreated(gr string, obj map[string]any, claims, archived map[string]bool, a *Archive) bool {
	holds := func(group, kind, namespace, name string) bool {
		return archived[ownerKey(group, kind, namespace, name)]
	}
	if rules.For(gr).IsRecreated(obj, claims, holds) {
		return true
	}
	// A claim holds data: one a pod owns moves as its own rule says.
	return gr != "persistentvolumeclaims" && a.ownedByRecreatedPods(obj, claims, holds)
}

// ownedByRecreatedPods says whether every owner of obj is a pod of the archive that the target
// makes anew under another name (the pods' rule): what the pod's process made for itself (an
// operator's leader-for-life lock, a driver's services) the new pod's process makes again.
// Restored, it would lose its owner and stay for ever, and a lock so held would keep the new pod
// waiting.
func (a *Archive) ownedByRecreatedPods(obj map[string]any, claims map[string]bool, holds func(group, kind, namespace, name string) bool) bool {
	u := unstructured.Unstructured{Object: obj}
	refs := u.GetOwnerReferences()
	if len(refs) == 0 || a == nil {
		return false
	}
	a.index()
	for _, ref := range refs {
		owners, held := a.podOwners[ownerKey("", "Pod", u.GetNamespace(), ref.Name)]
		if ref.APIVersion != "v1" || ref.Kind != "Pod" || !held {
			return false
		}
		pod := map[string]any{"metadata": map[string]any{"namespace": u.GetNamespace(), "name": ref.Name, "ownerReferences": owners}}
		if !rules.For("pods").IsRecreated(pod, claims, holds) {
			return false
		}
	}
	return true
}

// controlled reports whether an object has a controlling owner reference.
func controlled(obj map[string]any) bool {
	for _, ref := range (&unstructured.Unstructured{Object: obj}).GetOwnerReferences() {
		if ref.Controller != nil && *ref.Controller {
			return true
		}
	}
	return false
}

// mergedOver is obj as a JSON merge patch over live that keeps what server-side apply would
// keep of two lists it merges by key: the finalizers and owner references live has beside obj's.
func mergedOver(obj, live *unstructured.Unstructured) *unstructured.Unstructured {
	out := obj.DeepCopy()
	finalizers := obj.GetFinalizers()
	for _, f := range live.GetFinalizers() {
		if !slices.Contains(finalizers, f) {
			finalizers = append(finalizers, f)
		}
	}
	out.SetFinalizers(finalizers)
	owners := obj.GetOwnerReferences()
	for _, o := range live.GetOwnerReferences() {
		if !slices.ContainsFunc(owners, func(r metav1.OwnerReference) bool { return r.UID == o.UID }) {
			owners = append(owners, o)
		}
	}
	out.SetOwnerReferences(owners)
	return out
}

// duplicateKeys says whether server-side apply refused an object for a list that holds one key
// twice ("duplicate entries for key", structured-merge-diff's words).
func duplicateKeys(err error) bool {
	return err != nil && strings.Contains(err.Error(), "duplicate entries for key")
}

// transient errors are retried with backoff. A write whose connection broke (an API server
// restarting, a load balancer dropping it) may have been made: made again, a create finds it
// already there (and compares it), a delete finds it gone, a patch or apply changes nothing more.
func transient(err error) bool {
	return apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) || apierrors.IsConflict(err) ||
		kube.ConnectionBroke(err)
}
