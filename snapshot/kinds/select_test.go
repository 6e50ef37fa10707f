package kinds

import (
	"slices"
	"testing"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot"
)

func TestSelectedKeepsTheDataOfSelectedNamespaces(t *testing.T) {
	manifest := &snapshot.Manifest{
		Plan: &plans.Plan{Config: config.Planning{
			Databases: []config.Database{{Name: "kfp-mysql", Namespace: "kubeflow"}, {Name: "team-pg", Namespace: "team"}},
			Buckets:   []config.Bucket{{Name: "mlpipeline", Namespace: "kubeflow"}, {Name: "external", Endpoint: "https://s3.example.com"}},
		}},
		Name:      "b",
		Volumes:   []snapshot.Volume{{Namespace: "kubeflow", Name: "minio-pvc", Key: "volumes/kubeflow/minio-pvc.tar.zst"}, {Namespace: "team", Name: "workspace", Key: "volumes/team/workspace.tar.zst"}},
		Databases: []snapshot.Database{{Name: "kfp-mysql", Key: "databases/kfp-mysql.sql.zst"}, {Name: "team-pg", Key: "databases/team-pg.sql.zst"}, {Name: "unplaced", Key: "databases/unplaced.sql.zst"}},
		Streams: []snapshot.Stream{{Key: "b.tar.gz"}, {Key: "ferry-digest-key"}, {Key: "volumes/kubeflow/minio-pvc.tar.zst"}, {Key: "volumes/team/workspace.tar.zst"},
			{Key: "databases/kfp-mysql.sql.zst"}, {Key: "databases/team-pg.sql.zst"}, {Key: "databases/unplaced.sql.zst"}, {Key: "buckets/mlpipeline/k"}, {Key: "buckets/external/k"}},
		Buckets: []snapshot.Bucket{{Name: "mlpipeline", Prefix: "buckets/mlpipeline/"}, {Name: "external", Prefix: "buckets/external/"}},
		Skipped: []snapshot.Skipped{{Kind: "volume", Name: "kubeflow/pending"}, {Kind: "file", Name: "team/workspace:a/fifo"},
			{Kind: "database", Name: "kfp-mysql"}, {Kind: "object", Name: "v1 Pod kubeflow/x"}, {Kind: "bucket", Name: "mlpipeline earlier versions"}},
	}
	for _, tc := range []struct {
		name                       string
		selection                  config.Planning
		volumes, databases, bucket []string
		skipped, streams           int
	}{
		{"everything", config.Planning{},
			[]string{"kubeflow/minio-pvc", "team/workspace"}, []string{"kfp-mysql", "team-pg", "unplaced"}, []string{"mlpipeline", "external"}, 5, 9},
		{"one namespace", config.Planning{Include: config.Selection{Namespaces: []string{"team"}}},
			[]string{"team/workspace"}, []string{"team-pg", "unplaced"}, []string{"external"}, 2, 6},
		{"excluded namespace", config.Planning{Exclude: config.Selection{Namespaces: []string{"team"}}},
			[]string{"kubeflow/minio-pvc"}, []string{"kfp-mysql", "unplaced"}, []string{"mlpipeline", "external"}, 4, 7},
		{"no claims", config.Planning{Exclude: config.Selection{Resources: []string{"persistentvolumeclaims"}}},
			nil, []string{"kfp-mysql", "team-pg", "unplaced"}, []string{"mlpipeline", "external"}, 3, 7},
		{"labels select objects only", config.Planning{Include: config.Selection{LabelSelector: "app=web"}},
			[]string{"kubeflow/minio-pvc", "team/workspace"}, []string{"kfp-mysql", "team-pg", "unplaced"}, []string{"mlpipeline", "external"}, 5, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := plans.NewFilter(tc.selection)
			if err != nil {
				t.Fatal(err)
			}
			r := Selected(&snapshot.Reader{Manifest: manifest}, f)
			var volumes, databases, buckets []string
			for _, v := range r.Manifest.Volumes {
				volumes = append(volumes, v.Namespace+"/"+v.Name)
			}
			for _, d := range r.Manifest.Databases {
				databases = append(databases, d.Name)
			}
			for _, b := range r.Manifest.Buckets {
				buckets = append(buckets, b.Name)
			}
			if !slices.Equal(volumes, tc.volumes) || !slices.Equal(databases, tc.databases) || !slices.Equal(buckets, tc.bucket) {
				t.Errorf("kept volumes %v, databases %v, buckets %v; want %v, %v, %v", volumes, databases, buckets, tc.volumes, tc.databases, tc.bucket)
			}
			if len(r.Manifest.Streams) != tc.streams {
				t.Errorf("kept streams %+v, want %d of them: the objects', the backup's own and the kept items' files", r.Manifest.Streams, tc.streams)
			}
			if len(r.Manifest.Skipped) != tc.skipped {
				t.Errorf("kept skipped items %+v, want %d of them", r.Manifest.Skipped, tc.skipped)
			}
			if len(manifest.Volumes) != 2 || len(manifest.Databases) != 3 || len(manifest.Buckets) != 2 {
				t.Errorf("Selected changed the backup's own manifest: %+v", manifest)
			}
		})
	}
	if r := (&snapshot.Reader{Manifest: manifest}); Selected(r, nil) != r {
		t.Error("without a selection Selected should return the reader itself")
	}
}

// A Velero backup's volume data of a namespace the selection leaves out (kube-system, unless
// named) is neither restored nor named as skipped; a persistent volume's snapshot, of no
// namespace, stays named.
func TestSelectedVeleroVolumes(t *testing.T) {
	r := &snapshot.Reader{Manifest: &snapshot.Manifest{Name: "v"}, Velero: true, VeleroVolumes: []snapshot.Skipped{
		{Kind: "volume", Name: "kube-system/csi-node-x volume plugin-dir", Namespace: "kube-system"},
		{Kind: "volume", Name: "team/web-0 volume data", Namespace: "team"},
		{Kind: "volume", Name: "volumesnapshot other/snap-1", Namespace: "other"},
		{Kind: "volume", Name: "persistentvolume pv-1"},
	}}
	for _, tc := range []struct {
		name      string
		selection config.Planning
		want      []string
	}{
		{"everything", config.Planning{}, []string{"team/web-0 volume data", "volumesnapshot other/snap-1", "persistentvolume pv-1"}},
		{"one namespace", config.Planning{Include: config.Selection{Namespaces: []string{"team"}}}, []string{"team/web-0 volume data", "persistentvolume pv-1"}},
		{"kube-system named", config.Planning{Include: config.Selection{Namespaces: []string{"*", "kube-system"}}},
			[]string{"kube-system/csi-node-x volume plugin-dir", "team/web-0 volume data", "volumesnapshot other/snap-1", "persistentvolume pv-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := plans.NewFilter(tc.selection)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, v := range Selected(r, f).VeleroVolumes {
				got = append(got, v.Name)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Velero volumes %q, want %q", got, tc.want)
			}
		})
	}
}
