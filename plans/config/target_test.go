package config

import (
	"reflect"
	"testing"
)

func TestDataOnTargetAndReversed(t *testing.T) {
	mapNS := func(ns string) string {
		if ns == "kubeflow" {
			return "kf"
		}
		return ns
	}
	minio := &SecretRef{Name: "minio-creds"}
	weed := &SecretRef{Name: "weed-creds"}
	for _, tc := range []struct {
		name           string
		bucket         Bucket
		onTarget, back Bucket
	}{{
		name:     "no target: the source's place, mapped",
		bucket:   Bucket{Name: "b", Namespace: "kubeflow", Workload: "deployment/minio", Port: 9000, Secret: minio},
		onTarget: Bucket{Name: "b", Namespace: "kf", Workload: "deployment/minio", Port: 9000, Secret: minio},
		back:     Bucket{Name: "b", Namespace: "kf", Workload: "deployment/minio", Port: 9000, Secret: minio},
	}, {
		name:     "another workload in the mapped namespace",
		bucket:   Bucket{Name: "b", Namespace: "kubeflow", Workload: "deployment/minio", Port: 9000, Secret: minio, Target: &BucketTarget{Workload: "deployment/seaweedfs", Port: 8333, Secret: weed}},
		onTarget: Bucket{Name: "b", Namespace: "kf", Workload: "deployment/seaweedfs", Port: 8333, Secret: weed},
		back: Bucket{Name: "b", Namespace: "kf", Workload: "deployment/seaweedfs", Port: 8333, Secret: weed,
			Target: &BucketTarget{Namespace: "kubeflow", Workload: "deployment/minio", Port: 9000, Secret: minio}},
	}, {
		name:     "an endpoint in place of a workload, the secret kept",
		bucket:   Bucket{Name: "b", Namespace: "kubeflow", Workload: "deployment/minio", Port: 9000, Secret: minio, Target: &BucketTarget{Endpoint: "https://s3.example"}},
		onTarget: Bucket{Name: "b", Namespace: "kf", Endpoint: "https://s3.example", Secret: minio},
		back: Bucket{Name: "b", Namespace: "kf", Endpoint: "https://s3.example", Secret: minio,
			Target: &BucketTarget{Namespace: "kubeflow", Workload: "deployment/minio", Port: 9000, Secret: minio}},
	}, {
		name:     "a namespace of the target's own is not mapped",
		bucket:   Bucket{Name: "b", Namespace: "kubeflow", Workload: "deployment/minio", Port: 9000, Target: &BucketTarget{Namespace: "kubeflow", Port: 9001}},
		onTarget: Bucket{Name: "b", Namespace: "kubeflow", Workload: "deployment/minio", Port: 9001},
		back:     Bucket{Name: "b", Namespace: "kubeflow", Workload: "deployment/minio", Port: 9001, Target: &BucketTarget{Namespace: "kubeflow", Workload: "deployment/minio", Port: 9000, WithoutSecret: true}},
	}, {
		name:     "anonymous on the target",
		bucket:   Bucket{Name: "b", Endpoint: "https://s3.example", Secret: minio, Target: &BucketTarget{Endpoint: "https://other.example", WithoutSecret: true}},
		onTarget: Bucket{Name: "b", Endpoint: "https://other.example"},
		back:     Bucket{Name: "b", Endpoint: "https://other.example", Target: &BucketTarget{Endpoint: "https://s3.example", Secret: minio}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.bucket.OnTarget(mapNS); !reflect.DeepEqual(got, tc.onTarget) {
				t.Errorf("OnTarget = %+v, want %+v", got, tc.onTarget)
			}
			back := tc.bucket.Reversed(mapNS)
			if !reflect.DeepEqual(back, tc.back) {
				t.Errorf("Reversed = %+v, want %+v", back, tc.back)
			}
			// A copy back reaches the source's own place, whatever the mapping back would do.
			if tc.bucket.Target != nil {
				want := tc.bucket
				want.Target = nil
				if got := back.OnTarget(func(string) string { return "elsewhere" }); !reflect.DeepEqual(got, want) {
					t.Errorf("Reversed then OnTarget = %+v, want the source's %+v", got, want)
				}
			}
		})
	}

	db := Database{Name: "kfp", Engine: "mysql", Namespace: "kubeflow", Workload: "deployment/mysql", Container: "mysql", Schemas: []string{"mlpipeline"},
		Target: &DatabaseTarget{Workload: "statefulset/kfp-db", Secret: weed}}
	want := Database{Name: "kfp", Engine: "mysql", Namespace: "kf", Workload: "statefulset/kfp-db", Schemas: []string{"mlpipeline"}, Secret: weed}
	if got := db.OnTarget(mapNS); !reflect.DeepEqual(got, want) {
		t.Errorf("database OnTarget = %+v, want %+v (the container goes with the source's workload)", got, want)
	}
	source := db
	source.Target = nil
	if got := db.Reversed(mapNS).OnTarget(mapNS); !reflect.DeepEqual(got, source) {
		t.Errorf("database Reversed then OnTarget = %+v, want the source's %+v", got, source)
	}
	if got := (Database{Namespace: "kubeflow", Container: "c", Target: &DatabaseTarget{Container: "d"}}).OnTarget(mapNS); got.Container != "d" || got.Namespace != "kf" {
		t.Errorf("a target's container alone: %+v", got)
	}

	planning := Planning{NamespaceMap: map[string]string{"kubeflow": "kf"}, Databases: []Database{db, {Name: "plain", Namespace: "kubeflow", Workload: "deployment/pg"}},
		Buckets: []Bucket{{Name: "b", Namespace: "kubeflow", Workload: "deployment/minio", Port: 9000, Target: &BucketTarget{Workload: "deployment/seaweedfs", Port: 8333}}}}
	for _, tc := range []struct{ kind, name, want string }{
		{"database", "kfp", "kf/statefulset/kfp-db"}, {"database", "plain", ""}, {"bucket", "b", "kf/deployment/seaweedfs:8333"}, {"bucket", "none", ""},
	} {
		if got := planning.TargetOf(tc.kind, tc.name); got != tc.want {
			t.Errorf("TargetOf(%s %s) = %q, want %q", tc.kind, tc.name, got, tc.want)
		}
	}
}

func TestWithTargetsOf(t *testing.T) {
	backup := Planning{
		Databases: []Database{{Name: "kfp", Namespace: "kubeflow", Workload: "deployment/mysql", Target: &DatabaseTarget{Workload: "statefulset/old"}}, {Name: "katib", Namespace: "kubeflow", Workload: "deployment/katib-mysql"}},
		Buckets:   []Bucket{{Name: "mlpipeline", Namespace: "kubeflow", Workload: "deployment/minio", Port: 9000}},
	}
	weed := &BucketTarget{Workload: "deployment/seaweedfs", Port: 8333}
	got, err := backup.WithTargetsOf(Planning{Databases: []Database{{Name: "kfp"}}, Buckets: []Bucket{{Name: "mlpipeline", Target: weed}}})
	if err != nil {
		t.Fatal(err)
	}
	if got.Databases[0].Target != nil || got.Databases[1].Target != nil || got.Buckets[0].Target != weed || got.Buckets[0].Workload != "deployment/minio" {
		t.Errorf("WithTargetsOf = %+v", got)
	}
	if backup.Databases[0].Target == nil || backup.Buckets[0].Target != nil {
		t.Errorf("WithTargetsOf changed the backup's configuration: %+v", backup)
	}
	if _, err := backup.WithTargetsOf(Planning{Buckets: []Bucket{{Name: "mlpipelin", Target: weed}}}); err == nil || err.Error() != `buckets[0]: the backup holds no bucket "mlpipelin"` {
		t.Errorf("a bucket the backup lacks: %v", err)
	}
}
