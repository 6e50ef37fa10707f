package migrate

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot/kinds"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// scaledJobsResource is KEDA's type of object that runs a Job for events as they come.
const scaledJobsResource = "scaledjobs.keda.sh"

// rolloutsResource is Argo Rollouts' workload: a Deployment that shifts its pods to a new
// ReplicaSet by steps (canary, blue-green), and scales to zero as one does.
const rolloutsResource = "rollouts.argoproj.io"

// WriterRules are the quiesce rules a plan implies beyond ferry.yaml's: stop the workloads whose
// pods mount a claim whose files move (Deployments, StatefulSets, Argo Rollouts and ReplicaSets of
// no controller scaled to zero, Jobs of no controller suspended, KEDA ScaledJobs paused), and suspend every
// CronJob of the moved namespaces.
// A configured database's or bucket's workload is never among them: its claims move as a dump or
// copy made through its running pod. A writer of another kind (a pod an operator runs, or one run
// by hand) is for ferry.yaml's rules; UnstoppedWriters names those no rule stops.
func WriterRules(ctx context.Context, dyn dynamic.Interface, plan *plans.Plan) ([]config.QuiesceRule, error) {
	byWorkload := map[[2]string][]string{} // resource, namespace -> names
	serving := dataWorkloads(plan.Config)
	for _, v := range plan.Volumes {
		if v.Holds != "" {
			continue
		}
		for _, use := range v.Pods {
			pod, err := dyn.Resource(kube.PodsGVR).Namespace(v.Namespace).Get(ctx, use.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("writers of claim %s/%s: %w", v.Namespace, v.Name, err)
			}
			resource, name, err := workloadOf(ctx, dyn, pod)
			if err != nil {
				return nil, fmt.Errorf("writers of claim %s/%s: %w", v.Namespace, v.Name, err)
			}
			key := [2]string{resource, v.Namespace}
			if resource != "" && !serving[[3]string{resource, v.Namespace, name}] && !slices.Contains(byWorkload[key], name) {
				byWorkload[key] = append(byWorkload[key], name)
			}
		}
	}
	var rules []config.QuiesceRule
	for key, names := range byWorkload {
		slices.Sort(names)
		rule := config.QuiesceRule{Resource: key[0], Namespace: key[1], Names: names, Action: ScaleToZero, Why: "writes to a claim whose files move"}
		switch key[0] {
		case "jobs.batch":
			rule.Action = Suspend
		case scaledJobsResource:
			// KEDA makes no new Job while it is paused; the quiesce waits for those that run.
			rule.Action, rule.Annotations, rule.WaitForPods = Annotate, map[string]string{"autoscaling.keda.sh/paused": "true"}, true
			rule.Why = "runs jobs that write to a claim whose files move: paused, its running jobs waited for"
		}
		rules = append(rules, rule)
	}
	for _, r := range plan.Resources {
		if r.GroupResource() != "cronjobs.batch" {
			continue
		}
		for ns := range r.Namespaces {
			rules = append(rules, config.QuiesceRule{Resource: "cronjobs.batch", Namespace: ns, Action: Suspend,
				Why: "a scheduled job could write while the data moves"})
		}
	}
	slices.SortFunc(rules, func(a, b config.QuiesceRule) int {
		return strings.Compare(a.Resource+"/"+a.Namespace, b.Resource+"/"+b.Namespace)
	})
	return rules, nil
}

// dataWorkloads are the workloads (resource, namespace, name) of the configured databases and
// buckets.
func dataWorkloads(cfg config.Planning) map[[3]string]bool {
	out := map[[3]string]bool{}
	add := func(namespace, workload string) {
		kind, name, err := config.ParseWorkload(workload)
		if err == nil {
			out[[3]string{kind + "s.apps", namespace, name}] = true
		}
	}
	for _, d := range cfg.Databases {
		add(d.Namespace, d.Workload)
	}
	for _, b := range cfg.Buckets {
		if b.Workload != "" {
			add(b.Namespace, b.Workload)
		}
	}
	return out
}

// workloadOf follows a pod's controllers up to the workload ferry stops for it, if any: its
// Deployment, Argo Rollout or StatefulSet, its ReplicaSet or Job when nothing controls those, the
// KEDA ScaledJob that runs its Job. A Job of a CronJob is left to the CronJob's rule (Stop waits
// for the Jobs it runs); one of another controller (a Trial) would be started again by it.
func workloadOf(ctx context.Context, dyn dynamic.Interface, pod *unstructured.Unstructured) (resource, name string, err error) {
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return "", "", nil
	}
	switch ref.Kind {
	case "StatefulSet":
		return "statefulsets.apps", ref.Name, nil
	case "ReplicaSet", "Job":
		gvr, resource := replicaSetsGVR, "replicasets.apps"
		if ref.Kind == "Job" {
			gvr, resource = jobsGVR, "jobs.batch"
		}
		owner, err := dyn.Resource(gvr).Namespace(pod.GetNamespace()).Get(ctx, ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return "", "", nil
		}
		if err != nil {
			return "", "", err
		}
		switch up := metav1.GetControllerOf(owner); {
		case up == nil:
			return resource, ref.Name, nil
		case up.Kind == "Deployment" && ref.Kind == "ReplicaSet":
			return "deployments.apps", up.Name, nil
		case up.Kind == "Rollout" && ref.Kind == "ReplicaSet" && strings.HasPrefix(up.APIVersion, "argoproj.io/"):
			return rolloutsResource, up.Name, nil
		case up.Kind == "ScaledJob" && ref.Kind == "Job" && strings.HasPrefix(up.APIVersion, "keda.sh/"):
			return scaledJobsResource, up.Name, nil
		}
	}
	return "", "", nil
}

// movedClaims are the claims (namespace/name) whose files the plan's backup reads, in the
// namespaces namespace maps them to (nil: the plan's own).
func movedClaims(plan *plans.Plan, namespace func(string) string) map[string]bool {
	out := map[string]bool{}
	for _, v := range plan.Volumes {
		if v.FilesUnread() != "" {
			continue
		}
		ns := v.Namespace
		if namespace != nil {
			ns = namespace(ns)
		}
		out[ns+"/"+v.Name] = true
	}
	return out
}

// readyToStop stops a run before q stops anything while a writer of claims no rule of q stops
// runs (UnstoppedWriters): what it writes while the data moves, and after, would not reach to;
// remedy says how to go on. It stops it too while the cluster refuses a change Stop would make
// (Refused): Stop would leave some writers stopped and the rest running.
func readyToStop(ctx context.Context, q Quiescer, claims map[string]bool, to, remedy string) error {
	unstopped, err := q.UnstoppedWriters(ctx, claims)
	if err != nil {
		return fmt.Errorf("find the writers of the claims that move: %w", err)
	}
	if len(unstopped) > 0 {
		return fmt.Errorf("writers of claims whose files move that no quiesce rule stops (%d): %s: what they write while the data moves, "+
			"and after, would not reach %s; nothing is stopped yet: %s: %w", len(unstopped), strings.Join(unstopped, "; "), to, remedy, ErrStopped)
	}
	return stopsAll(ctx, q, "the")
}

// stopsAll stops a run before anything is stopped while the cluster (named in messages as
// "the", "green's") refuses a change q's Stop would make (Refused).
func stopsAll(ctx context.Context, q Quiescer, cluster string) error {
	refused, err := q.Refused(ctx)
	if err != nil {
		return fmt.Errorf("try the quiesce as a dry run on %s cluster: %w", cluster, err)
	}
	if len(refused) > 0 {
		return fmt.Errorf("%s cluster refuses what the quiesce would change (%d, tried as a dry run): %s; nothing is stopped yet: "+
			"let the policy that refuses it pass ferry's changes, or stop those writers another way (ferry.yaml's quiesce), then run again: %w",
			cluster, len(refused), strings.Join(refused, "; "), ErrStopped)
	}
	return nil
}

// UnstoppedWriters names, one line each, the pods that may write to one of claims (namespace/name)
// and that no rule of q stops: running, mounting the claim writable, and neither selected by a
// rule nor owned, through their owners, by what one selects. What they write while the data moves,
// and after, would not reach the target: a migration must not begin with them running.
func (q Quiescer) UnstoppedWriters(ctx context.Context, claims map[string]bool) ([]string, error) {
	targets, err := q.targets(ctx)
	if err != nil {
		return nil, err
	}
	stopped := map[types.UID]bool{}
	for _, t := range targets {
		stopped[t.obj.GetUID()] = true
	}
	namespaces := map[string]bool{}
	for claim := range claims {
		ns, _, _ := strings.Cut(claim, "/")
		namespaces[ns] = true
	}
	var out []string
	owners := ownerCache{}
	for _, ns := range slices.Sorted(maps.Keys(namespaces)) {
		pods, err := q.Dynamic.Resource(kube.PodsGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("pods of namespace %s: %w", ns, err)
		}
		for i := range pods.Items {
			pod := &pods.Items[i]
			phase, _, _ := unstructured.NestedString(pod.Object, "status", "phase")
			if phase == "Succeeded" || phase == "Failed" || pod.GetDeletionTimestamp() != nil || stopped[pod.GetUID()] {
				continue
			}
			written := writableClaims(pod, claims)
			if len(written) == 0 {
				continue
			}
			owned, err := q.ownedByAny(ctx, pod, stopped, owners)
			if err != nil {
				return nil, err
			}
			if owned {
				continue
			}
			runBy := "run by hand"
			if ref := metav1.GetControllerOf(pod); ref != nil {
				runBy = "run by " + ref.Kind + " " + ref.Name
			}
			out = append(out, fmt.Sprintf("pod %s/%s (%s) writes to claim %s", ns, pod.GetName(), runBy, strings.Join(written, ", ")))
		}
	}
	return out, nil
}

// writableClaims are the claims of claims (namespace/name) pod mounts writable: its volume of the
// claim is not read-only, nor is every mount of it.
func writableClaims(pod *unstructured.Unstructured, claims map[string]bool) []string {
	var p corev1.Pod
	if runtime.DefaultUnstructuredConverter.FromUnstructured(pod.Object, &p) != nil {
		return nil
	}
	var mounts []corev1.VolumeMount
	for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
		mounts = append(mounts, c.VolumeMounts...)
	}
	for _, c := range p.Spec.EphemeralContainers {
		mounts = append(mounts, c.VolumeMounts...)
	}
	var out []string
	for _, v := range p.Spec.Volumes {
		claim := v.PersistentVolumeClaim
		if claim == nil || claim.ReadOnly || !claims[p.Namespace+"/"+claim.ClaimName] {
			continue
		}
		if slices.ContainsFunc(mounts, func(m corev1.VolumeMount) bool { return m.Name == v.Name && !m.ReadOnly }) {
			out = append(out, claim.ClaimName)
		}
	}
	return out
}

// QuiescePlan is what a migration's quiesce would stop on cluster for plan, in the order it would:
// the objects ferry.yaml's rules select, the writers the plan implies (WriterRules), the
// autoscalers and GitOps objects paused with them; each with its action and why. A plan shows it
// so that an operator knows, before a run, what ferry changes on the source.
func QuiescePlan(ctx context.Context, cluster kinds.Cluster, plan *plans.Plan, log *slog.Logger) ([]plans.QuiesceItem, error) {
	implied, err := WriterRules(ctx, cluster.Dynamic, plan)
	if err != nil {
		return nil, err
	}
	q := Quiescer{Dynamic: cluster.Dynamic, Mapper: cluster.Mapper(), Rules: append(slices.Clone(plan.Config.Quiesce), implied...), Log: log}
	targets, err := q.targets(ctx)
	if err != nil {
		return nil, err
	}
	var out []plans.QuiesceItem
	for _, t := range ordered(targets, stopping) {
		out = append(out, plans.QuiesceItem{Resource: t.rule.Resource, Namespace: t.obj.GetNamespace(), Name: t.obj.GetName(), Action: t.rule.Action, Why: t.rule.Why})
	}
	return out, nil
}
