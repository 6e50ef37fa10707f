package migrate

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ferrykube/ferry/plans/rules"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"
)

// A writer the quiesce stops may be the server of an admission webhook that must admit every pod
// made where it applies: Kubeflow labels each profile namespace for Katib's metrics collector,
// whose webhook katib-controller serves (failurePolicy Fail). While the writer is stopped, that
// webhook refuses every pod there, ferry's mover pods too: no claim of the namespace could be
// backed up, restored or verified. So Stop exempts ferry's movers, and only them, from such
// webhooks (an objectSelector requirement that leaves out pods labelled as movers), recording
// each webhook's selector as it was; Start puts it back. The record moves with the configuration
// to green, where it holds until green's writers start, as the writers' own records do.

// ExemptMovers is the quiesce record's action on a webhook configuration whose webhooks ferry's
// mover pods pass while their server is stopped.
const ExemptMovers = "exempt-movers"

var servicesGVR = schema.GroupVersionResource{Version: "v1", Resource: "services"}

// webhookConfigurations are the resources that hold admission webhooks.
var webhookConfigurations = []schema.GroupVersionResource{
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"},
}

// moverExemption is the objectSelector requirement that leaves ferry's mover pods out.
func moverExemption() map[string]any {
	return map[string]any{"key": rules.MoverLabel, "operator": "NotIn", "values": []any{rules.MoverName}}
}

// exemptMovers exempts ferry's mover pods from every webhook that must admit pods and whose
// server, a Service in the cluster, selects the pods of one of stopped (the workloads Stop scaled
// to zero). A configuration that carries a quiesce record already is left as it is (a resumed
// Stop).
func (q Quiescer) exemptMovers(ctx context.Context, stopped []*unstructured.Unstructured) ([]QuiesceItem, error) {
	if len(stopped) == 0 {
		return nil, nil
	}
	servers := map[string]string{} // "namespace/service" -> the stopped workload it selects, or ""
	var done []QuiesceItem
	for _, gvr := range webhookConfigurations {
		client := q.Dynamic.Resource(gvr)
		list, err := client.List(ctx, metav1.ListOptions{})
		if err != nil {
			return done, fmt.Errorf("list %s: %w", gvr.Resource, err)
		}
		for _, config := range list.Items {
			if _, ok := config.GetAnnotations()[QuiescedAnnotation]; ok {
				continue
			}
			exempted := map[string]string{} // webhook -> the stopped workload that serves it
			webhooks, _, _ := unstructured.NestedSlice(config.Object, "webhooks")
			for _, w := range webhooks {
				webhook, _ := w.(map[string]any)
				service, ok := refusesPods(webhook)
				if !ok {
					continue
				}
				if _, seen := servers[service]; !seen {
					if servers[service], err = q.servedBy(ctx, service, stopped); err != nil {
						return done, err
					}
				}
				if server := servers[service]; server != "" {
					name, _ := webhook["name"].(string)
					exempted[name] = server
				}
			}
			if len(exempted) == 0 {
				continue
			}
			names := slices.Sorted(maps.Keys(exempted))
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				live, err := client.Get(ctx, config.GetName(), metav1.GetOptions{})
				if err != nil {
					return err
				}
				changed, err := exempt(live.Object, names)
				if err != nil {
					return err
				}
				_, err = client.Update(ctx, &unstructured.Unstructured{Object: changed}, metav1.UpdateOptions{FieldManager: "ferry"})
				return err
			})
			if err != nil {
				return done, fmt.Errorf("exempt ferry's mover pods from the webhooks of %s %s: %w", gvr.Resource, config.GetName(), err)
			}
			servedBy := slices.Sorted(maps.Values(exempted))
			servedBy = slices.Compact(servedBy)
			q.Log.Info("ferry's mover pods pass webhooks whose server the quiesce stopped", "configuration", config.GetName(), "webhooks", names, "server", servedBy)
			done = append(done, QuiesceItem{Resource: gvr.GroupResource().String(), Name: config.GetName(), Action: ExemptMovers,
				Detail: fmt.Sprintf("ferry's mover pods pass %s while %s, which serves it, is stopped; every other pod is refused as before", strings.Join(names, ", "), strings.Join(servedBy, ", "))})
		}
	}
	return done, nil
}

// refusesPods says whether an admission webhook must admit every pod made where it applies
// (failurePolicy Fail, the default, on pods' CREATE) and names its Service ("namespace/name");
// a webhook called at a URL has no server ferry could know.
func refusesPods(webhook map[string]any) (service string, ok bool) {
	if policy, _, _ := unstructured.NestedString(webhook, "failurePolicy"); policy == "Ignore" {
		return "", false
	}
	ns, _, _ := unstructured.NestedString(webhook, "clientConfig", "service", "namespace")
	name, _, _ := unstructured.NestedString(webhook, "clientConfig", "service", "name")
	if name == "" {
		return "", false
	}
	webhookRules, _, _ := unstructured.NestedSlice(webhook, "rules")
	for _, r := range webhookRules {
		rule, _ := r.(map[string]any)
		groups, _, _ := unstructured.NestedStringSlice(rule, "apiGroups")
		resources, _, _ := unstructured.NestedStringSlice(rule, "resources")
		operations, _, _ := unstructured.NestedStringSlice(rule, "operations")
		if anyOf(groups, "", "*") && anyOf(resources, "pods", "*", "*/*") && anyOf(operations, "CREATE", "*") {
			return ns + "/" + name, true
		}
	}
	return "", false
}

func anyOf(values []string, want ...string) bool {
	return slices.ContainsFunc(values, func(v string) bool { return slices.Contains(want, v) })
}

// servedBy names the workload of stopped ("resource namespace/name") whose pods the Service
// ("namespace/name") selects, or "" when none does (the Service is missing, selects nothing, or
// selects pods of workloads still running).
func (q Quiescer) servedBy(ctx context.Context, service string, stopped []*unstructured.Unstructured) (string, error) {
	ns, name, _ := strings.Cut(service, "/")
	svc, err := q.Dynamic.Resource(servicesGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		return "", fmt.Errorf("service %s of an admission webhook: %w", service, err)
	}
	selector, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
	if len(selector) == 0 {
		return "", nil
	}
	for _, obj := range stopped {
		podLabels, _, _ := unstructured.NestedStringMap(obj.Object, "spec", "template", "metadata", "labels")
		if obj.GetNamespace() == ns && labels.SelectorFromSet(selector).Matches(labels.Set(podLabels)) {
			return strings.ToLower(obj.GetKind()) + " " + ns + "/" + obj.GetName(), nil
		}
	}
	return "", nil
}

// exempt is a webhook configuration with ferry's movers exempted from the named webhooks and the
// record of their objectSelectors as they were.
func exempt(config map[string]any, names []string) (map[string]any, error) {
	out := runtime.DeepCopyJSON(config)
	before := map[string]json.RawMessage{}
	webhooks, _, _ := unstructured.NestedSlice(out, "webhooks")
	for i, w := range webhooks {
		webhook, _ := w.(map[string]any)
		name, _ := webhook["name"].(string)
		if !slices.Contains(names, name) {
			continue
		}
		selector, _, _ := unstructured.NestedFieldNoCopy(webhook, "objectSelector")
		before[name], _ = json.Marshal(selector) // null where there was none
		requirements, _, _ := unstructured.NestedSlice(webhook, "objectSelector", "matchExpressions")
		if err := unstructured.SetNestedSlice(webhook, append(requirements, moverExemption()), "objectSelector", "matchExpressions"); err != nil {
			return nil, err
		}
		webhooks[i] = webhook
	}
	if err := unstructured.SetNestedSlice(out, webhooks, "webhooks"); err != nil {
		return nil, err
	}
	record, err := json.Marshal(original{Action: ExemptMovers, Selectors: before})
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: out}
	annotations := u.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[QuiescedAnnotation] = string(record)
	u.SetAnnotations(annotations)
	return out, nil
}

// unexempt is a webhook configuration exempt changed, as it was before: each webhook the record
// names has its objectSelector back, and the record is gone.
func unexempt(config map[string]any, orig original) (map[string]any, error) {
	out := runtime.DeepCopyJSON(config)
	webhooks, _, _ := unstructured.NestedSlice(out, "webhooks")
	for i, w := range webhooks {
		webhook, _ := w.(map[string]any)
		name, _ := webhook["name"].(string)
		raw, ok := orig.Selectors[name]
		if !ok {
			continue
		}
		var selector map[string]any
		if err := json.Unmarshal(raw, &selector); err != nil {
			return nil, fmt.Errorf("annotation %s: webhook %s: %w", QuiescedAnnotation, name, err)
		}
		if selector == nil {
			delete(webhook, "objectSelector")
		} else {
			webhook["objectSelector"] = selector
		}
		webhooks[i] = webhook
	}
	if err := unstructured.SetNestedSlice(out, webhooks, "webhooks"); err != nil {
		return nil, err
	}
	unstructured.RemoveNestedField(out, "metadata", "annotations", QuiescedAnnotation)
	if annotations, _, _ := unstructured.NestedMap(out, "metadata", "annotations"); len(annotations) == 0 {
		unstructured.RemoveNestedField(out, "metadata", "annotations")
	}
	return out, nil
}

// unexemptMovers puts back every webhook configuration exemptMovers changed: the objects that
// carry its record, wherever they came from (green's are blue's, restored).
func (q Quiescer) unexemptMovers(ctx context.Context) ([]QuiesceItem, error) {
	var done []QuiesceItem
	for _, gvr := range webhookConfigurations {
		client := q.Dynamic.Resource(gvr)
		list, err := client.List(ctx, metav1.ListOptions{})
		if err != nil {
			return done, fmt.Errorf("list %s: %w", gvr.Resource, err)
		}
		for _, config := range list.Items {
			if exemptionOf(config.Object) == nil {
				continue
			}
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				live, err := client.Get(ctx, config.GetName(), metav1.GetOptions{})
				if err != nil {
					return err
				}
				orig := exemptionOf(live.Object)
				if orig == nil {
					return nil
				}
				started, err := unexempt(live.Object, *orig)
				if err != nil {
					return err
				}
				_, err = client.Update(ctx, &unstructured.Unstructured{Object: started}, metav1.UpdateOptions{FieldManager: "ferry"})
				return err
			})
			if err != nil {
				return done, fmt.Errorf("put back the webhooks of %s %s: %w", gvr.Resource, config.GetName(), err)
			}
			done = append(done, QuiesceItem{Resource: gvr.GroupResource().String(), Name: config.GetName(), Action: "un-" + ExemptMovers})
		}
	}
	return done, nil
}

// exemptionOf is obj's quiesce record when it is exemptMovers', else nil.
func exemptionOf(obj map[string]any) *original {
	record, ok := (&unstructured.Unstructured{Object: obj}).GetAnnotations()[QuiescedAnnotation]
	if !ok {
		return nil
	}
	var orig original
	if json.Unmarshal([]byte(record), &orig) != nil || orig.Action != ExemptMovers {
		return nil
	}
	return &orig
}

// stoppedLine counts what Stop did: the writers it stopped (what), and the webhook
// configurations it exempted the movers from.
func stoppedLine(items []QuiesceItem, what string) string {
	exempted := 0
	for _, it := range items {
		if it.Action == ExemptMovers {
			exempted++
		}
	}
	line := fmt.Sprintf("%d %s", len(items)-exempted, what)
	if exempted > 0 {
		line += fmt.Sprintf("; webhook configurations whose pod webhooks ferry's movers pass while their server is stopped: %d", exempted)
	}
	return line
}
