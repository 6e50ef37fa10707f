package plans

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// restoreQuotaFindings are blocking findings for the target's quotas that would refuse part of
// what the restore makes in a namespace. Kubernetes checks a quota only when an object is made,
// so a namespace may hold more than its quota allows (the quota was set, or lowered, after). The
// quotas a restore makes itself come after everything they count (rules.WaveQuotas); these are
// the ones there before: the target namespace's own, and, for a namespace the target lacks yet,
// the source's quotas that an object the plan moves controls (a Kubeflow Profile's controller
// makes its namespace's quota as soon as the restore makes the Profile, before the namespace's
// claims and objects come). Only what a restore makes is judged (objects by count, claims by
// count and storage), from what the source's quotas count, capped by what the plan moves
// (excluded objects are not made): a floor, so a finding is never a guess. Compute resources
// are left: the target's controllers make the pods.
func restoreQuotaFindings(ctx context.Context, p *Plan, source, target Clients) ([]Finding, error) {
	var findings []Finding
	for _, ns := range namespacesMoved(p) {
		var sourceQuotas []corev1.ResourceQuota
		if err := listTyped(ctx, source.Dynamic, resourceQuotasGVR, ns, &sourceQuotas); err != nil {
			return nil, fmt.Errorf("source: %w", err)
		}
		made := restoredUsage(p, ns, sourceQuotas)
		if len(made) == 0 {
			continue
		}
		to := p.Config.MapNamespace(ns)
		_, err := target.Dynamic.Resource(namespacesGVR).Get(ctx, to, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			for _, q := range sourceQuotas {
				owner := metav1.GetControllerOfNoCopy(&q)
				if owner == nil || !p.moves(owner) {
					continue // the restore makes it, after what it counts
				}
				by := strings.ToLower(owner.Kind) + " " + owner.Name
				if over := overQuota(q, made, nil); over != "" { // made there anew
					findings = append(findings, Finding{Severity: Blocking, Subject: fmt.Sprintf("resourcequota %s/%s", to, q.Name),
						Message: fmt.Sprintf("made on the target by the controller of %s as soon as the restore makes it, before the namespace's objects, it allows less than namespace %s holds on the source (%s): "+
							"the objects beyond it would be refused; raise the quota (in %s) first", by, ns, over, by)})
				}
			}
		case err != nil:
			return nil, fmt.Errorf("target: get namespace %s: %w", to, err)
		case p.Upgrade != nil:
			// Green's release has the namespace: blue's release's objects there, which the
			// source's quotas count, do not move.
		default:
			var quotas []corev1.ResourceQuota
			if err := listTyped(ctx, target.Dynamic, resourceQuotasGVR, to, &quotas); err != nil {
				return nil, fmt.Errorf("target: %w", err)
			}
			for _, q := range quotas {
				if over := overQuota(q, made, q.Status.Used); over != "" {
					findings = append(findings, Finding{Severity: Blocking, Subject: fmt.Sprintf("resourcequota %s/%s", to, q.Name),
						Message: fmt.Sprintf("on the target, it allows less than namespace %s holds on the source (%s): the objects beyond it would be refused; raise the quota on the target first", ns, over)})
				}
			}
		}
	}
	return findings, nil
}

// restoredUsage is what the restore makes in namespace ns as the source's unscoped quotas count
// it, by canonical resource name (quotaName) in the target's storage classes: object counts at
// most the plan's count of their type there, claims at most the plan's claims and their
// capacities there. Resources a restore does not make (pods, compute) are left out.
func restoredUsage(p *Plan, ns string, quotas []corev1.ResourceQuota) corev1.ResourceList {
	planned := map[string]*resource.Quantity{}
	add := func(name string, q resource.Quantity) {
		if planned[name] == nil {
			planned[name] = resource.NewQuantity(0, q.Format)
		}
		planned[name].Add(q)
	}
	count := func(name string, n int64) { add(name, *resource.NewQuantity(n, resource.DecimalSI)) }
	for _, r := range p.Resources {
		if c := r.Namespaces[ns].Count; c > 0 && r.GroupResource() != "pods" {
			count("count/"+r.GroupResource(), int64(c))
		}
	}
	for _, v := range p.Volumes {
		if v.Namespace != ns {
			continue
		}
		size, err := resource.ParseQuantity(v.Capacity)
		if err != nil {
			continue
		}
		class := v.StorageClass
		if to := p.Config.StorageClassMap[class]; to != "" {
			class = to
		}
		// The claims' count is the persistentvolumeclaims resource's, above; by class it is here.
		add("requests.storage", size)
		if class != "" {
			count(class+".storageclass.storage.k8s.io/count/persistentvolumeclaims", 1)
			add(class+".storageclass.storage.k8s.io/requests.storage", size)
		}
	}
	out := corev1.ResourceList{}
	for _, q := range quotas {
		if !unscoped(q) {
			continue
		}
		for name, used := range q.Status.Used {
			canon := quotaName(string(name), p.Config.StorageClassMap)
			limit := planned[canon]
			if strings.HasPrefix(canon, "count/services.") { // loadbalancers, nodeports
				limit = planned["count/services"]
			}
			if limit == nil {
				continue // nothing of it moves, or the restore does not make it
			}
			if used.Cmp(*limit) > 0 {
				used = limit.DeepCopy()
			}
			if cur, ok := out[corev1.ResourceName(canon)]; !ok || used.Cmp(cur) > 0 {
				out[corev1.ResourceName(canon)] = used
			}
		}
	}
	return out
}

// quotaName is a quota's resource name in one form for what two names count alike
// ("services" and "count/services"), its storage class mapped by classes.
func quotaName(name string, classes map[string]string) string {
	const classSuffix = ".storageclass.storage.k8s.io/"
	if class, rest, ok := strings.Cut(name, classSuffix); ok {
		if to, mapped := classes[class]; mapped && to != "" {
			class = to
		}
		return class + classSuffix + quotaName(rest, nil)
	}
	switch name {
	case "services", "secrets", "configmaps", "persistentvolumeclaims", "replicationcontrollers", "resourcequotas":
		return "count/" + name
	case "services.loadbalancers", "services.nodeports":
		return "count/" + name
	}
	return name
}

// overQuota names the resources of quota (in the target's storage classes) whose hard limit is
// below made (what the restore makes, by quotaName), or "" when there are none or the quota has
// scopes. Where the target already counts as much (counted: a restore that ran before), nothing
// more is refused.
func overQuota(quota corev1.ResourceQuota, made, counted corev1.ResourceList) string {
	if !unscoped(quota) {
		return ""
	}
	var over []string
	for name, hard := range quota.Spec.Hard {
		want, ok := made[corev1.ResourceName(quotaName(string(name), nil))]
		if !ok || want.Cmp(hard) <= 0 {
			continue
		}
		if used, ok := counted[name]; ok && used.Cmp(want) >= 0 {
			continue
		}
		over = append(over, fmt.Sprintf("%s %s, the quota allows %s", name, want.String(), hard.String()))
	}
	sort.Strings(over)
	return strings.Join(over, "; ")
}

// moves says whether the plan moves objects of owner's type (its controller is then made on
// the target, and makes what it controls there).
func (p *Plan) moves(owner *metav1.OwnerReference) bool {
	gv, err := schema.ParseGroupVersion(owner.APIVersion)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(p.Resources, func(r Resource) bool { return r.Group == gv.Group && r.Kind == owner.Kind && r.Count > 0 })
}

// namespacesMoved are the namespaces whose objects the plan moves, the cluster's own ones
// (default, or kube-system when named) too, and its tenants', sorted.
func namespacesMoved(p *Plan) []string {
	seen := map[string]bool{}
	for _, r := range p.Resources {
		for ns := range r.Namespaces {
			seen[ns] = true
		}
	}
	for _, t := range p.Tenants {
		seen[t.Namespace] = true
	}
	return slices.Sorted(maps.Keys(seen))
}
