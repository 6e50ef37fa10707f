package resources

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/rules"
	"github.com/ferrykube/ferry/snapshot"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
)

// revision is one entry of a workload's rollout history.
type revision struct {
	number int64
	name   string // the ReplicaSet or ControllerRevision, named by the template's hash
	cause  string // kubernetes.io/change-cause
}

func (r revision) String() string {
	s := fmt.Sprintf("%d %s", r.number, r.name)
	if r.cause != "" {
		s += fmt.Sprintf(" (%q)", r.cause)
	}
	return s
}

// revisionOf reads a history object: its number (rules.Rule.Revision: a ReplicaSet's revision
// annotation or a ControllerRevision's revision field), and the change-cause its controller copied from the workload.
func revisionOf(gr string, obj map[string]any) revision {
	u := unstructured.Unstructured{Object: obj}
	r := revision{name: u.GetName(), cause: u.GetAnnotations()["kubernetes.io/change-cause"]}
	r.number = rules.For(gr).Revision(obj)
	return r
}

// revisionForm is what historyOf and revisionOf read of a history object: its name, owner
// references, revision annotations and number.
func revisionForm(gr string, obj map[string]any) map[string]any {
	u := unstructured.Unstructured{Object: obj}
	meta := map[string]any{"name": u.GetName()}
	if refs, ok := nestedMap(obj, "metadata")["ownerReferences"]; ok {
		meta["ownerReferences"] = refs
	}
	ann := map[string]any{}
	for _, k := range []string{"kubernetes.io/change-cause", "deployment.kubernetes.io/revision"} {
		if v, ok := u.GetAnnotations()[k]; ok {
			ann[k] = v
		}
	}
	if len(ann) > 0 {
		meta["annotations"] = ann
	}
	out := map[string]any{"metadata": meta}
	if gr != "replicasets.apps" {
		out["revision"] = obj["revision"]
	}
	return out
}

// historyOf is the rollout history of the workload kind/name among objects of one namespace,
// ordered by number.
func historyOf(gr string, objs []map[string]any, kind, name string) []revision {
	var out []revision
	for _, obj := range objs {
		for _, ref := range (&unstructured.Unstructured{Object: obj}).GetOwnerReferences() {
			if ref.Controller != nil && *ref.Controller && ref.Kind == kind && ref.Name == name {
				out = append(out, revisionOf(gr, obj))
			}
		}
	}
	slices.SortFunc(out, func(a, b revision) int {
		if a.number != b.number {
			return int(a.number - b.number)
		}
		return strings.Compare(a.name, b.name)
	})
	return out
}

type historyCheck struct {
	id, namespace, kind, name string
	gvr                       schema.GroupVersionResource // of the history type
	want                      []revision
}

// verifyHistory compares each restored workload's rollout history on the target with the backup's,
// exactly: the same revisions (numbers, templates by name, change-causes), none more or fewer. The
// target's controllers adopt and renumber revisions as they arrive, so it waits up to WaitTimeout
// for the histories to settle before it reports one that differs. A workload the target holds as
// its admission makes it (admitted: its ID, and its revision there) may go on past the backup's
// revisions by that one: its controller makes it of the template the admission changed.
func (c Objects) verifyHistory(ctx context.Context, order []plans.Resource, archive *Archive, admitted *sync.Map, report *snapshot.Report) {
	if c.SkipOwned {
		return // the history stayed behind: the target's controllers start their own
	}
	types := map[string]plans.Resource{}
	for _, r := range order {
		types[r.GroupResource()] = r
	}
	var checks []*historyCheck
	for _, owner := range slices.Sorted(slices.Values(rules.Types())) {
		rh := rules.For(owner).RolloutHistory
		if rh == nil {
			continue
		}
		ownerRes, ok1 := types[owner]
		histRes, ok2 := types[rh.In]
		if !ok1 || !ok2 {
			continue
		}
		// The history objects' revisions only, by namespace: memory holds no whole object.
		byNS := map[string][]map[string]any{}
		for _, e := range archive.ByResource[rh.In] {
			obj, err := archive.Object(e)
			if err != nil {
				report.Add("history", snapshot.StatusFailed, e.ID(), err.Error())
				continue
			}
			if e.Object = obj; c.selected(histRes, e) {
				byNS[e.Namespace] = append(byNS[e.Namespace], revisionForm(rh.In, obj))
			}
		}
		if len(byNS) == 0 {
			continue
		}
		for _, e := range archive.ByResource[owner] {
			want := historyOf(rh.In, byNS[e.Namespace], rh.Kind, e.Name)
			if len(want) == 0 {
				continue
			}
			obj, err := archive.Object(e)
			if err != nil {
				report.Add("history", snapshot.StatusFailed, e.ID(), err.Error())
				continue
			}
			e.Object = obj
			if why, _ := c.leftOut(owner, e); !c.selected(ownerRes, e) || c.clusterOwn(e) || why != "" {
				continue
			}
			ns := c.Mapping.Namespace(e.Namespace)
			checks = append(checks, &historyCheck{
				id: objectID(Prepare(owner, obj, c.Mapping), ns), namespace: ns, kind: rh.Kind, name: e.Name,
				gvr: schema.GroupVersionResource{Group: histRes.Group, Version: histRes.Version, Resource: histRes.Resource}, want: want,
			})
		}
	}
	got := map[*historyCheck][]revision{}
	pending := checks
	_ = wait.PollUntilContextTimeout(ctx, time.Second, c.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		lists := map[string][]map[string]any{} // history type/namespace -> objects
		var still []*historyCheck
		for _, h := range pending {
			key := h.gvr.String() + "/" + h.namespace
			objs, ok := lists[key]
			if !ok {
				listCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				list, err := c.Dynamic.Resource(h.gvr).Namespace(h.namespace).List(listCtx, metav1.ListOptions{})
				cancel()
				if err != nil {
					still = append(still, h)
					continue
				}
				for _, item := range list.Items {
					objs = append(objs, item.Object)
				}
				lists[key] = objs
			}
			got[h] = historyOf(h.gvr.GroupResource().String(), objs, h.kind, h.name)
			if revision, ok := admitted.Load(h.id); ok && goesOn(h.want, got[h], revision.(int64)) {
				report.Addf("history", snapshot.StatusAdmitted, h.id, "rollout history: the backup's %s, then the target's %s, of the template its admission changed",
					showHistory(h.want), showHistory(got[h][len(h.want):]))
				continue
			}
			if !slices.Equal(got[h], h.want) {
				still = append(still, h)
				continue
			}
			report.Count("history", snapshot.StatusIdentical)
		}
		pending = still
		return len(pending) == 0, nil
	})
	for _, h := range pending {
		report.Addf("history", snapshot.StatusDifferent, h.id, "rollout history: backup %s; target %s", showHistory(h.want), showHistory(got[h]))
	}
}

// goesOn says whether history got holds want's revisions and then one newer one: the workload's
// revision on the target, last, when it names one (not 0), or one its controller numbered after
// last was read (the workload was read before the controller saw the template its admission
// changed, and numbered it).
func goesOn(want, got []revision, last int64) bool {
	n := len(want)
	return n > 0 && len(got) == n+1 && slices.Equal(got[:n], want) && got[n].number > want[n-1].number && got[n].number >= last
}

func showHistory(revs []revision) string {
	if len(revs) == 0 {
		return "none"
	}
	parts := make([]string, len(revs))
	for i, r := range revs {
		parts[i] = r.String()
	}
	return strings.Join(parts, ", ")
}

// renumber is the merge patch that gives a history object on the target the backup's revision
// number, when its numbering (rules.Rule.Renumber) is all that differs (its controller numbered
// it first, or again); else nil.
func renumber(gr string, expected, live map[string]any) []byte {
	numbering := rules.For(gr).Renumber
	if numbering == nil {
		return nil
	}
	want, got := runtime.DeepCopyJSON(expected), runtime.DeepCopyJSON(live)
	patch, ok := numbering(want, got)
	if !ok || len(patch) == 0 || len(Compare(want, got)) > 0 {
		return nil
	}
	data, err := json.Marshal(patch)
	if err != nil {
		return nil
	}
	return data
}
