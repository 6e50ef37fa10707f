package plans

import (
	"strings"
	"testing"

	"github.com/ferrykube/ferry/plans/config"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestExclusionReason(t *testing.T) {
	obj := func(yamlish map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: yamlish}
	}
	meta := func(ns, name string, ann map[string]any) map[string]any {
		m := map[string]any{"name": name, "namespace": ns}
		if ann != nil {
			m["annotations"] = ann
		}
		return m
	}
	for _, tc := range []struct {
		name, gr string
		obj      map[string]any
		want     string // part of the reason; "" means the object moves
	}{
		{"root CA", "configmaps", map[string]any{"metadata": meta("kubeflow", "kube-root-ca.crt", nil)}, "root-CA publisher"},
		{"user configmap", "configmaps", map[string]any{"metadata": meta("kubeflow", "pipeline-install-config", nil)}, ""},
		{"token secret", "secrets", map[string]any{"metadata": meta("a", "t", nil), "type": "kubernetes.io/service-account-token"}, "tokens are minted"},
		{"opaque secret", "secrets", map[string]any{"metadata": meta("a", "s", nil), "type": "Opaque"}, ""},
		{"default SA", "serviceaccounts", map[string]any{"metadata": meta("a", "default", nil)}, "controller manager"},
		{"mirror pod", "pods", map[string]any{"metadata": meta("kube-system", "etcd-n1", map[string]any{"kubernetes.io/config.mirror": "x"})}, "mirror pod"},
		{"finished pod", "pods", map[string]any{"metadata": meta("a", "p", nil), "status": map[string]any{"phase": "Succeeded"}}, "finished pod"},
		{"running pod", "pods", map[string]any{"metadata": meta("a", "p", nil), "status": map[string]any{"phase": "Running"}}, ""},
		{"finished job", "jobs.batch", map[string]any{"metadata": meta("a", "j", nil), "status": map[string]any{"conditions": []any{map[string]any{"type": "Complete", "status": "True"}}}}, "finished job"},
		{"running job", "jobs.batch", map[string]any{"metadata": meta("a", "j", nil), "status": map[string]any{}}, ""},
		{"bootstrap role", "clusterroles.rbac.authorization.k8s.io", map[string]any{"metadata": meta("", "admin", map[string]any{"rbac.authorization.kubernetes.io/autoupdate": "true"})}, "bootstrap RBAC"},
		{"user role", "clusterroles.rbac.authorization.k8s.io", map[string]any{"metadata": meta("", "kubeflow-edit", nil)}, ""},
		{"kube-system namespace", "namespaces", map[string]any{"metadata": meta("", "kube-system", nil)}, "every cluster"},
		{"user namespace", "namespaces", map[string]any{"metadata": meta("", "kubeflow", nil)}, ""},
		{"kubernetes service", "services", map[string]any{"metadata": meta("default", "kubernetes", nil)}, "publishes its own"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := exclusionReason(tc.gr, obj(tc.obj))
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("exclusionReason = %q, want one containing %q", got, tc.want)
			}
		})
	}
}

func TestSelector(t *testing.T) {
	cfg := config.Planning{Include: config.Selection{Namespaces: []string{"kubeflow", "team-a"}, LabelSelector: "app!=cache"}, Exclude: config.Selection{Resources: []string{"secrets", "profiles.kubeflow.org"}}}
	s, err := newSelector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cm := servedResource{kind: "ConfigMap", namespaced: true}
	cm.gvr.Version, cm.gvr.Resource = "v1", "configmaps"
	secrets := cm
	secrets.gvr.Resource, secrets.kind = "secrets", "Secret"
	if s.resourceReason(cm) != "" || s.resourceReason(secrets) == "" {
		t.Fatalf("resource reasons: configmaps %q, secrets %q", s.resourceReason(cm), s.resourceReason(secrets))
	}
	in := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"namespace": "kubeflow", "name": "x", "labels": map[string]any{"app": "web"}}}}
	cache := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"namespace": "kubeflow", "name": "y", "labels": map[string]any{"app": "cache"}}}}
	other := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"namespace": "elsewhere", "name": "z"}}}
	if r := s.objectReason(cm, in); r != "" {
		t.Errorf("included object: %q", r)
	}
	if r := s.objectReason(cm, cache); !strings.Contains(r, "labels") {
		t.Errorf("object with app=cache: %q", r)
	}
	if r := s.objectReason(cm, other); !strings.Contains(r, "namespace not included") {
		t.Errorf("object in another namespace: %q", r)
	}
}

func TestExcludedType(t *testing.T) {
	for gr, want := range map[string]string{
		"nodes":                 "belong to the cluster",
		"configmaps":            "",
		"profiles.kubeflow.org": "",
		// A simulator's resources are its installation's to exclude (the testbed's ferry.yaml does).
		"execs.kwok.x-k8s.io": "",
	} {
		got := excludedType(gr)
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("excludedType(%q) = %q, want %q", gr, got, want)
		}
	}
}
