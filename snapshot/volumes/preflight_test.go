package volumes

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/snapshot"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestPreflightMovers: one mover is tried per namespace, with dryRun, as the target names it; a
// policy's refusal blocks, a webhook that cannot be called now warns, and what other checks weigh
// (quotas, a service account not made yet) or a namespace the target lacks says nothing.
func TestPreflightMovers(t *testing.T) {
	refusals := map[string]error{
		"policed":     apierrors.NewForbidden(corev1.Resource("pods"), "", errors.New(`admission webhook "nonroot.policy.example.com" denied the request: containers must not run as root`)),
		"secured":     apierrors.NewForbidden(corev1.Resource("pods"), "ferry-mover-x", errors.New(`violates PodSecurity "restricted:latest": runAsNonRoot != true`)),
		"starting":    apierrors.NewInternalError(errors.New(`failed calling webhook "defaults.kubeflow.org": no endpoints available for service "admission-webhook-service"`)),
		"quota":       apierrors.NewForbidden(corev1.Resource("pods"), "", errors.New("exceeded quota: compute, requested: requests.cpu=1, used: requests.cpu=4, limited: requests.cpu=4")),
		"new":         apierrors.NewForbidden(corev1.Resource("pods"), "", errors.New(`error looking up service account new/default: serviceaccount "default" not found`)),
		"certified":   apierrors.NewInternalError(errors.New(`failed calling webhook "image.policy.example.com": failed to call webhook: Post "https://policy.example.svc:443/validate": tls: failed to verify certificate: x509: certificate signed by unknown authority`)),
		"readonly":    apierrors.NewForbidden(corev1.Resource("pods"), "", errors.New(`User "auditor" cannot create resource "pods" in API group "" in the namespace "readonly"`)),
		"fine-mapped": nil,
	}
	var objs []runtime.Object
	for ns := range refusals {
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	client := fake.NewClientset(objs...)
	var tried []string
	client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		create := action.(k8stesting.CreateActionImpl)
		if !slices.Contains(create.CreateOptions.DryRun, metav1.DryRunAll) {
			t.Errorf("a mover pod was made in %s without dryRun", create.GetNamespace())
		}
		tried = append(tried, create.GetNamespace())
		if pod := create.Object.(*corev1.Pod); pod.Spec.NodeName != "" || pod.Labels[RoleLabel] != roleRestore || pod.Spec.Volumes[0].PersistentVolumeClaim.ReadOnly {
			t.Errorf("the target's mover in %s: node %q, labels %v, read-only %v; want a restore's, placed by the scheduler", create.GetNamespace(),
				pod.Spec.NodeName, pod.Labels, pod.Spec.Volumes[0].PersistentVolumeClaim.ReadOnly)
		}
		return true, nil, refusals[create.GetNamespace()]
	})
	var volumes []plans.Volume
	for _, ns := range []string{"policed", "policed", "secured", "starting", "certified", "readonly", "quota", "new", "fine", "absent"} {
		volumes = append(volumes, plans.Volume{Namespace: ns, Name: "data", Phase: "Bound",
			AccessModes: []string{"ReadWriteOnce"}, Pods: []plans.PodUse{{Name: "notebook-0", Node: "blue-node-1"}}})
	}
	c := Contents{Image: "ferry", Client: client, Plan: &plans.Plan{Volumes: volumes}, Mapping: snapshot.Mapping{Namespaces: map[string]string{"fine": "fine-mapped"}}}
	findings, err := c.PreflightMovers(context.Background(), "target", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(tried) != 8 {
		t.Errorf("movers tried in %v; want one in each namespace the target has", tried)
	}
	got := map[string]string{}
	for _, f := range findings {
		got[strings.TrimPrefix(f.Subject, "mover pods in namespace ")] = f.Severity + ": " + f.Message
	}
	for ns, want := range map[string]string{
		"policed":   `blocking: on the target, ferry's mover pods (label app.kubernetes.io/name=ferry-mover, image ferry), which read and write the claims' files, would be refused: pods is forbidden: admission webhook "nonroot.policy.example.com" denied the request`,
		"secured":   `blocking: on the target, ferry's mover pods`,
		"starting":  `warning: on the target, the server of an admission webhook that must admit ferry's mover pods does not serve now`,
		"certified": `blocking: on the target, ferry's mover pods`,
		"readonly":  `warning: on the target, ferry's user may not make mover pods here`,
	} {
		if !strings.HasPrefix(got[ns], want) {
			t.Errorf("finding for %s: %q, want it to begin %q", ns, got[ns], want)
		}
	}
	if len(got) != 5 {
		t.Errorf("findings: %v; want only those of policed, secured, starting, certified and readonly", got)
	}
}
