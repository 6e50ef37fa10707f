package snapshot

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/ferrykube/ferry/plans"
)

// realManifests are manifests as ferry writes them: a Velero-compatible backup and an encrypted
// one, with objects, volumes, databases, buckets and skipped items.
func realManifests(f *testing.F) [][]byte {
	ctx := context.Background()
	store := newStore(f)
	id, err := age.GenerateX25519Identity()
	if err != nil {
		f.Fatal(err)
	}
	var out [][]byte
	for name, recipients := range map[string][]string{"b": nil, "enc": {id.Recipient().String()}} {
		w, err := Create(ctx, store, name, plans.Cluster{Context: "blue", Server: "https://blue:6443", UID: "u-1"}, &plans.Plan{APIVersion: plans.APIVersion, Kind: plans.Kind}, time.Now(), recipients)
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range []string{name + ".tar.gz", "volumes/ns/data.tar.zst", "databases/kfp.sql.zst", "buckets/mlpipeline/k"} {
			if _, err := w.Put(ctx, file, strings.NewReader("data")); err != nil {
				f.Fatal(err)
			}
		}
		w.AddObjects([]Object{{Group: "apps", Version: "v1", Kind: "Deployment", Resource: "deployments", Namespace: "ns", Name: "web", SHA256: strings.Repeat("a", 64)}}, 100)
		w.AddVolume(Volume{Namespace: "ns", Name: "data", Key: "volumes/ns/data.tar.zst", Bytes: 4, Files: []File{{Path: "a", Type: "file", Mode: "0644", Size: 4, SHA256: strings.Repeat("b", 64)}}})
		w.AddDatabase(Database{Name: "kfp", Engine: "mysql", Key: "databases/kfp.sql.zst", Bytes: 4, Schemas: []string{"kfp"}, Tables: []Table{{Schema: "kfp", Name: "t", Rows: 1, Checksum: "1"}}})
		w.AddBucket(Bucket{Name: "mlpipeline", Prefix: "buckets/mlpipeline/", Bytes: 4, Objects: []BucketObject{{Key: "k", Size: 4, SHA256: strings.Repeat("c", 64)}}})
		w.Skip("volume", "ns/cache", "the claim is pending")
		w.SetSchedule("nightly")
		if _, err := w.Commit(ctx, time.Now()); err != nil {
			f.Fatal(err)
		}
		rc, err := store.Get(ctx, Prefix(name)+ManifestFile)
		if err != nil {
			f.Fatal(err)
		}
		data, _ := io.ReadAll(rc)
		rc.Close()
		out = append(out, bytes.ReplaceAll(data, []byte(`"name": "`+name+`"`), []byte(`"name": "b"`)))
	}
	return out
}

// FuzzManifest: no manifest makes the reader panic, and every error names the backup and the
// manifest file.
func FuzzManifest(f *testing.F) {
	for _, m := range realManifests(f) {
		f.Add(m)
		f.Add(m[:len(m)/2])
		f.Add(bytes.Replace(m, []byte(`"formatVersion": "`+FormatVersion+`"`), []byte(`"formatVersion": "99"`), 1))
		f.Add(bytes.Replace(m, []byte(`"formatVersion": "`+FormatVersion+`"`), []byte(`"formatVersion": "1"`), 1))
	}
	f.Add([]byte(`{"completedAt":"2026-01-01T00:00:00Z","name":"b","formatVersion":"1","startedAt":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeManifest(bytes.NewReader(data), "b")
		if err != nil {
			if msg := err.Error(); !strings.Contains(msg, "backup b") {
				t.Fatalf("error does not name the backup: %v", err)
			}
		} else {
			Summarize(m)
			if m.Name != "b" {
				t.Fatalf("accepted a manifest of backup %q", m.Name)
			}
		}
		if _, err := decodeHead(bytes.NewReader(data), "b"); err != nil {
			if msg := err.Error(); !strings.Contains(msg, "backup b") || !strings.Contains(msg, ManifestFile) {
				t.Fatalf("head: error does not name the backup and its manifest: %v", err)
			}
		}
	})
}
