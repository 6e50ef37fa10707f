package plans

import (
	"context"
	"fmt"
	"strings"

	"github.com/ferrykube/ferry/internal/kube"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kubernetes checks a namespace's Pod Security level and its LimitRanges only when a pod is
// made, so a namespace may run pods its policy now refuses: it was labelled restricted, or given
// a LimitRange, after they started. On the target every pod is made anew, under the policy the
// namespace brings (its labels come with it, its LimitRanges before the workloads): those
// workloads would not start there. Admission webhooks are left out: a restore makes them last.

// QuiescedAnnotation holds, on each object a migration's quiesce stopped, what it was before: the
// object runs again on the target.
const QuiescedAnnotation = "ferry.dev/quiesced"

// podTemplates are the workload types whose pods the target makes from a template, and where
// the template is; a pod run by hand is its own.
var podTemplates = map[string][]string{
	"pods":              nil,
	"deployments.apps":  {"spec", "template"},
	"statefulsets.apps": {"spec", "template"},
	"daemonsets.apps":   {"spec", "template"},
	"replicasets.apps":  {"spec", "template"},
	"jobs.batch":        {"spec", "template"},
	"cronjobs.batch":    {"spec", "jobTemplate", "spec", "template"},
}

// PreflightPods adds a blocking finding for each workload of the plan (and each pod run by hand)
// whose pods a namespace's Pod Security level or LimitRanges would refuse on the target. Each
// is tried as a pod created with dryRun=All: in the target's namespace when it has it (in an
// upgrade, green's release's namespaces are left: blue's workloads there do not move), else in
// the source's, whose labels and LimitRanges the restore brings.
func PreflightPods(ctx context.Context, p *Plan, source, target Clients) error {
	filter, err := NewFilter(p.Config)
	if err != nil {
		return err
	}
	for _, ns := range namespacesMoved(p) {
		to := p.Config.MapNamespace(ns)
		try, in := source, ns
		_, err := target.Dynamic.Resource(namespacesGVR).Get(ctx, to, metav1.GetOptions{})
		switch {
		case err == nil && p.Upgrade != nil:
			continue
		case err == nil:
			try, in = target, to
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("target: get namespace %s: %w", to, err)
		}
		for _, r := range p.Resources {
			where, isWorkload := podTemplates[r.GroupResource()]
			if !isWorkload || r.Namespaces[ns].Count == 0 {
				continue
			}
			list, err := source.Dynamic.Resource(schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource}).Namespace(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return fmt.Errorf("source: list %s in %s: %w", r.GroupResource(), ns, err)
			}
			for i := range list.Items {
				obj := &list.Items[i]
				if metav1.GetControllerOfNoCopy(obj) != nil || filter.Reason(r, obj) != "" || finished(obj) || idle(obj) {
					continue // made by its owner (checked there), left out, done, or making no pods
				}
				pod := podOf(obj, where)
				pod.SetNamespace(in)
				_, err := try.Dynamic.Resource(kube.PodsGVR).Namespace(in).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: "ferry-preflight"})
				if why := refusedByNamespacePolicy(err); why != "" {
					p.block(fmt.Sprintf("%s %s/%s", strings.ToLower(r.Kind), to, obj.GetName()),
						"the target would refuse its pods: %s; they run on the source only because they were made before the namespace's policy: meet it (or change the policy on the source) first", why)
				}
			}
		}
	}
	return nil
}

// podOf is the pod the target would make for obj: obj itself for a pod, else from its template
// at where, with a StatefulSet's claim templates as the claims of its first pod.
func podOf(obj *unstructured.Unstructured, where []string) *unstructured.Unstructured {
	if where == nil {
		pod := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod", "spec": runtime.DeepCopyJSONValue(obj.Object["spec"])}}
		pod.SetGenerateName("ferry-preflight-")
		pod.SetLabels(obj.GetLabels())
		pod.SetAnnotations(obj.GetAnnotations())
		// A node of the source, and what only a running pod has.
		unstructured.RemoveNestedField(pod.Object, "spec", "nodeName")
		unstructured.RemoveNestedField(pod.Object, "spec", "ephemeralContainers")
		unstructured.RemoveNestedField(pod.Object, "spec", "priority") // the target's class gives it
		return pod
	}
	template, _, _ := unstructured.NestedMap(obj.Object, where...)
	spec, _, _ := unstructured.NestedMap(template, "spec")
	if claims, _, _ := unstructured.NestedSlice(obj.Object, "spec", "volumeClaimTemplates"); len(claims) > 0 {
		volumes, _, _ := unstructured.NestedSlice(spec, "volumes")
		for _, c := range claims {
			name, _, _ := unstructured.NestedString(c.(map[string]any), "metadata", "name")
			volumes = append(volumes, map[string]any{"name": name, "persistentVolumeClaim": map[string]any{"claimName": name + "-" + obj.GetName() + "-0"}})
		}
		spec["volumes"] = volumes
	}
	pod := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod", "spec": spec}}
	pod.SetGenerateName("ferry-preflight-")
	labels, _, _ := unstructured.NestedStringMap(template, "metadata", "labels")
	annotations, _, _ := unstructured.NestedStringMap(template, "metadata", "annotations")
	pod.SetLabels(labels)
	pod.SetAnnotations(annotations)
	return pod
}

// idle says whether obj makes no pods now: scaled to zero by its owner (not by ferry's quiesce,
// which scales it up again on the target), or suspended.
func idle(obj *unstructured.Unstructured) bool {
	if suspended, _, _ := unstructured.NestedBool(obj.Object, "spec", "suspend"); suspended {
		return obj.GetAnnotations()[QuiescedAnnotation] == ""
	}
	replicas, found, _ := unstructured.NestedInt64(obj.Object, "spec", "replicas")
	return found && replicas == 0 && obj.GetAnnotations()[QuiescedAnnotation] == ""
}

// finished says whether obj is a Job or a pod that ended: it makes no pod again.
func finished(obj *unstructured.Unstructured) bool {
	if phase, _, _ := unstructured.NestedString(obj.Object, "status", "phase"); phase == "Succeeded" || phase == "Failed" {
		return true
	}
	conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conditions {
		cond, _ := c.(map[string]any)
		if (cond["type"] == "Complete" || cond["type"] == "Failed") && cond["status"] == "True" {
			return true
		}
	}
	return false
}

// refusedByNamespacePolicy says why the API server refused a pod by the namespace's Pod Security
// level or a LimitRange, or "" for any other answer: quotas are judged apart, and what the
// source's admission webhooks say (a policy engine's Pod Security rules too) does not hold on a
// target that makes them last.
func refusedByNamespacePolicy(err error) string {
	if err == nil || !apierrors.IsForbidden(err) || strings.Contains(err.Error(), "admission webhook") {
		return ""
	}
	msg := err.Error()
	for _, policy := range []string{"violates PodSecurity", "usage per Container", "usage per Pod", "limit to request ratio per"} {
		if strings.Contains(msg, policy) {
			if _, after, ok := strings.Cut(msg, " is forbidden: "); ok {
				return after
			}
			return msg
		}
	}
	return ""
}
