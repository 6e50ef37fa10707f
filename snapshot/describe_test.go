package snapshot

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/plans"
)

func TestSummarize(t *testing.T) {
	start := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		m    Manifest
		want Summary
	}{{
		name: "empty backup",
		m:    Manifest{StartedAt: start, CompletedAt: start.Add(1500 * time.Millisecond)},
		want: Summary{StartedAt: start, CompletedAt: start.Add(1500 * time.Millisecond), DurationSeconds: 1.5,
			Kinds: []KindCount{}, Volumes: []VolumeSummary{}, Databases: []DatabaseSummary{}, Buckets: []BucketSummary{}, Skipped: []Skipped{}},
	}, {
		name: "objects by group and kind",
		m: Manifest{
			Objects: []Object{
				{Group: "apps", Kind: "Deployment", Name: "a"}, {Kind: "ConfigMap", Name: "a"}, {Group: "apps", Kind: "Deployment", Name: "b"},
				{Kind: "ConfigMap", Name: "b"}, {Kind: "ConfigMap", Name: "c"}, {Group: "kubeflow.org", Kind: "Profile", Name: "x"},
				// Same kind name in another group: counted apart.
				{Group: "example.com", Kind: "ConfigMap", Name: "d"},
			},
			Totals: Totals{Objects: 7, ObjectBytes: 700, StoredBytes: 300},
		},
		want: Summary{Objects: 7, ObjectBytes: 700, StoredBytes: 300,
			Kinds:   []KindCount{{"", "ConfigMap", 3}, {"apps", "Deployment", 2}, {"example.com", "ConfigMap", 1}, {"kubeflow.org", "Profile", 1}},
			Volumes: []VolumeSummary{}, Databases: []DatabaseSummary{}, Buckets: []BucketSummary{}, Skipped: []Skipped{}},
	}, {
		name: "volumes, databases, buckets and what they take in storage",
		m: Manifest{
			Volumes: []Volume{{Namespace: "alice", Name: "ws", Key: "volumes/alice/ws.tar.zst", Bytes: 30, Files: []File{
				{Path: "a", Type: "file", Size: 10}, {Path: "d/", Type: "dir"}, {Path: "d/b", Type: "file", Size: 20}, {Path: "l", Type: "symlink", Link: "a"},
				{Path: "empty", Type: "file"},
			}}},
			Databases: []Database{{Name: "kfp", Engine: "mysql", Key: "databases/kfp.sql.zst", Bytes: 4096, Schemas: []string{"a", "b"},
				Tables: []Table{{Schema: "a", Name: "t", Rows: 500}, {Schema: "a", Name: "u"}, {Schema: "b", Name: "v", Rows: 2}}}},
			Buckets: []Bucket{{Name: "mlpipeline", Prefix: "buckets/mlpipeline/", Bytes: 12, Objects: []BucketObject{{Key: "x", Size: 5}, {Key: "y/z", Size: 7}}},
				{Name: "empty", Prefix: "buckets/empty/"}},
			Streams: []Stream{{Key: "volumes/alice/ws.tar.zst", Bytes: 25}, {Key: "databases/kfp.sql.zst", Bytes: 800},
				{Key: "buckets/mlpipeline/x", Bytes: 5}, {Key: "buckets/mlpipeline/y/z", Bytes: 7}, {Key: "buckets/mlpipeline-old/q", Bytes: 99}},
		},
		want: Summary{Kinds: []KindCount{}, Skipped: []Skipped{},
			Volumes:   []VolumeSummary{{Namespace: "alice", Name: "ws", Files: 3, Bytes: 30, StoredBytes: 25}},
			Databases: []DatabaseSummary{{Name: "kfp", Engine: "mysql", Schemas: 2, Tables: 3, Rows: 502, DumpBytes: 4096, StoredBytes: 800}},
			Buckets:   []BucketSummary{{Name: "mlpipeline", Objects: 2, Bytes: 12, StoredBytes: 12}, {Name: "empty"}},
		},
	}, {
		name: "a chunked volume: its tree and file list stored, and the packs it added",
		m: Manifest{
			Volumes: []Volume{{Namespace: "alice", Name: "ws", Key: "volumes/alice/ws.tree.jsonl.zst", Format: FormatChunks, Repo: "metadata/ferry/repo/",
				NewPackBytes: 4000, List: &FileList{Key: "volume-files/alice/ws.jsonl.zst", Files: 2, FileBytes: 9000}}},
			Streams: []Stream{{Key: "volumes/alice/ws.tree.jsonl.zst", Bytes: 300}, {Key: "volume-files/alice/ws.jsonl.zst", Bytes: 200}},
		},
		want: Summary{Kinds: []KindCount{}, Skipped: []Skipped{}, Databases: []DatabaseSummary{}, Buckets: []BucketSummary{},
			Volumes: []VolumeSummary{{Namespace: "alice", Name: "ws", Files: 2, Bytes: 9000, StoredBytes: 500, Format: FormatChunks, NewPackBytes: 4000}},
		},
	}, {
		name: "encrypted, skipped items, source and tool",
		m: Manifest{
			Source: plans.Cluster{Context: "blue", Server: "https://blue"}, Encryption: &Encryption{Format: "age", Recipients: []string{"age1x"}},
			Skipped: []Skipped{{Kind: "volume", Name: "kubeflow/minio-pvc", Reason: "the claim is pending"}, {Kind: "database", Name: "pg", Reason: "no running pod"}},
			// A clock that went backwards gives no duration rather than a negative one.
			StartedAt: start, CompletedAt: start.Add(-time.Second),
		},
		want: Summary{Source: plans.Cluster{Context: "blue", Server: "https://blue"}, Encryption: &Encryption{Format: "age", Recipients: []string{"age1x"}},
			StartedAt: start, CompletedAt: start.Add(-time.Second),
			Kinds: []KindCount{}, Volumes: []VolumeSummary{}, Databases: []DatabaseSummary{}, Buckets: []BucketSummary{},
			Skipped: []Skipped{{Kind: "volume", Name: "kubeflow/minio-pvc", Reason: "the claim is pending"}, {Kind: "database", Name: "pg", Reason: "no running pod"}}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Summarize(&tt.m)
			tt.want.Protection = ProtectionOf(tt.m.Encryption) // what it says is checked by the CLI's description test
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Summarize:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestDescribeEachState(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)

	w, err := Create(ctx, store, "done", plans.Cluster{Context: "blue"}, &plans.Plan{}, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Put(ctx, "done.tar.gz", strings.NewReader("archive")); err != nil {
		t.Fatal(err)
	}
	w.AddObjects([]Object{{Version: "v1", Kind: "ConfigMap", Resource: "configmaps", Namespace: "a", Name: "c"}}, 10)
	w.Skip("volume", "a/data", "the claim is pending")
	if _, err := w.Commit(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(ctx, store, "half", plans.Cluster{}, &plans.Plan{}, time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC), nil); err != nil {
		t.Fatal(err)
	}
	if err := store.Put(ctx, Prefix("half")+"half.tar.gz", strings.NewReader("partial")); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(ctx, store, "running", plans.Cluster{}, &plans.Plan{}, time.Now(), nil); err != nil {
		t.Fatal(err)
	}
	beat, err := StartHeartbeat(ctx, store, "running", time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer beat.Stop(ctx)
	velero := `{"apiVersion":"velero.io/v1","kind":"Backup","metadata":{"name":"nightly"},"spec":{"includedNamespaces":["team-a"]},
"status":{"phase":"Completed","formatVersion":"1.1.0","startTimestamp":"2026-05-01T01:00:00Z","completionTimestamp":"2026-05-01T01:02:00Z","progress":{"totalItems":40,"itemsBackedUp":40},"warnings":1}}`
	if err := store.Put(ctx, Prefix("nightly")+VeleroFile, strings.NewReader(velero)); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name  string
		check func(t *testing.T, d *Description, err error)
	}{
		{"done", func(t *testing.T, d *Description, err error) {
			if err != nil || d.State != Complete || d.Summary == nil || d.Objects != 1 || len(d.Skipped) != 1 || d.Source.Context != "blue" || d.Files != 3 {
				t.Fatalf("complete backup: %+v (%v)", d, err)
			}
			// The summary's fields sit beside name and state in JSON.
			data, _ := json.Marshal(d)
			var flat map[string]any
			json.Unmarshal(data, &flat)
			if flat["state"] != "complete" || flat["objects"] != float64(1) || flat["velero"] != nil {
				t.Fatalf("JSON: %s", data)
			}
		}},
		{"half", func(t *testing.T, d *Description, err error) {
			if err != nil || d.State != Incomplete || d.Summary != nil || d.Files != 2 || d.ClaimedAt.IsZero() || d.Run != RunDead {
				t.Fatalf("incomplete backup: %+v (%v)", d, err)
			}
		}},
		{"running", func(t *testing.T, d *Description, err error) {
			if err != nil || d.State != Running || d.Run != RunLive || d.LastBeat.IsZero() {
				t.Fatalf("running backup: %+v (%v)", d, err)
			}
		}},
		{"nightly", func(t *testing.T, d *Description, err error) {
			if err != nil || d.State != Velero || d.Velero == nil || d.Velero.Phase != "Completed" || d.Velero.TotalItems != 40 ||
				d.Velero.Warnings != 1 || d.Velero.CompletedAt.Sub(d.Velero.StartedAt) != 2*time.Minute || d.Velero.IncludedNamespaces[0] != "team-a" {
				t.Fatalf("Velero backup: %+v (%v)", d, err)
			}
		}},
		{"missing", func(t *testing.T, d *Description, err error) {
			if !badinput.Is(err) || !strings.Contains(err.Error(), `no backup named "missing"`) {
				t.Fatalf("missing backup: %+v, %v; want bad input naming it", d, err)
			}
		}},
		{"Bad_Name", func(t *testing.T, d *Description, err error) {
			if !badinput.Is(err) {
				t.Fatalf("bad name: %v, want bad input", err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Describe(ctx, store, tt.name, time.Now())
			tt.check(t, d, err)
		})
	}
}
