package plans

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans/config"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

var (
	secretsGVR = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
)

func workloadGVR(kind string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: kind + "s"}
}

// findData looks up the configured databases, buckets, tenants and quiesce targets on the cluster.
// What it cannot find becomes a warning: the plan still covers everything else. Those in a
// namespace data leaves out are listed as excluded (Options.Data).
func findData(ctx context.Context, dyn dynamic.Interface, p *Plan, served []servedResource, namespaces map[string]bool, data *Filter) error {
	volumes := map[string]*Volume{}
	for i := range p.Volumes {
		volumes[p.Volumes[i].Namespace+"/"+p.Volumes[i].Name] = &p.Volumes[i]
	}
	leftOut := func(kind, namespace, name string) bool {
		if data == nil {
			return false
		}
		reason := data.DataReason(namespace, false)
		if reason != "" {
			p.Excluded = append(p.Excluded, Exclusion{Resource: kind, Namespace: namespace, Name: name, Count: 1, Reason: reason})
		}
		return reason != ""
	}
	for _, d := range p.Config.Databases {
		if leftOut("databases", d.Namespace, d.Name) {
			continue
		}
		item := DataItem{Name: d.Name, Engine: d.Engine, Namespace: d.Namespace, Workload: d.Workload}
		if d.Secret != nil {
			item.Secret = d.Secret.Name
		}
		if err := locate(ctx, dyn, &item, d.Secret, []string{secretKey(d.Secret, "user"), secretKey(d.Secret, "password")}, volumes); err != nil {
			return err
		}
		if !item.Found {
			p.warn("database "+d.Name, "%s; it is not in the plan", item.Problem)
		} else {
			holds(p, volumes, item, "database "+d.Name)
		}
		p.Databases = append(p.Databases, item)
	}
	for _, b := range p.Config.Buckets {
		if leftOut("buckets", b.Namespace, b.Name) {
			continue
		}
		item := DataItem{Name: b.Name, Namespace: b.Namespace, Workload: b.Workload, Endpoint: b.Endpoint}
		if b.Secret != nil {
			item.Secret = b.Secret.Name
		}
		if b.Workload == "" {
			item.Found = true // a direct endpoint is reached at backup time
		} else if err := locate(ctx, dyn, &item, b.Secret, []string{secretKey(b.Secret, "access"), secretKey(b.Secret, "secret")}, volumes); err != nil {
			return err
		}
		if !item.Found {
			p.warn("bucket "+b.Name, "%s; it is not in the plan", item.Problem)
		} else {
			holds(p, volumes, item, "bucket "+b.Name)
		}
		p.Buckets = append(p.Buckets, item)
	}
	if t := p.Config.Tenants; t != nil {
		r, ok := findServed(served, t.Resource)
		if !ok {
			p.warn("tenants", "resource %s is not served by the cluster", t.Resource)
		} else {
			list, err := dyn.Resource(r.gvr).List(ctx, metav1.ListOptions{})
			if err != nil {
				return fmt.Errorf("list %s: %w", t.Resource, err)
			}
			for _, obj := range list.Items {
				owner, _, _ := unstructured.NestedString(obj.Object, "spec", "owner", "name")
				tenant := Tenant{Name: obj.GetName(), Owner: owner, Namespace: obj.GetName(), NamespaceExists: namespaces[obj.GetName()]}
				if !tenant.NamespaceExists {
					p.warn(t.Resource+" "+obj.GetName(), "its namespace %s does not exist", obj.GetName())
				}
				p.Tenants = append(p.Tenants, tenant)
			}
		}
	}
	for _, q := range p.Config.Quiesce {
		r, ok := findServed(served, q.Resource)
		if !ok {
			continue // e.g. no scheduled workflows on this cluster: nothing to stop
		}
		sel, err := labels.Parse(q.LabelSelector)
		if err != nil {
			return err
		}
		list, err := dyn.Resource(r.gvr).Namespace(q.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return fmt.Errorf("list %s to quiesce: %w", q.Resource, err)
		}
		for _, obj := range list.Items {
			if len(q.Names) > 0 && !slices.Contains(q.Names, obj.GetName()) {
				continue
			}
			p.Quiesce = append(p.Quiesce, QuiesceItem{Resource: r.groupResource(), Namespace: obj.GetNamespace(), Name: obj.GetName(), Action: q.Action, Why: q.Why})
		}
	}
	return nil
}

// holds marks the item's claims as moving with it (a dump or a copy, not files); a claim two
// items mount is a finding, as neither could move it alone.
func holds(p *Plan, volumes map[string]*Volume, item DataItem, what string) {
	for _, claim := range item.Volumes {
		v := volumes[item.Namespace+"/"+claim]
		if v.Holds != "" && v.Holds != what {
			p.warn("claim "+item.Namespace+"/"+claim, "mounted by %s and by %s; it moves as %s", v.Holds, what, v.Holds)
			continue
		}
		v.Holds = what
	}
}

// secretKey is the key of s that holds which credential, or "" without s.
func secretKey(s *config.SecretRef, which string) string {
	if s == nil {
		return ""
	}
	switch which {
	case "user":
		return s.UserKey
	case "password":
		return s.PasswordKey
	case "access":
		return s.AccessKey
	default:
		return s.SecretKey
	}
}

// WorkloadPod gets a workload ("deployment/NAME" or "statefulset/NAME") in namespace and the first
// (by name) of its pods that runs: where a database or bucket is reached, on the cluster a plan is
// made of and on a restore's target alike. The workload is nil when it does not exist; the pod is
// nil when none of its pods runs.
func WorkloadPod(ctx context.Context, dyn dynamic.Interface, namespace, workload string) (w, pod *unstructured.Unstructured, err error) {
	w, pods, err := workloadPods(ctx, dyn, namespace, workload)
	if w == nil || err != nil {
		return w, nil, err
	}
	for i := range pods {
		if phase, _, _ := unstructured.NestedString(pods[i].Object, "status", "phase"); phase == "Running" {
			return w, &pods[i], nil
		}
	}
	return w, nil, nil
}

// TargetPodWait is how long a restore waits for the pod of a database's or bucket's server that
// the objects' restore just created to run (kinds restore at the same time once the objects are in).
const TargetPodWait = 3 * time.Minute

// WaitForWorkloadPod is WorkloadPod that waits up to timeout for a running pod of a workload
// that exists and wants replicas; a missing workload or one scaled to zero is answered at once.
func WaitForWorkloadPod(ctx context.Context, dyn dynamic.Interface, namespace, workload string, timeout time.Duration) (w, pod *unstructured.Unstructured, err error) {
	deadline := time.Now().Add(timeout)
	for {
		w, pod, err = WorkloadPod(ctx, dyn, namespace, workload)
		if err != nil || w == nil || pod != nil || !time.Now().Before(deadline) {
			return w, pod, err
		}
		if replicas, found, _ := unstructured.NestedInt64(w.Object, "spec", "replicas"); found && replicas == 0 {
			return w, nil, nil
		}
		select {
		case <-ctx.Done():
			return w, nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// workloadPods gets a workload and its pods (by its selector's labels), sorted by name; the
// workload is nil when it does not exist.
func workloadPods(ctx context.Context, dyn dynamic.Interface, namespace, workload string) (*unstructured.Unstructured, []unstructured.Unstructured, error) {
	kind, name, err := config.ParseWorkload(workload)
	if err != nil {
		return nil, nil, err
	}
	w, err := dyn.Resource(workloadGVR(kind)).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("get %s %s/%s: %w", kind, namespace, name, err)
	}
	matchLabels, _, _ := unstructured.NestedStringMap(w.Object, "spec", "selector", "matchLabels")
	pods, err := dyn.Resource(kube.PodsGVR).Namespace(namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(matchLabels).String()})
	if err != nil {
		return nil, nil, fmt.Errorf("list pods of %s %s/%s: %w", kind, namespace, name, err)
	}
	sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].GetName() < pods.Items[j].GetName() })
	return w, pods.Items, nil
}

// claimsOf lists the claims a workload keeps its data on: every claim its pods mount, whatever
// made it (the pod template, a StatefulSet's claim template, an ephemeral volume, a controller
// of its own), and those its template and claim templates name — "<template>-<statefulset>-<ordinal>"
// for each replica, and every claim of namespace (existing) so named — for pods not running now.
func claimsOf(w *unstructured.Unstructured, pods []unstructured.Unstructured, existing []string) []string {
	var out []string
	add := func(claim string) {
		if claim != "" && !slices.Contains(out, claim) {
			out = append(out, claim)
		}
	}
	for _, pod := range pods {
		if phase, _, _ := unstructured.NestedString(pod.Object, "status", "phase"); phase == "Succeeded" || phase == "Failed" {
			continue
		}
		vols, _, _ := unstructured.NestedSlice(pod.Object, "spec", "volumes")
		for _, v := range vols {
			vm, _ := v.(map[string]any)
			claim, _, _ := unstructured.NestedString(vm, "persistentVolumeClaim", "claimName")
			add(claim)
			if _, ok := vm["ephemeral"]; ok {
				name, _ := vm["name"].(string)
				add(pod.GetName() + "-" + name) // the claim Kubernetes makes for a generic ephemeral volume
			}
		}
	}
	vols, _, _ := unstructured.NestedSlice(w.Object, "spec", "template", "spec", "volumes")
	for _, v := range vols {
		claim, _, _ := unstructured.NestedString(v.(map[string]any), "persistentVolumeClaim", "claimName")
		add(claim)
	}
	if w.GetKind() == "StatefulSet" {
		replicas, found, _ := unstructured.NestedInt64(w.Object, "spec", "replicas")
		if !found {
			replicas = 1
		}
		start, _, _ := unstructured.NestedInt64(w.Object, "spec", "ordinals", "start")
		templates, _, _ := unstructured.NestedSlice(w.Object, "spec", "volumeClaimTemplates")
		for _, t := range templates {
			tm, _ := t.(map[string]any)
			name, _, _ := unstructured.NestedString(tm, "metadata", "name")
			if name == "" {
				continue
			}
			prefix := name + "-" + w.GetName() + "-"
			for i := start; i < start+replicas; i++ {
				add(fmt.Sprintf("%s%d", prefix, i))
			}
			for _, claim := range existing {
				if ordinal, ok := strings.CutPrefix(claim, prefix); ok && isOrdinal(ordinal) {
					add(claim)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

func isOrdinal(s string) bool {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// locate finds an item's workload, a running pod of it, the claim holding its data and its Secret.
func locate(ctx context.Context, dyn dynamic.Interface, item *DataItem, secret *config.SecretRef, keys []string, volumes map[string]*Volume) error {
	kind, name, err := config.ParseWorkload(item.Workload)
	if err != nil {
		return err
	}
	w, pods, err := workloadPods(ctx, dyn, item.Namespace, item.Workload)
	if err != nil {
		return err
	}
	if w == nil {
		item.Problem = fmt.Sprintf("%s %s/%s not found", kind, item.Namespace, name)
		return nil
	}
	for i := range pods {
		if phase, _, _ := unstructured.NestedString(pods[i].Object, "status", "phase"); phase == "Running" {
			item.Pod = pods[i].GetName()
			item.Node, _, _ = unstructured.NestedString(pods[i].Object, "spec", "nodeName")
			break
		}
	}
	var existing []string
	for key := range volumes {
		if ns, claim, _ := strings.Cut(key, "/"); ns == item.Namespace {
			existing = append(existing, claim)
		}
	}
	item.Bytes = 0
	for _, claim := range claimsOf(w, pods, existing) {
		vol := volumes[item.Namespace+"/"+claim]
		if vol == nil {
			continue // a claim not made yet, or not in the plan
		}
		item.Volumes = append(item.Volumes, claim)
		item.Bytes += vol.Bytes
	}
	if len(item.Volumes) > 0 {
		item.Volume = item.Volumes[0]
	}
	if item.Problem, err = secretProblem(ctx, dyn, item.Namespace, secret, keys); err != nil || item.Problem != "" {
		return err
	}
	item.Found = true
	return nil
}

// secretProblem says what a data item's Secret in namespace lacks: it is not there, or has not
// the keys, or "" when it has them (or the item names no Secret). Its values are never read out.
func secretProblem(ctx context.Context, dyn dynamic.Interface, namespace string, secret *config.SecretRef, keys []string) (string, error) {
	if secret == nil {
		return "", nil
	}
	s, err := dyn.Resource(secretsGVR).Namespace(namespace).Get(ctx, secret.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Sprintf("secret %s/%s not found", namespace, secret.Name), nil
	}
	if err != nil {
		return "", fmt.Errorf("get secret %s/%s: %w", namespace, secret.Name, err)
	}
	data, _, _ := unstructured.NestedMap(s.Object, "data")
	var missing []string
	for _, k := range keys {
		if _, ok := data[k]; k != "" && !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return fmt.Sprintf("secret %s/%s has no key %s", namespace, secret.Name, strings.Join(missing, ", ")), nil
	}
	return "", nil
}

// findServed finds a served resource by "plural" or "plural.group".
func findServed(served []servedResource, name string) (servedResource, bool) {
	for _, r := range served {
		if r.groupResource() == name || (r.gvr.Group == "" && r.gvr.Resource == name) {
			return r, true
		}
	}
	return servedResource{}, false
}
