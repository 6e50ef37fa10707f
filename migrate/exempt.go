package migrate

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/ferrykube/ferry/plans/rules"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
)

// A writer the quiesce stops may be the server of an admission webhook that must admit every pod
// made where it applies: Kubeflow labels each profile namespace for Katib's metrics collector,
// whose webhook katib-controller serves (failurePolicy Fail). While the writer is stopped, that
// webhook refuses every pod there, ferry's mover pods too: no claim of the namespace could be
// backed up, restored or verified. So Stop gives such webhooks a match condition that lets pass
// the creation of ferry's mover pods by ferry's own users (blue's and green's), and nothing else;
// Start takes it off. The condition and the record move with the configuration to green, where
// they hold until green's writers start, as the writers' own records do.

// ExemptMovers is the quiesce record's action on a webhook configuration whose webhooks ferry's
// mover pods pass while their server is stopped.
const ExemptMovers = "exempt-movers"

// moverConditionName names the match condition ExemptMovers adds to a webhook.
const moverConditionName = "ferry.dev/movers-pass-while-server-stopped"

var servicesGVR = schema.GroupVersionResource{Version: "v1", Resource: "services"}

// webhookConfigurations are the resources that hold admission webhooks.
var webhookConfigurations = []schema.GroupVersionResource{
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"},
}

// moverCondition is the match condition under which a webhook is called for every request but
// the creation of a mover pod by one of users. Each term is checked before the next reads a
// field it needs, and fields the request may lack (subResource, absent on a pod itself) are
// tested with has(): a condition that fails to evaluate refuses the request.
func moverCondition(users []string) map[string]any {
	quoted := make([]string, len(users))
	for i, u := range users {
		quoted[i] = strconv.Quote(u)
	}
	return map[string]any{"name": moverConditionName, "expression": fmt.Sprintf(
		`!(request.userInfo.username in [%s] && request.resource.group == "" && request.resource.resource == "pods" && (!has(request.subResource) || request.subResource == "") && request.operation == "CREATE" && has(object.metadata.labels) && %q in object.metadata.labels && object.metadata.labels[%q] == %q)`,
		strings.Join(quoted, ", "), rules.MoverLabel, rules.MoverLabel, rules.MoverName)}
}

// exemptMovers lets ferry's mover pods pass every webhook that must admit pods and whose server,
// a Service in the cluster, selects the pods of one of stopped (the workloads Stop scaled to
// zero). It is idempotent, and puts the condition back where something took it off since.
func (q Quiescer) exemptMovers(ctx context.Context, stopped []*unstructured.Unstructured) ([]QuiesceItem, error) {
	if len(stopped) == 0 {
		return nil, nil
	}
	servers := map[string]string{} // "namespace/service" -> the stopped workload it selects, or ""
	var users []string
	var done []QuiesceItem
	err := q.eachWebhookConfiguration(ctx, func(config webhookConfiguration) error {
		exempted := map[string]string{} // webhook -> the stopped workload that serves it
		webhooks, _, _ := unstructured.NestedSlice(config.obj.Object, "webhooks")
		for _, w := range webhooks {
			webhook, _ := w.(map[string]any)
			service, ok := refusesPods(webhook)
			if !ok {
				continue
			}
			if _, seen := servers[service]; !seen {
				var err error
				if servers[service], err = q.servedBy(ctx, service, stopped); err != nil {
					return err
				}
			}
			if server := servers[service]; server != "" {
				name, _ := webhook["name"].(string)
				exempted[name] = server
			}
		}
		if len(exempted) == 0 {
			return nil
		}
		if users == nil && q.MoverUsers != nil {
			users = q.MoverUsers(ctx)
		}
		if len(users) == 0 {
			// A cluster before Kubernetes 1.28 cannot say who ferry is (SelfSubjectReview), nor
			// take a match condition: its webhooks are left as they are.
			q.Log.Warn("webhooks whose server the quiesce stopped will refuse ferry's mover pods; ferry's users are not known, so they are left as they are", "configuration", config.obj.GetName())
			return nil
		}
		names := slices.Sorted(maps.Keys(exempted))
		changed, err := config.update(ctx, func(live map[string]any) (map[string]any, error) {
			return exempt(live, names, moverCondition(users))
		})
		if err != nil || !changed {
			return err
		}
		servedBy := slices.Compact(slices.Sorted(maps.Values(exempted)))
		q.Log.Info("ferry's mover pods pass webhooks whose server the quiesce stopped", "configuration", config.obj.GetName(), "webhooks", names, "server", servedBy)
		done = append(done, QuiesceItem{Resource: config.resource.GroupResource().String(), Name: config.obj.GetName(), Action: ExemptMovers,
			Detail: fmt.Sprintf("ferry's mover pods pass %s while %s, which serves it, is stopped; every other request is sent to it as before", strings.Join(names, ", "), strings.Join(servedBy, ", "))})
		return nil
	})
	return done, err
}

// webhookConfiguration is a mutating or validating webhook configuration as listed, and its client.
type webhookConfiguration struct {
	resource schema.GroupVersionResource
	client   dynamic.ResourceInterface
	obj      *unstructured.Unstructured
}

// eachWebhookConfiguration calls fn with every webhook configuration of the cluster; it stops at
// fn's first error, which names the configuration.
func (q Quiescer) eachWebhookConfiguration(ctx context.Context, fn func(webhookConfiguration) error) error {
	for _, gvr := range webhookConfigurations {
		client := q.Dynamic.Resource(gvr)
		list, err := client.List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list %s: %w", gvr.Resource, err)
		}
		for i := range list.Items {
			if err := fn(webhookConfiguration{resource: gvr, client: client, obj: &list.Items[i]}); err != nil {
				return fmt.Errorf("%s %s: %w", gvr.Resource, list.Items[i].GetName(), err)
			}
		}
	}
	return nil
}

// update reads the configuration again and writes change's form of it, if it differs, again on a
// conflict (a certificate's injector may write the configuration meanwhile); it says whether it
// wrote.
func (c webhookConfiguration) update(ctx context.Context, change func(map[string]any) (map[string]any, error)) (bool, error) {
	changed := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		live, err := c.client.Get(ctx, c.obj.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		next, err := change(live.Object)
		if err != nil || reflect.DeepEqual(next, live.Object) {
			return err
		}
		_, err = c.client.Update(ctx, &unstructured.Unstructured{Object: next}, metav1.UpdateOptions{FieldManager: "ferry"})
		changed = err == nil
		return err
	})
	return changed, err
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

// servedBy names a workload of stopped ("kind namespace/name") whose pods the Service
// ("namespace/name") selects, or "" when there is none (the Service is missing or selects
// nothing stopped).
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

// exempt is a webhook configuration whose named webhooks have condition (in place of an older
// one of its name), with ExemptMovers' record.
func exempt(config map[string]any, names []string, condition map[string]any) (map[string]any, error) {
	out := runtime.DeepCopyJSON(config)
	webhooks, _, _ := unstructured.NestedSlice(out, "webhooks")
	for i, w := range webhooks {
		webhook, _ := w.(map[string]any)
		if name, _ := webhook["name"].(string); slices.Contains(names, name) {
			webhook["matchConditions"] = append(withoutMoverCondition(webhook), runtime.DeepCopyJSONValue(condition))
			webhooks[i] = webhook
		}
	}
	if err := unstructured.SetNestedSlice(out, webhooks, "webhooks"); err != nil {
		return nil, err
	}
	record, err := json.Marshal(original{Action: ExemptMovers})
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

// unexempt is a webhook configuration as it was before exempt: without the movers' condition and
// the record.
func unexempt(config map[string]any) (map[string]any, error) {
	out := runtime.DeepCopyJSON(config)
	webhooks, _, _ := unstructured.NestedSlice(out, "webhooks")
	for i, w := range webhooks {
		webhook, _ := w.(map[string]any)
		if conditions := withoutMoverCondition(webhook); len(conditions) > 0 {
			webhook["matchConditions"] = conditions
		} else {
			delete(webhook, "matchConditions")
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

// withoutMoverCondition is a webhook's match conditions but the movers'.
func withoutMoverCondition(webhook map[string]any) []any {
	conditions, _ := webhook["matchConditions"].([]any)
	return slices.DeleteFunc(slices.Clone(conditions), func(c any) bool {
		condition, _ := c.(map[string]any)
		return condition["name"] == moverConditionName
	})
}

// unexemptMovers takes the movers' condition off every webhook configuration that carries
// ExemptMovers' record, wherever it came from (green's are blue's, restored).
func (q Quiescer) unexemptMovers(ctx context.Context) ([]QuiesceItem, error) {
	var done []QuiesceItem
	err := q.eachWebhookConfiguration(ctx, func(config webhookConfiguration) error {
		if !exempted(config.obj.Object) {
			return nil
		}
		changed, err := config.update(ctx, func(live map[string]any) (map[string]any, error) {
			if !exempted(live) {
				return live, nil
			}
			return unexempt(live)
		})
		if changed {
			done = append(done, QuiesceItem{Resource: config.resource.GroupResource().String(), Name: config.obj.GetName(), Action: "un-" + ExemptMovers})
		}
		return err
	})
	return done, err
}

// exempted says whether obj carries ExemptMovers' record.
func exempted(obj map[string]any) bool {
	record, ok := (&unstructured.Unstructured{Object: obj}).GetAnnotations()[QuiescedAnnotation]
	if !ok {
		return false
	}
	var orig original
	return json.Unmarshal([]byte(record), &orig) == nil && orig.Action == ExemptMovers
}

// writerCount counts the writers among what Stop or Start did, leaving out webhook configurations
// and GitOps objects.
func writerCount(items []QuiesceItem) int {
	return len(items) - webhookCount(items) - len(gitOpsPaused(items))
}

func webhookCount(items []QuiesceItem) int {
	n := 0
	for _, it := range items {
		if strings.TrimPrefix(it.Action, "un-") == ExemptMovers {
			n++
		}
	}
	return n
}

// stoppedLine says what Stop did: the writers it stopped (what: "writers stopped on blue"), the
// GitOps objects it paused with them (they stay paused while the writers stay stopped, so an
// operator must know), and the webhook configurations whose pod webhooks it let ferry's movers
// pass.
func stoppedLine(items []QuiesceItem, what string) string {
	line := fmt.Sprintf("%d %s", writerCount(items), what)
	if paused := gitOpsPaused(items); len(paused) > 0 {
		line += fmt.Sprintf("; GitOps objects paused with them: %d (%s)", len(paused), strings.Join(paused, ", "))
	}
	if n := webhookCount(items); n > 0 {
		line += fmt.Sprintf("; webhook configurations whose pod webhooks ferry's movers pass while their server is stopped: %d", n)
	}
	return line
}
