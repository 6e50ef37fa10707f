package migrate

import (
	"testing"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot"
)

// A carry-back reads green's data where the run restored it and restores it where blue keeps it:
// a target section of the run's ferry.yaml is where green's copy is, and blue's place becomes the
// carry-back's target, named as blue names it.
func TestGreenConfigReversesTheDataTargets(t *testing.T) {
	cfg := config.Planning{
		NamespaceMap: map[string]string{"kubeflow": "kf"},
		Databases: []config.Database{
			{Name: "kfp", Engine: "mysql", Namespace: "kubeflow", Workload: "deployment/mysql", Target: &config.DatabaseTarget{Workload: "statefulset/kfp-db"}},
			{Name: "plain", Engine: "mysql", Namespace: "kubeflow", Workload: "deployment/mysql"},
		},
		Buckets: []config.Bucket{{Name: "mlpipeline", Namespace: "kubeflow", Workload: "deployment/minio", Port: 9000,
			Target: &config.BucketTarget{Workload: "deployment/seaweedfs", Port: 8333}}},
	}
	r := &Runner{o: Options{Mapping: snapshot.Mapping{}}, plan: &plans.Plan{Config: cfg}}
	got := r.greenConfig()
	kfp, plain, bucket := got.Databases[0], got.Databases[1], got.Buckets[0]
	if kfp.Namespace != "kf" || kfp.Workload != "statefulset/kfp-db" || kfp.Target == nil || kfp.Target.Namespace != "kubeflow" || kfp.Target.Workload != "deployment/mysql" {
		t.Errorf("database kfp in green's configuration: %+v (target %+v)", kfp, kfp.Target)
	}
	if plain.Namespace != "kf" || plain.Workload != "deployment/mysql" || plain.Target != nil {
		t.Errorf("database plain in green's configuration: %+v", plain)
	}
	if bucket.Namespace != "kf" || bucket.Workload != "deployment/seaweedfs" || bucket.Port != 8333 || bucket.Target == nil ||
		bucket.Target.Namespace != "kubeflow" || bucket.Target.Workload != "deployment/minio" || bucket.Target.Port != 9000 {
		t.Errorf("bucket in green's configuration: %+v (target %+v)", bucket, bucket.Target)
	}
	if cfg.Databases[0].Namespace != "kubeflow" || cfg.Buckets[0].Target.Port != 8333 {
		t.Errorf("greenConfig changed the run's configuration: %+v", cfg)
	}
}

// A claim of blue's that held a bucket's files stays out of the carry-back when green keeps the
// bucket in another store: green's copy of the claim is empty, and carried back it would replace
// the files of blue's MinIO.
func TestKeepHeld(t *testing.T) {
	run := &plans.Plan{Volumes: []plans.Volume{{Namespace: "kubeflow", Name: "minio-pvc", Holds: "bucket mlpipeline"}, {Namespace: "kubeflow", Name: "notes"}}}
	green := &plans.Plan{Volumes: []plans.Volume{{Namespace: "kf", Name: "minio-pvc"}, {Namespace: "kf", Name: "notes"}, {Namespace: "kf", Name: "seaweedfs-data", Holds: "bucket mlpipeline"}}}
	keepHeld(green, run, snapshot.Mapping{Namespaces: map[string]string{"kubeflow": "kf"}})
	for i, want := range []string{"bucket mlpipeline", "", "bucket mlpipeline"} {
		if got := green.Volumes[i].Holds; got != want {
			t.Errorf("green's claim %s holds %q, want %q", green.Volumes[i].Name, got, want)
		}
	}
}
