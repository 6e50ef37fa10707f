package migrate

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// QuiescedAnnotation holds, on each object ferry quiesced, what it was before (JSON): the undo.
// It moves with the object to green, where the same record starts green's writers.
const QuiescedAnnotation = plans.QuiescedAnnotation

// Quiesce actions.
const (
	ScaleToZero = "scale-to-zero"
	Suspend     = "suspend"
	Annotate    = "annotate"
	Patch       = "patch"
)

// original is what QuiescedAnnotation records.
type original struct {
	Action   string `json:"action"`
	Replicas *int64 `json:"replicas,omitempty"`
	Suspend  *bool  `json:"suspend,omitempty"`
	// Undo is a JSON merge patch that puts back what annotate or patch changed (nulls remove).
	Undo json.RawMessage `json:"undo,omitempty"`
}

// Quiescer stops a cluster's writers by rules (ferry.yaml's and its preset's quiesce list) and
// starts them again exactly as they were.
type Quiescer struct {
	Dynamic dynamic.Interface
	Mapper  meta.RESTMapper
	Rules   []config.QuiesceRule
	// Mapping renames the rules' namespaces on green.
	Namespace func(string) string
	Log       *slog.Logger
	// StopTimeout bounds Stop's wait for the stopped writers' pods; 0 is WritersStopTimeout.
	StopTimeout time.Duration
	// AdmissionWait bounds Start's wait for an admission webhook's server to take a change; 0 is
	// AdmissionWait.
	AdmissionWait time.Duration
	// Later are objects ("apiVersion Kind namespace/name") Start leaves stopped: copies that a
	// restore is to replace once the writers run (startAndAdmit).
	Later []string
	// MoverUsers are the users ferry makes mover pods as, on every cluster a stopped object may
	// move to: webhooks whose server Stop stops let them pass (exemptMovers).
	MoverUsers func(context.Context) []string
}

// QuiesceItem is one object stopped or started.
type QuiesceItem struct {
	Resource  string `json:"resource"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Action    string `json:"action"`
	Detail    string `json:"detail,omitempty"`
}

// Stop applies every rule to the objects it selects, recording each original first, and returns
// once no pod of the writers it stopped runs (waitStopped, up to StopTimeout). An object already
// carrying the record keeps it, so Stop is idempotent (a resumed run repeats it, and waits for the
// pods again); one its rule stopped that something started again since (restarted) is stopped
// again, and one started again while Stop waits for the pods stops it at once.
func (q Quiescer) Stop(ctx context.Context) ([]QuiesceItem, error) {
	var done []QuiesceItem
	var writers []writerPods
	var checked []stoppedObject
	var scaled []*unstructured.Unstructured
	err := q.each(ctx, stopping, func(rule config.QuiesceRule, client dynamic.ResourceInterface, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		if rule.Action == ScaleToZero {
			scaled = append(scaled, obj)
		}
		if record, ok := obj.GetAnnotations()[QuiescedAnnotation]; ok {
			if field, now := restarted(rule, record, obj); field != "" {
				orig, patch, err := quiescePatch(rule, obj)
				if err != nil {
					return nil, err
				}
				if patch, err = keepClaimsInRecord(record, orig, patch); err != nil {
					return nil, err
				}
				if obj, err = q.patch(ctx, client, obj.GetName(), patch, 0); err != nil {
					return nil, err
				}
				q.Log.Warn("a writer was started again since the quiesce; stopped it again", "resource", rule.Resource, "namespace", obj.GetNamespace(), "name", obj.GetName(),
					"field", field, "was", now)
				done = append(done, QuiesceItem{Resource: rule.Resource, Namespace: obj.GetNamespace(), Name: obj.GetName(), Action: rule.Action, Detail: "stopped again: started since the quiesce"})
			}
		} else {
			orig, full, err := recordedPatch(rule, obj)
			if err != nil {
				return nil, err
			}
			if obj, err = q.patch(ctx, client, obj.GetName(), full, 0); err != nil {
				return nil, err
			}
			detail := rule.Why
			if orig.keepsClaims() {
				detail += "; keeps its claims while stopped (whenScaled: Retain, Delete again when started)"
			}
			done = append(done, QuiesceItem{Resource: rule.Resource, Namespace: obj.GetNamespace(), Name: obj.GetName(), Action: rule.Action, Detail: strings.TrimPrefix(detail, "; ")})
		}
		checked = append(checked, stoppedObject{rule: rule, client: client, name: obj.GetName()})
		found, err := q.writerPodsOf(ctx, rule, obj)
		writers = append(writers, found...)
		return obj, err
	})
	if err != nil {
		return done, err
	}
	exempted, err := q.exemptMovers(ctx, scaled)
	done = append(done, exempted...)
	if err != nil {
		return done, err
	}
	start := time.Now()
	pods, err := q.waitStopped(ctx, writers, cmp.Or(q.StopTimeout, WritersStopTimeout), func() error {
		// A writer started again as soon as it was stopped (a GitOps tool's self-heal) keeps its
		// pods: say so now rather than at the timeout. An object that cannot be read now is
		// read again at the next poll.
		var again []string
		for _, o := range checked {
			obj, err := o.client.Get(ctx, o.name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			if field, now := restarted(o.rule, obj.GetAnnotations()[QuiescedAnnotation], obj); field != "" {
				again = append(again, startedAgainLine(o.rule, obj, field, now))
			}
		}
		if len(again) > 0 {
			return fmt.Errorf("writers were started again as ferry stopped them: %s: stop what starts them (a GitOps tool's self-heal, an autoscaler, an operator), then run again: %w",
				strings.Join(again[:min(len(again), 5)], "; "), ErrStopped)
		}
		return nil
	})
	if pods > 0 && err == nil {
		q.Log.Info("the stopped writers' pods ended", "pods", pods, "took", time.Since(start).Round(time.Millisecond))
	}
	return done, err
}

// recordedPatch is the merge patch by which Stop stops obj by the rule: quiescePatch's, with the
// record that undoes it.
func recordedPatch(rule config.QuiesceRule, obj *unstructured.Unstructured) (original, []byte, error) {
	orig, patch, err := quiescePatch(rule, obj)
	if err != nil {
		return orig, nil, err
	}
	record, _ := json.Marshal(orig)
	full, err := mergePatches(patch, map[string]any{"metadata": map[string]any{"annotations": map[string]any{QuiescedAnnotation: string(record)}}})
	return orig, full, err
}

// Refused tries, as a dry run (admission runs, nothing changes), each change Stop would make to an
// object not stopped yet, and names, one line each, those the cluster refuses: a policy that
// forbids a workload at zero replicas or a suspended CronJob (a ValidatingAdmissionPolicy,
// Kyverno's, Gatekeeper's) would refuse it part way through Stop, some writers stopped and the
// rest running. A webhook that does not take dry runs is not asked.
func (q Quiescer) Refused(ctx context.Context) ([]string, error) {
	var refused []string
	err := q.each(ctx, stopping, func(rule config.QuiesceRule, client dynamic.ResourceInterface, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		if _, ok := obj.GetAnnotations()[QuiescedAnnotation]; ok {
			return obj, nil // stopped already: a resumed run's
		}
		_, patch, err := recordedPatch(rule, obj)
		if err != nil {
			return nil, err
		}
		// The object as the change would leave it goes to its next rule, as in Stop.
		changed, err := client.Patch(ctx, obj.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "ferry", DryRun: []string{metav1.DryRunAll}})
		var status apierrors.APIStatus
		switch {
		case err == nil:
			return changed, nil
		case strings.Contains(err.Error(), "does not support dry run"):
		case apierrors.IsConflict(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsTooManyRequests(err), !errors.As(err, &status) && !kube.WebhookUnreachable(err):
			return nil, err // not the cluster's answer to the change
		default: // a policy's refusal, or a webhook that Stop could not call either
			refused = append(refused, fmt.Sprintf("%s %s (%s): %v", rule.Resource, path.Join(obj.GetNamespace(), obj.GetName()), rule.Action, err))
		}
		return obj, nil
	})
	return refused, err
}

// stoppedObject is an object Stop stopped, or found stopped, by rule.
type stoppedObject struct {
	rule   config.QuiesceRule
	client dynamic.ResourceInterface
	name   string
}

// restarted names the field of obj that says it was started again since its rule stopped it,
// and its value now, or "" when it is as the rule left it. Only the fields a rule to scale to
// zero or to suspend sets are read, and an Argo CD Application's automated sync: the annotations
// and patches of the others are for controllers that may rewrite them (their pods are what Held
// reads), and an object another rule recorded (record) is that rule's.
func restarted(rule config.QuiesceRule, record string, obj *unstructured.Unstructured) (field, now string) {
	var orig original
	if json.Unmarshal([]byte(record), &orig) != nil || orig.Action != rule.Action {
		return "", ""
	}
	switch rule.Action {
	case ScaleToZero:
		replicas, found, _ := unstructured.NestedInt64(obj.Object, "spec", "replicas")
		if !found {
			return "spec.replicas", "unset (1)"
		}
		if replicas != 0 {
			return "spec.replicas", strconv.FormatInt(replicas, 10)
		}
	case Suspend:
		if suspend, _, _ := unstructured.NestedBool(obj.Object, "spec", "suspend"); !suspend {
			return "spec.suspend", "false"
		}
	case Patch:
		if rule.Resource == argoApplications && syncsByItself(obj) { // its parent's sync put it back
			return "spec.syncPolicy.automated", "set"
		}
	}
	return "", ""
}

// startedAgainLine says that obj, stopped by rule, was started again: field is now now.
func startedAgainLine(rule config.QuiesceRule, obj *unstructured.Unstructured, field, now string) string {
	want := map[string]string{ScaleToZero: "0", Suspend: "true", Patch: "unset"}[rule.Action]
	return fmt.Sprintf("%s %s: started again (%s is %s, the quiesce set %s)", rule.Resource, path.Join(obj.GetNamespace(), obj.GetName()), field, now, want)
}

// Held says how the quiesce no longer holds, one line each, or nothing: every object the rules
// select must carry the record and be as its rule left it (restarted), and none of their pods
// run. While a backup reads, something may start a stopped writer again (a GitOps tool's
// self-heal puts back the replicas its repository holds, an autoscaler, an operator), or a new
// writer may appear; what they write then is not all in the backup.
func (q Quiescer) Held(ctx context.Context) ([]string, error) {
	var broken []string
	var writers []writerPods
	err := q.each(ctx, stopping, func(rule config.QuiesceRule, _ dynamic.ResourceInterface, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		if record, ok := obj.GetAnnotations()[QuiescedAnnotation]; !ok {
			broken = append(broken, rule.Resource+" "+path.Join(obj.GetNamespace(), obj.GetName())+": not stopped: made, or its quiesce record removed, since the quiesce")
		} else if field, now := restarted(rule, record, obj); field != "" {
			broken = append(broken, startedAgainLine(rule, obj, field, now))
		}
		found, err := q.writerPodsOf(ctx, rule, obj)
		writers = append(writers, found...)
		return obj, err
	})
	if err != nil {
		return nil, err
	}
	running, _, err := q.runningPods(ctx, writers, ownerCache{})
	for _, p := range running {
		broken = append(broken, "pod "+p+" runs")
	}
	return broken, err
}

// Start undoes Stop on every object that carries the record, and removes the record.
func (q Quiescer) Start(ctx context.Context) ([]QuiesceItem, error) {
	var done []QuiesceItem
	err := q.each(ctx, starting, func(rule config.QuiesceRule, client dynamic.ResourceInterface, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		record, ok := obj.GetAnnotations()[QuiescedAnnotation]
		if !ok || slices.Contains(q.Later, objectName(obj)) {
			return obj, nil
		}
		patch, action, err := undoPatch(record)
		if err != nil {
			return nil, err
		}
		started, err := q.patch(ctx, client, obj.GetName(), patch, cmp.Or(q.AdmissionWait, AdmissionWait))
		if err != nil {
			return nil, err
		}
		if err := q.forgetOnReplicaSets(ctx, obj); err != nil {
			return nil, err
		}
		done = append(done, QuiesceItem{Resource: rule.Resource, Namespace: obj.GetNamespace(), Name: obj.GetName(), Action: "un-" + action})
		return started, nil
	})
	if err != nil || q.Dynamic == nil {
		return done, err
	}
	unexempted, err := q.unexemptMovers(ctx)
	return append(done, unexempted...), err
}

var replicaSetsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}

var jobsGVR = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}

// WritersStopTimeout is how long Stop waits for the pods of the writers it stopped: past their
// grace periods (30 s unless a pod sets its own, which lengthens the wait), with room for slow
// nodes.
const WritersStopTimeout = 5 * time.Minute

// AdmissionWait is how long a change waits for an admission webhook's server that cannot be
// called: a workload Start scaled up moments before may be that server, and it serves once its
// pods are ready.
const AdmissionWait = 5 * time.Minute

// writerPods are the pods of one writer Stop stopped: those of namespace matching selector, or,
// without one, those owned (through their owner references) by the object of UID owned.
type writerPods struct {
	owner     string // what the pods run for, as errors name it
	namespace string
	selector  string
	owned     types.UID
}

// waitStopped waits until none of the writers' pods runs, and returns how many it saw running
// first. Stopping a writer only asks its controller to end its pods, and each may write until it
// ends, within its grace period: a backup that starts before then can miss what they write last.
// Pods that ended (Succeeded, Failed) write nothing. It waits up to timeout, longer by as much as
// the longest grace period of a pod it saw exceeds Kubernetes' default: a database given ten
// minutes to flush gets them.
func (q Quiescer) waitStopped(ctx context.Context, writers []writerPods, timeout time.Duration, stillStopped func() error) (int, error) {
	start := time.Now()
	deadline := start.Add(timeout)
	first := -1
	owners := ownerCache{} // kept across polls: an object's owners do not change as its pods end
	for {
		running, grace, err := q.runningPods(ctx, writers, owners)
		if err != nil {
			return first, err
		}
		if extra := grace - defaultGracePeriod; extra > 0 && start.Add(timeout+extra).After(deadline) {
			deadline = start.Add(timeout + extra)
		}
		if first < 0 {
			first = len(running)
		}
		if len(running) == 0 {
			return first, nil
		}
		if err := stillStopped(); err != nil {
			return first, err
		}
		if !time.Now().Before(deadline) {
			return first, fmt.Errorf("%d pods of the writers stopped still run after %s (%s): a backup now could miss what they write last; "+
				"once they end (or are deleted), run again", len(running), time.Since(start).Round(time.Second), strings.Join(running[:min(len(running), 5)], ", "))
		}
		select {
		case <-ctx.Done():
			return first, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// runningPods lists the writers' pods that have not ended ("namespace/name of owner"), and the
// longest grace period among them.
func (q Quiescer) runningPods(ctx context.Context, writers []writerPods, owners ownerCache) ([]string, time.Duration, error) {
	var running []string
	var longest time.Duration
	lists := map[[2]string]*unstructured.UnstructuredList{} // by namespace and selector: many writers share one
	for _, w := range writers {
		list := lists[[2]string{w.namespace, w.selector}]
		if list == nil {
			var err error
			if list, err = q.Dynamic.Resource(kube.PodsGVR).Namespace(w.namespace).List(ctx, metav1.ListOptions{LabelSelector: w.selector}); err != nil {
				return nil, 0, fmt.Errorf("pods of %s: %w", w.owner, err)
			}
			lists[[2]string{w.namespace, w.selector}] = list
		}
		for i := range list.Items {
			p := &list.Items[i]
			if phase, _, _ := unstructured.NestedString(p.Object, "status", "phase"); phase == "Succeeded" || phase == "Failed" {
				continue
			}
			if w.selector == "" {
				owned, err := q.ownedByAny(ctx, p, map[types.UID]bool{w.owned: true}, owners)
				if err != nil {
					return nil, 0, fmt.Errorf("pods of %s: %w", w.owner, err)
				}
				if !owned {
					continue
				}
			}
			running = append(running, p.GetNamespace()+"/"+p.GetName()+" of "+w.owner)
			longest = max(longest, gracePeriod(p))
		}
	}
	return running, longest, nil
}

// defaultGracePeriod is Kubernetes' default terminationGracePeriodSeconds.
const defaultGracePeriod = 30 * time.Second

// gracePeriod is how long pod may take to end once asked: the grace period its deletion was given,
// else its spec's, else the default.
func gracePeriod(pod *unstructured.Unstructured) time.Duration {
	if s := pod.GetDeletionGracePeriodSeconds(); s != nil {
		return time.Duration(*s) * time.Second
	}
	if s, found, _ := unstructured.NestedInt64(pod.Object, "spec", "terminationGracePeriodSeconds"); found {
		return time.Duration(s) * time.Second
	}
	return defaultGracePeriod
}

// writerPodsOf are the pods obj, stopped by rule, may still run: a workload's (scaled to zero) or
// a Job's (suspended) by its pod selector; a suspended CronJob's, whose suspension stops only new
// Jobs, those of the Jobs it lists as active; with the rule's waitForPods, the pods obj owns
// (annotate and patch rules, whose controllers end what the object runs), and an Argo Rollout's
// without one. Anything else (a custom resource's workload without a selector) is passed over:
// Stop cannot know its pods.
func (q Quiescer) writerPodsOf(ctx context.Context, rule config.QuiesceRule, obj *unstructured.Unstructured) ([]writerPods, error) {
	owner := rule.Resource + " " + obj.GetNamespace() + "/" + obj.GetName()
	if rule.WaitForPods {
		return []writerPods{{owner: owner, namespace: obj.GetNamespace(), owned: obj.GetUID()}}, nil
	}
	if rule.Action != ScaleToZero && rule.Action != Suspend {
		return nil, nil
	}
	if sel, ok := kube.PodSelector(obj); ok {
		return []writerPods{{owner: owner, namespace: obj.GetNamespace(), selector: sel.String()}}, nil
	}
	active, _, _ := unstructured.NestedSlice(obj.Object, "status", "active")
	var out []writerPods
	for _, a := range active {
		ref, _ := a.(map[string]any)
		kind, _ := ref["kind"].(string)
		name, _ := ref["name"].(string)
		ns, _ := ref["namespace"].(string)
		if kind != "Job" || name == "" {
			continue
		}
		ns = cmp.Or(ns, obj.GetNamespace())
		job, err := q.Dynamic.Resource(jobsGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("job %s/%s of %s: %w", ns, name, owner, err)
		}
		if sel, ok := kube.PodSelector(job); ok {
			out = append(out, writerPods{owner: "job " + ns + "/" + name + " of " + owner, namespace: ns, selector: sel.String()})
		}
	}
	if len(out) == 0 && rule.Action == ScaleToZero && rule.Resource == rolloutsResource {
		// An Argo Rollout that takes its pods' template from a Deployment's has no selector:
		// the pods it owns, through their ReplicaSets.
		out = append(out, writerPods{owner: owner, namespace: obj.GetNamespace(), owned: obj.GetUID()})
	}
	return out, nil
}

// ownerCache holds the owner references of the objects ownedBy fetched, by UID.
type ownerCache map[types.UID][]metav1.OwnerReference

// ownedByAny reports whether obj's owner references lead to an object of one of uids within a few
// steps (a pod's StatefulSet's Notebook; a pod's Job's Trial's Experiment). An owner that is gone,
// or of a type not served, ends its path; one that cannot be read now is an error, not a guess.
func (q Quiescer) ownedByAny(ctx context.Context, obj *unstructured.Unstructured, uids map[types.UID]bool, owners ownerCache) (bool, error) {
	refs := obj.GetOwnerReferences()
	for depth := 0; depth < 5 && len(refs) > 0; depth++ {
		var next []metav1.OwnerReference
		for _, ref := range refs {
			if uids[ref.UID] {
				return true, nil
			}
			up, ok := owners[ref.UID]
			if !ok {
				var err error
				if up, err = q.ownerReferencesOf(ctx, obj.GetNamespace(), ref); err != nil {
					return false, fmt.Errorf("%s %s/%s, owner of pod %s: %w", ref.Kind, obj.GetNamespace(), ref.Name, obj.GetName(), err)
				}
				owners[ref.UID] = up
			}
			next = append(next, up...)
		}
		refs = next
	}
	return false, nil
}

// ownerReferencesOf are the owner references of the object ref names in namespace ns; none when it
// is gone, of a type not served, or not the one ref names (same name, another UID).
func (q Quiescer) ownerReferencesOf(ctx context.Context, ns string, ref metav1.OwnerReference) ([]metav1.OwnerReference, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil, nil
	}
	mapping, err := q.Mapper.RESTMapping(schema.GroupKind{Group: gv.Group, Kind: ref.Kind}, gv.Version)
	if err != nil {
		return nil, nil
	}
	client := q.Dynamic.Resource(mapping.Resource)
	var obj *unstructured.Unstructured
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		obj, err = client.Namespace(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	} else {
		obj, err = client.Get(ctx, ref.Name, metav1.GetOptions{})
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	case obj.GetUID() != ref.UID:
		return nil, nil
	}
	return obj.GetOwnerReferences(), nil
}

// forgetOnReplicaSets removes the quiesce record from the ReplicaSets a Deployment or an Argo
// Rollout controls: their controllers copy the workload's annotations onto its ReplicaSets but
// never remove one, so the record would stay on them after the workload started again.
func (q Quiescer) forgetOnReplicaSets(ctx context.Context, obj *unstructured.Unstructured) error {
	if obj.GetKind() != "Deployment" && (obj.GetKind() != "Rollout" || obj.GroupVersionKind().Group != "argoproj.io") {
		return nil
	}
	client := q.Dynamic.Resource(replicaSetsGVR).Namespace(obj.GetNamespace())
	list, err := client.List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("replica sets of %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	patch := []byte(`{"metadata":{"annotations":{"` + QuiescedAnnotation + `":null}}}`)
	for i := range list.Items {
		rs := &list.Items[i]
		owner := metav1.GetControllerOfNoCopy(rs)
		if _, marked := rs.GetAnnotations()[QuiescedAnnotation]; !marked || owner == nil || owner.UID != obj.GetUID() {
			continue
		}
		if _, err := client.Patch(ctx, rs.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "ferry"}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("replica set %s/%s: %w", rs.GetNamespace(), rs.GetName(), err)
		}
	}
	return nil
}

// each calls fn for every object a rule selects; resource types the cluster does not serve are
// logged and passed over (a preset names more than every platform runs).
// phase is which way the writers go. Stop changes the objects that controllers and admission
// webhooks act on (annotate, patch, suspend) before it scales workloads to zero, and Start scales
// them up first: a scaled workload may be what serves an admission webhook for the others
// (Katib's controller admits every change of an Experiment), which refuses them while it does not
// run.
type phase int

const (
	stopping phase = iota
	starting
)

// target is an object a rule selects, with the client that writes it.
type target struct {
	rule   config.QuiesceRule
	client dynamic.ResourceInterface
	obj    *unstructured.Unstructured
	// pauses marks an autoscaler's pause (pausedAutoscalers): made before its workload is scaled
	// to zero, and undone before it is scaled up, as the autoscaler holds it at the paused count.
	pauses bool
	// manages marks a GitOps object's pause (pausedManagers): how far it is from the writers it
	// applies (1 applies one, 2 applies such an object, ...).
	manages int
}

// each calls fn on every object the rules select (targets), in the order of the phase (ordered).
// fn returns the object as it left it, which the object's next rule sees.
func (q Quiescer) each(ctx context.Context, phase phase, fn func(config.QuiesceRule, dynamic.ResourceInterface, *unstructured.Unstructured) (*unstructured.Unstructured, error)) error {
	targets, err := q.targets(ctx)
	if err != nil {
		return err
	}
	latest := map[string]*unstructured.Unstructured{}
	for _, t := range ordered(targets, phase) {
		key := targetKey(t)
		obj := cmp.Or(latest[key], t.obj)
		now, err := fn(t.rule, t.client, obj)
		if err != nil {
			return fmt.Errorf("quiesce %s %s/%s: %w", t.rule.Resource, obj.GetNamespace(), obj.GetName(), err)
		}
		latest[key] = now
	}
	return nil
}

// targets lists the objects the rules select, rule by rule; a rule of a type the cluster does not
// serve selects nothing (logged).
func (q Quiescer) targets(ctx context.Context) ([]target, error) {
	var out []target
	for _, rule := range q.Rules {
		gvr, namespaced, err := q.resolve(rule.Resource)
		if err != nil {
			q.Log.Info("quiesce: resource not served here", "resource", rule.Resource, "error", err)
			continue
		}
		ns := rule.Namespace
		if ns != "" && q.Namespace != nil {
			ns = q.Namespace(ns)
		}
		var lister dynamic.ResourceInterface = q.Dynamic.Resource(gvr)
		if namespaced && ns != "" {
			lister = q.Dynamic.Resource(gvr).Namespace(ns)
		}
		list, err := lister.List(ctx, metav1.ListOptions{LabelSelector: rule.LabelSelector})
		if err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("quiesce %s: %w", rule.Resource, err)
		}
		for i := range list.Items {
			obj := &list.Items[i]
			if len(rule.Names) > 0 && !slices.Contains(rule.Names, obj.GetName()) {
				continue
			}
			out = append(out, target{rule: rule, client: q.Dynamic.Resource(gvr).Namespace(obj.GetNamespace()), obj: obj})
		}
	}
	paused, err := q.pausedAutoscalers(ctx, out)
	if err != nil {
		return nil, err
	}
	out = append(out, paused...)
	return append(out, q.pausedManagers(ctx, out)...), nil
}

// kedaPausedReplicas is the annotation that has KEDA scale a ScaledObject's workload to the
// replicas it holds and stop scaling it until it is removed.
const kedaPausedReplicas = "autoscaling.keda.sh/paused-replicas"

// pausedAutoscalers are the KEDA ScaledObjects that scale a workload one of targets' rules scales
// to zero, each with a rule that pauses it at zero replicas: KEDA scales a workload from zero as
// soon as events wait (a queue's messages), starting the writer again while its data moves. An
// HorizontalPodAutoscaler leaves a workload at zero alone. A ScaledObject a rule already selects
// is that rule's; a cluster that does not serve the type has none.
func (q Quiescer) pausedAutoscalers(ctx context.Context, targets []target) ([]target, error) {
	const resource = "scaledobjects.keda.sh"
	scaled := map[string][]*unstructured.Unstructured{} // namespace -> workloads scaled to zero
	selected := map[string]bool{}
	for _, t := range targets {
		if t.rule.Action == ScaleToZero {
			scaled[t.obj.GetNamespace()] = append(scaled[t.obj.GetNamespace()], t.obj)
		}
		selected[targetKey(t)] = true
	}
	if len(scaled) == 0 {
		return nil, nil
	}
	gvr, _, err := q.resolve(resource)
	if err != nil {
		return nil, nil // not served
	}
	var out []target
	for _, ns := range slices.Sorted(maps.Keys(scaled)) {
		list, err := q.Dynamic.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			// Not fatal: Start must not fail for it, and a writer KEDA starts again while it
			// should be stopped is found (Stop's wait, Held) and stops the run.
			q.Log.Warn("quiesce: KEDA's ScaledObjects cannot be listed: none is paused with the workloads it scales (ferry's user needs list and patch on them)",
				"namespace", ns, "error", err)
			continue
		}
		for i := range list.Items {
			so := &list.Items[i]
			workload := scaledWorkload(so, scaled[ns])
			if workload == nil || selected[targetKey(target{obj: so})] || slices.Contains(q.Later, objectName(workload)) {
				continue // none, a rule's, or left stopped with a workload Start leaves stopped
			}
			rule := config.QuiesceRule{Resource: resource, Namespace: ns, Names: []string{so.GetName()}, Action: Annotate,
				Annotations: map[string]string{kedaPausedReplicas: "0"},
				Why:         "KEDA would scale " + strings.ToLower(workload.GetKind()) + " " + workload.GetName() + " up again: paused at zero replicas"}
			out = append(out, target{rule: rule, client: q.Dynamic.Resource(gvr).Namespace(ns), obj: so, pauses: true})
		}
	}
	return out, nil
}

// scaledWorkload is the one of workloads a KEDA ScaledObject scales (its scaleTargetRef: a
// Deployment unless it names another kind), or nil.
func scaledWorkload(so *unstructured.Unstructured, workloads []*unstructured.Unstructured) *unstructured.Unstructured {
	ref, _, _ := unstructured.NestedStringMap(so.Object, "spec", "scaleTargetRef")
	kind := cmp.Or(ref["kind"], "Deployment")
	group := schema.FromAPIVersionAndKind(cmp.Or(ref["apiVersion"], "apps/v1"), kind).Group
	for _, w := range workloads {
		if w.GetName() == ref["name"] && w.GetKind() == kind && w.GroupVersionKind().Group == group {
			return w
		}
	}
	return nil
}

// objectName names obj as reports do: "apiVersion Kind namespace/name".
func objectName(obj *unstructured.Unstructured) string {
	return obj.GetAPIVersion() + " " + obj.GetKind() + " " + path.Join(obj.GetNamespace(), obj.GetName())
}

func targetKey(t target) string {
	return t.obj.GetAPIVersion() + "/" + t.obj.GetKind() + "/" + t.obj.GetNamespace() + "/" + t.obj.GetName()
}

// ordered puts the objects whose first rule scales them to zero last when stopping and first
// when starting, keeping the order of the rest and each object's rules in their order (its first
// rule is the one that stops it); an autoscaler's pause comes first either way. A GitOps object
// is paused before everything, the farthest from the writers first, and resumed after, the
// nearest first: none applies a writer, or another's pause, while the rest change.
func ordered(targets []target, phase phase) []target {
	scaled := map[string]bool{}
	for _, t := range targets {
		if _, seen := scaled[targetKey(t)]; !seen {
			scaled[targetKey(t)] = t.rule.Action == ScaleToZero
		}
	}
	rank := func(t target) int {
		switch {
		case t.manages > 0 && phase == stopping:
			return -t.manages
		case t.manages > 0:
			return 2 + t.manages
		case t.pauses:
			return 0
		case scaled[targetKey(t)] == (phase == starting):
			return 1
		}
		return 2
	}
	out := slices.Clone(targets)
	slices.SortStableFunc(out, func(a, b target) int { return rank(a) - rank(b) })
	return out
}

// patch applies a merge patch, and again while an admission webhook's server cannot be called,
// for up to wait: Start's, as a workload it scaled up moments before may be that server. Stop
// waits for none: with objects changed before workloads are stopped, no server it waits for
// would start.
func (q Quiescer) patch(ctx context.Context, client dynamic.ResourceInterface, name string, patch []byte, wait time.Duration) (*unstructured.Unstructured, error) {
	var out *unstructured.Unstructured
	said := false
	err := kube.RetryWhile(ctx, wait, func(err error) bool {
		unreachable := kube.WebhookUnreachable(err)
		if unreachable && !said && wait > 0 {
			q.Log.Info("waiting for an admission webhook's server to take the change", "name", name, "error", err)
			said = true
		}
		return unreachable
	}, func() (err error) {
		out, err = client.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "ferry"})
		return err
	})
	return out, err
}

func (q Quiescer) resolve(resource string) (schema.GroupVersionResource, bool, error) {
	gr := schema.ParseGroupResource(resource)
	gvr, err := q.Mapper.ResourceFor(gr.WithVersion(""))
	if err != nil {
		return gvr, false, err
	}
	gvk, err := q.Mapper.KindFor(gvr)
	if err != nil {
		return gvr, false, err
	}
	mapping, err := q.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return gvr, false, err
	}
	return gvr, mapping.Scope.Name() == meta.RESTScopeNameNamespace, nil
}

// quiescePatch is the merge patch that stops obj by the rule, and the record that undoes it.
func quiescePatch(rule config.QuiesceRule, obj *unstructured.Unstructured) (original, []byte, error) {
	orig := original{Action: rule.Action}
	var patch map[string]any
	switch rule.Action {
	case ScaleToZero:
		replicas, found, _ := unstructured.NestedInt64(obj.Object, "spec", "replicas")
		if !found {
			replicas = 1
		}
		orig.Replicas = &replicas
		patch = map[string]any{"spec": map[string]any{"replicas": 0}}
	case Suspend:
		suspend, _, _ := unstructured.NestedBool(obj.Object, "spec", "suspend")
		orig.Suspend = &suspend
		patch = map[string]any{"spec": map[string]any{"suspend": true}}
	case Annotate:
		annotations := map[string]any{}
		undo := map[string]any{}
		current := obj.GetAnnotations()
		for k, v := range rule.Annotations {
			annotations[k] = v
			if old, ok := current[k]; ok {
				undo[k] = old
			} else {
				undo[k] = nil
			}
		}
		patch = map[string]any{"metadata": map[string]any{"annotations": annotations}}
		orig.Undo, _ = json.Marshal(map[string]any{"metadata": map[string]any{"annotations": undo}})
	case Patch:
		if err := json.Unmarshal([]byte(rule.Patch), &patch); err != nil {
			return orig, nil, fmt.Errorf("patch %q: %w", rule.Patch, err)
		}
		orig.Undo, _ = json.Marshal(inverse(patch, obj.Object))
	default:
		return orig, nil, fmt.Errorf("quiesce action %q: want %s, %s, %s or %s", rule.Action, ScaleToZero, Suspend, Annotate, Patch)
	}
	if keepsClaimsWhileStopped(obj, patch) {
		patch = merge(patch, whenScaled("Retain"))
		undo := whenScaled("Delete")
		var err error
		if len(orig.Undo) == 0 {
			orig.Undo, err = json.Marshal(undo)
		} else {
			orig.Undo, err = mergePatches(orig.Undo, undo)
		}
		if err != nil {
			return orig, nil, err
		}
	}
	data, err := json.Marshal(patch)
	return orig, data, err
}

// keepsClaims says whether the record puts back a StatefulSet's whenScaled: Delete.
func (o original) keepsClaims() bool {
	var undo map[string]any
	if json.Unmarshal(o.Undo, &undo) != nil {
		return false
	}
	whenScaled, _, _ := unstructured.NestedString(undo, "spec", "persistentVolumeClaimRetentionPolicy", "whenScaled")
	return whenScaled == "Delete"
}

// whenScaled is the merge patch that sets a StatefulSet's persistentVolumeClaimRetentionPolicy
// whenScaled to policy.
func whenScaled(policy string) map[string]any {
	return map[string]any{"spec": map[string]any{"persistentVolumeClaimRetentionPolicy": map[string]any{"whenScaled": policy}}}
}

// keepClaimsInRecord adds to patch, which stops a writer again, the record's undo of the
// whenScaled: Retain it now sets (orig), when the record has none: one an older ferry wrote, or
// one written when the set kept its claims.
func keepClaimsInRecord(record string, orig original, patch []byte) ([]byte, error) {
	var was original
	if !orig.keepsClaims() || json.Unmarshal([]byte(record), &was) != nil || was.keepsClaims() {
		return patch, nil
	}
	var err error
	if len(was.Undo) == 0 {
		was.Undo = orig.Undo
	} else if was.Undo, err = mergePatches(was.Undo, whenScaled("Delete")); err != nil {
		return nil, err
	}
	updated, err := json.Marshal(was)
	if err != nil {
		return nil, err
	}
	return mergePatches(patch, map[string]any{"metadata": map[string]any{"annotations": map[string]any{QuiescedAnnotation: string(updated)}}})
}

// keepsClaimsWhileStopped says whether patch scales down a StatefulSet that deletes the claims
// of the replicas it removes (persistentVolumeClaimRetentionPolicy whenScaled: Delete): at zero,
// all of them, with blue's copy of the data that moves, before the backup reads it. Such a set
// is stopped with whenScaled: Retain beside its replicas, and started again with Delete. A custom
// resource with the same field (an operator's, which passes it on to its StatefulSet) is too.
func keepsClaimsWhileStopped(obj *unstructured.Unstructured, patch map[string]any) bool {
	if whenScaled, _, _ := unstructured.NestedString(obj.Object, "spec", "persistentVolumeClaimRetentionPolicy", "whenScaled"); whenScaled != "Delete" {
		return false
	}
	spec, _ := patch["spec"].(map[string]any)
	var to float64
	switch v := spec["replicas"].(type) {
	case int:
		to = float64(v)
	case float64: // a patch rule's JSON
		to = v
	default:
		return false
	}
	from, found, _ := unstructured.NestedInt64(obj.Object, "spec", "replicas")
	if !found {
		from = 1
	}
	return to < float64(from)
}

// inverse is the merge patch that puts back, in current, every field patch changes.
func inverse(patch, current map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range patch {
		cur, ok := current[k]
		sub, isMap := v.(map[string]any)
		curMap, curIsMap := cur.(map[string]any)
		switch {
		case !ok:
			out[k] = nil
		case isMap && curIsMap:
			out[k] = inverse(sub, curMap)
		default:
			out[k] = cur
		}
	}
	return out
}

// undoPatch is the JSON merge patch that starts an object again from its quiesce record, and
// the action it undoes.
func undoPatch(record string) ([]byte, string, error) {
	var orig original
	if err := json.Unmarshal([]byte(record), &orig); err != nil {
		return nil, "", fmt.Errorf("annotation %s: %w", QuiescedAnnotation, err)
	}
	undo := map[string]any{"metadata": map[string]any{"annotations": map[string]any{QuiescedAnnotation: nil}}}
	switch orig.Action {
	case ScaleToZero:
		undo["spec"] = map[string]any{"replicas": orig.Replicas}
	case Suspend:
		undo["spec"] = map[string]any{"suspend": orig.Suspend}
	}
	patch, err := json.Marshal(undo)
	if err != nil {
		return nil, "", err
	}
	if len(orig.Undo) > 0 {
		if patch, err = mergePatches(orig.Undo, undo); err != nil {
			return nil, "", err
		}
	}
	return patch, orig.Action, nil
}

// startedForm is obj as Start leaves it: with its quiesce record undone, or obj itself.
func startedForm(obj map[string]any) map[string]any {
	record, ok := (&unstructured.Unstructured{Object: obj}).GetAnnotations()[QuiescedAnnotation]
	if !ok {
		return obj
	}
	if exempted(obj) {
		if started, err := unexempt(obj); err == nil {
			return started
		}
		return obj
	}
	patch, _, err := undoPatch(record)
	if err != nil {
		return obj
	}
	doc, err := json.Marshal(obj)
	if err != nil {
		return obj
	}
	merged, err := jsonpatch.MergePatch(doc, patch)
	if err != nil {
		return obj
	}
	var out map[string]any
	if json.Unmarshal(merged, &out) != nil {
		return obj
	}
	return out
}

// mergePatches merges JSON merge patch b into a (b wins).
func mergePatches(a []byte, b map[string]any) ([]byte, error) {
	var am map[string]any
	if err := json.Unmarshal(a, &am); err != nil {
		return nil, err
	}
	return json.Marshal(merge(am, b))
}

func merge(a, b map[string]any) map[string]any {
	if a == nil {
		a = map[string]any{}
	}
	for k, v := range b {
		if vm, ok := v.(map[string]any); ok {
			if am, ok := a[k].(map[string]any); ok {
				a[k] = merge(am, vm)
				continue
			}
		}
		a[k] = v
	}
	return a
}
