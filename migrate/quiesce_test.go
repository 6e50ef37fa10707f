package migrate

import (
	"testing"

	"github.com/ferrykube/ferry/plans/config"
)

func TestDataWorkloadsAreNeverImpliedWriters(t *testing.T) {
	cfg := config.Planning{
		Databases: []config.Database{{Name: "db", Namespace: "shop", Workload: "StatefulSet/mariadb"}, {Name: "pg", Namespace: "shop", Workload: "deployment/pg"}},
		Buckets:   []config.Bucket{{Name: "art", Namespace: "ml", Workload: "statefulset/minio"}, {Name: "s3", Endpoint: "https://s3.example"}},
	}
	got := dataWorkloads(cfg)
	for _, want := range [][3]string{{"statefulsets.apps", "shop", "mariadb"}, {"deployments.apps", "shop", "pg"}, {"statefulsets.apps", "ml", "minio"}} {
		if !got[want] {
			t.Errorf("%v is not among the data workloads %v", want, got)
		}
	}
	if len(got) != 3 {
		t.Errorf("data workloads %v, want 3", got)
	}
}
