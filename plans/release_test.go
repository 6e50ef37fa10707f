package plans

import (
	"testing"

	"github.com/ferrykube/ferry/plans/config"
)

func TestSidesOf(t *testing.T) {
	cfg, err := config.LoadPreset("kubeflow")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Planning = cfg.Planning.Merge(config.Planning{
		State:    config.ReleasePart{Namespaces: []string{"shared-data"}, Objects: []config.ObjectNames{{Resource: "clusterroles.rbac.authorization.k8s.io", Names: []string{"team-a-admin"}}}},
		Platform: config.ReleasePart{Objects: []config.ObjectNames{{Resource: "configmaps", Namespace: "alice", Names: []string{"kfp-launcher"}, Why: "made by the release's profile controller"}}},
	})
	tenants := []Tenant{{Name: "alice", Namespace: "alice"}}
	cfg.Buckets = append(cfg.Buckets, config.Bucket{Name: "models", Namespace: "kubeflow", Workload: "deployment/model-store", Port: 9000,
		Target: &config.BucketTarget{Workload: "deployment/seaweedfs", Port: 8333}})
	data := []DataItem{{Name: "app-db", Engine: "postgresql", Namespace: "kubeflow", Volumes: []string{"data-pg-0"}, Secret: "pg"}, {Name: "mlpipeline", Namespace: "kubeflow", Secret: "mlpipeline-minio-artifact"},
		{Name: "models", Namespace: "kubeflow", Volumes: []string{"model-store"}, Secret: "model-store-keys"}}
	s := NewSides(cfg.Planning, tenants, data)
	for _, tc := range []struct {
		gr, namespace, name string
		side                Side
		why                 string
	}{
		{"notebooks.kubeflow.org", "alice", "nb", State, "namespace of tenant alice"},
		{"namespaces", "", "alice", State, "namespace of tenant alice"},
		{"profiles.kubeflow.org", "", "alice", State, "the tenants"},
		{"deployments.apps", "kubeflow", "ml-pipeline", Platform, "namespace of the release"},
		{"namespaces", "", "kubeflow", Platform, "namespace of the release"},
		{"namespaces", "", "kube-system", Platform, "namespace of the release"},
		{"persistentvolumeclaims", "kubeflow", "mysql-pv-claim", State, "the data of the Pipelines and Katib databases and of the artifact store"},
		{"secrets", "kubeflow", "mysql-secret", State, "the credentials the moved databases and artifact store hold"},
		{"persistentvolumeclaims", "kubeflow", "data-pg-0", State, "holds database app-db"},
		{"secrets", "kubeflow", "pg", State, "credentials of database app-db"},
		{"secrets", "kubeflow", "other", Platform, "namespace of the release"},
		// Green keeps bucket models in a store of its own: the source store's claim and keys are not moved.
		{"persistentvolumeclaims", "kubeflow", "model-store", Platform, "namespace of the release"},
		{"secrets", "kubeflow", "model-store-keys", Platform, "namespace of the release"},
		{"customresourcedefinitions.apiextensions.k8s.io", "", "notebooks.kubeflow.org", Platform, "cluster-scoped, of the release (platform.clusterScoped)"},
		{"clusterroles.rbac.authorization.k8s.io", "", "team-a-admin", State, "listed in state.objects"},
		{"configmaps", "alice", "kfp-launcher", Platform, "made by the release's profile controller"},
		{"configmaps", "shared-data", "x", State, "listed in state.namespaces"},
		{"configmaps", "team-b", "x", State, "not part of the release"},
		{"namespaces", "", "team-b", State, "not part of the release"},
	} {
		side, why := s.Of(tc.gr, tc.namespace, tc.name)
		if side != tc.side || why != tc.why {
			t.Errorf("%s %s/%s: %s (%s), want %s (%s)", tc.gr, tc.namespace, tc.name, side, why, tc.side, tc.why)
		}
	}

	// Without a platform.clusterScoped, cluster-scoped objects are state: they move, as ferry
	// always moved them.
	bare := NewSides(config.Planning{Platform: config.ReleasePart{Namespaces: []string{"kubeflow"}}}, nil, nil)
	if side, _ := bare.Of("clusterroles.rbac.authorization.k8s.io", "", "x"); side != State {
		t.Errorf("a cluster-scoped object without clusterScoped: %s, want state", side)
	}
}
