package plans

import (
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestRefusedByNamespacePolicy: only a namespace's Pod Security level and LimitRanges are read
// from a refused dry run; quotas, admission webhooks (a policy engine's Pod Security rules too)
// and anything else are not.
func TestRefusedByNamespacePolicy(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{apierrors.NewForbidden(pods, "x", errors.New(`violates PodSecurity "restricted:latest": runAsNonRoot != true`)), `violates PodSecurity "restricted:latest"`},
		{apierrors.NewForbidden(pods, "x", errors.New("maximum cpu usage per Container is 1, but limit is 2")), "maximum cpu usage per Container is 1"},
		{apierrors.NewForbidden(pods, "x", errors.New("cpu max limit to request ratio per Container is 2, but provided ratio is 4")), "limit to request ratio per Container"},
		{apierrors.NewForbidden(pods, "x", errors.New("exceeded quota: q, requested: pods=1, used: pods=3, limited: pods=3")), ""},
		{apierrors.NewForbidden(pods, "x", errors.New(`admission webhook "validate.kyverno.svc" denied the request: violates PodSecurity "baseline"`)), ""},
		{apierrors.NewForbidden(pods, "x", errors.New(`error looking up service account team/runner: serviceaccount "runner" not found`)), ""},
		{apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "x", nil), ""},
	} {
		got := refusedByNamespacePolicy(tc.err)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) || strings.Contains(got, "is forbidden") {
			t.Errorf("refusedByNamespacePolicy(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// TestIdle: a workload its owner scaled to zero or suspended makes no pods to judge; one ferry's
// quiesce stopped runs again on the target and is judged.
func TestIdle(t *testing.T) {
	obj := func(spec map[string]any, quiesced bool) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
		if quiesced {
			u.SetAnnotations(map[string]string{QuiescedAnnotation: `{"action":"scale-to-zero","replicas":2}`})
		}
		return u
	}
	for _, tc := range []struct {
		name string
		obj  *unstructured.Unstructured
		want bool
	}{
		{"running", obj(map[string]any{"replicas": int64(2)}, false), false},
		{"no replicas field", obj(map[string]any{}, false), false},
		{"scaled to zero", obj(map[string]any{"replicas": int64(0)}, false), true},
		{"quiesced", obj(map[string]any{"replicas": int64(0)}, true), false},
		{"suspended", obj(map[string]any{"suspend": true}, false), true},
		{"suspended by the quiesce", obj(map[string]any{"suspend": true}, true), false},
	} {
		if got := idle(tc.obj); got != tc.want {
			t.Errorf("%s: idle = %v, want %v", tc.name, got, tc.want)
		}
	}
}
