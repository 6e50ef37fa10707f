package plans

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/ferrykube/ferry/plans/config"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

var (
	resourceQuotasGVR = schema.GroupVersionResource{Version: "v1", Resource: "resourcequotas"}
	limitRangesGVR    = schema.GroupVersionResource{Version: "v1", Resource: "limitranges"}
)

// Movers is how many mover pods run at once in each namespace: one per claim (given by its
// namespace), at most parallel.
func Movers(claimNamespaces []string, parallel int) map[string]int {
	if parallel <= 0 {
		parallel = 4
	}
	out := map[string]int{}
	for _, ns := range claimNamespaces {
		if out[ns] < parallel {
			out[ns]++
		}
	}
	return out
}

// FileClaims are the namespaces of the plan's claims whose files move (one entry per claim),
// each renamed by mapNS when it is set.
func (p *Plan) FileClaims(mapNS func(string) string) []string {
	var out []string
	for _, v := range p.Volumes {
		if v.FilesUnread() != "" {
			continue
		}
		ns := v.Namespace
		if mapNS != nil {
			ns = mapNS(ns)
		}
		out = append(out, ns)
	}
	return out
}

// PreflightQuotas adds the quota findings for the plan's mover pods, parallel at most at once:
// a backup's on source and, when target is set, a restore's on target (namespaces it lacks yet
// are judged by the source's); and there the quotas that would refuse part of what the restore
// makes (restoreQuotaFindings).
func PreflightQuotas(ctx context.Context, p *Plan, source Clients, target *Clients, parallel int) error {
	findings, err := QuotaCheck{Dynamic: source.Dynamic, Cluster: "source", Mover: p.Config.Mover}.Check(ctx, Movers(p.FileClaims(nil), parallel))
	if err != nil {
		return err
	}
	p.Findings = append(p.Findings, findings...)
	if target == nil {
		return nil
	}
	back := map[string]string{}
	for from, to := range p.Config.NamespaceMap {
		back[to] = from
	}
	q := QuotaCheck{Dynamic: target.Dynamic, Cluster: "target", Mover: p.Config.Mover, Source: source.Dynamic,
		SourceNamespace: func(ns string) string {
			if from, ok := back[ns]; ok {
				return from
			}
			return ns
		}}
	findings, err = q.Check(ctx, Movers(p.FileClaims(p.Config.MapNamespace), parallel))
	if err != nil {
		return err
	}
	p.Findings = append(p.Findings, findings...)
	findings, err = restoreQuotaFindings(ctx, p, source, *target)
	if err != nil {
		return err
	}
	p.Findings = append(p.Findings, findings...)
	return nil
}

// unscoped says whether quota counts everything of its namespace.
func unscoped(quota corev1.ResourceQuota) bool {
	return len(quota.Spec.Scopes) == 0 && (quota.Spec.ScopeSelector == nil || len(quota.Spec.ScopeSelector.MatchExpressions) == 0)
}

// QuotaCheck finds the namespaces whose ResourceQuotas leave no room for the mover pods ferry
// will start there: a pod the quota refuses fails its claim, so this is found before anything runs.
type QuotaCheck struct {
	// Dynamic reaches the cluster the movers run on.
	Dynamic dynamic.Interface
	// Cluster names it in findings ("source", "target").
	Cluster string
	Mover   config.Mover
	// Source, when set, stands in for namespaces the cluster does not have yet (a migration's
	// restore makes them from the source's objects, quotas included): their quotas and ranges are
	// read from namespace SourceNamespace(ns) there, with the source's usage, which the restored
	// workloads repeat.
	Source          dynamic.Interface
	SourceNamespace func(string) string
}

// Check returns a blocking finding for each quota of need's namespaces (how many movers each)
// that lacks room for them, naming the quota and each resource short.
func (q QuotaCheck) Check(ctx context.Context, need map[string]int) ([]Finding, error) {
	var findings []Finding
	namespaces := make([]string, 0, len(need))
	for ns := range need {
		namespaces = append(namespaces, ns)
	}
	sort.Strings(namespaces)
	for _, ns := range namespaces {
		dyn, from := q.Dynamic, ns
		if q.Source != nil {
			_, err := q.Dynamic.Resource(namespacesGVR).Get(ctx, ns, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				dyn, from = q.Source, q.SourceNamespace(ns)
			case err != nil:
				return nil, fmt.Errorf("%s: get namespace %s: %w", q.Cluster, ns, err)
			}
		}
		var quotas []corev1.ResourceQuota
		if err := listTyped(ctx, dyn, resourceQuotasGVR, from, &quotas); err != nil {
			return nil, fmt.Errorf("%s: %w", q.Cluster, err)
		}
		if len(quotas) == 0 {
			continue
		}
		var ranges []corev1.LimitRange
		if err := listTyped(ctx, dyn, limitRangesGVR, from, &ranges); err != nil {
			return nil, fmt.Errorf("%s: %w", q.Cluster, err)
		}
		pod := q.Mover.PodResources(ranges)
		for _, quota := range quotas {
			if msg := shortOf(quota, pod, q.Mover.PriorityClassName, ranges, need[ns]); msg != "" {
				findings = append(findings, Finding{Severity: Blocking, Subject: fmt.Sprintf("resourcequota %s/%s", ns, quota.Name),
					Message: fmt.Sprintf("on the %s, %s; free room in the namespace, raise the quota, or set smaller mover.resources in ferry.yaml", q.Cluster, msg)})
			}
		}
	}
	return findings, nil
}

func listTyped[T any](ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource, ns string, out *[]T) error {
	list, err := dyn.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list %s in %s: %w", gvr.Resource, ns, err)
	}
	for _, item := range list.Items {
		var obj T
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(item.Object, &obj); err != nil {
			return fmt.Errorf("%s %s/%s: %w", gvr.Resource, ns, item.GetName(), err)
		}
		*out = append(*out, obj)
	}
	return nil
}

// shortOf says what the quota lacks for n mover pods shaped pod, or "" when they fit: the
// resources whose hard limit minus usage is smaller than what the movers take, and compute
// resources the quota tracks that the movers set no value for (the quota then refuses them).
func shortOf(quota corev1.ResourceQuota, pod corev1.ResourceRequirements, priorityClass string, ranges []corev1.LimitRange, n int) string {
	if n <= 0 || !quotaMatches(quota, priorityClass) {
		return ""
	}
	var short, unset []string
	names := make([]string, 0, len(quota.Spec.Hard))
	for name := range quota.Spec.Hard {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for _, name := range names {
		hard := quota.Spec.Hard[corev1.ResourceName(name)]
		per, tracked := perMover(name, pod)
		if !tracked {
			continue
		}
		if per == nil {
			if !rangeDefaults(ranges, name) {
				unset = append(unset, name)
			}
			continue
		}
		want := per.DeepCopy()
		for i := 1; i < n; i++ {
			want.Add(*per)
		}
		used := quota.Status.Used[corev1.ResourceName(name)]
		left := hard.DeepCopy()
		left.Sub(used)
		if left.Cmp(want) < 0 {
			if left.Sign() < 0 {
				left = resource.Quantity{}
			}
			short = append(short, fmt.Sprintf("%s %s but only %s is left (hard %s, used %s)", name, want.String(), left.String(), hard.String(), used.String()))
		}
	}
	var parts []string
	if len(short) > 0 {
		parts = append(parts, fmt.Sprintf("%s need %s", moverPods(n), strings.Join(short, "; ")))
	}
	if len(unset) > 0 {
		parts = append(parts, fmt.Sprintf("the quota tracks %s, which mover pods do not set (set mover.resources in ferry.yaml)", strings.Join(unset, ", ")))
	}
	return strings.Join(parts, "; ")
}

func moverPods(n int) string {
	if n == 1 {
		return "1 mover pod would"
	}
	return fmt.Sprintf("%d mover pods at once", n)
}

// perMover is what one mover pod counts against a quota's resource: nil when the pod sets no
// value for a compute resource the quota tracks; tracked is false for resources pods do not use.
func perMover(name string, pod corev1.ResourceRequirements) (per *resource.Quantity, tracked bool) {
	one := resource.MustParse("1")
	switch name {
	case "pods", "count/pods":
		return &one, true
	}
	list, base := pod.Requests, name
	switch {
	case strings.HasPrefix(name, "requests."):
		base = strings.TrimPrefix(name, "requests.")
	case strings.HasPrefix(name, "limits."):
		list, base = pod.Limits, strings.TrimPrefix(name, "limits.")
	}
	if !slices.Contains(config.MoverResourceNames, base) && !strings.HasPrefix(base, "hugepages-") {
		return nil, false
	}
	q, ok := list[corev1.ResourceName(base)]
	if !ok {
		if strings.HasPrefix(base, "hugepages-") {
			return nil, false // a pod without hugepages is not refused for them
		}
		return nil, true
	}
	return &q, true
}

// rangeDefaults reports whether a LimitRange gives containers a default for the quota resource
// name, which then fills in what the mover does not set.
func rangeDefaults(ranges []corev1.LimitRange, name string) bool {
	base := strings.TrimPrefix(strings.TrimPrefix(name, "requests."), "limits.")
	for _, lr := range ranges {
		for _, item := range lr.Spec.Limits {
			if item.Type != corev1.LimitTypeContainer {
				continue
			}
			list := item.DefaultRequest
			if strings.HasPrefix(name, "limits.") {
				list = item.Default
			}
			if _, ok := list[corev1.ResourceName(base)]; ok {
				return true
			}
			if _, ok := item.Default[corev1.ResourceName(base)]; ok { // the request defaults to the limit
				return true
			}
		}
	}
	return false
}

// quotaMatches reports whether the quota's scopes take in a mover pod: not terminating (no
// deadline), not best effort (it has requests), in priority class priorityClass.
func quotaMatches(quota corev1.ResourceQuota, priorityClass string) bool {
	scopes := slices.Clone(quota.Spec.Scopes)
	var exprs []corev1.ScopedResourceSelectorRequirement
	if quota.Spec.ScopeSelector != nil {
		exprs = quota.Spec.ScopeSelector.MatchExpressions
	}
	for _, e := range exprs {
		if e.ScopeName != corev1.ResourceQuotaScopePriorityClass {
			scopes = append(scopes, e.ScopeName)
			continue
		}
		in := slices.Contains(e.Values, priorityClass)
		switch e.Operator {
		case corev1.ScopeSelectorOpIn:
			if !in {
				return false
			}
		case corev1.ScopeSelectorOpNotIn:
			if in {
				return false
			}
		case corev1.ScopeSelectorOpExists:
			if priorityClass == "" {
				return false
			}
		case corev1.ScopeSelectorOpDoesNotExist:
			if priorityClass != "" {
				return false
			}
		}
	}
	for _, s := range scopes {
		switch s {
		case corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeBestEffort, corev1.ResourceQuotaScopeCrossNamespacePodAffinity:
			return false
		}
	}
	return true
}
