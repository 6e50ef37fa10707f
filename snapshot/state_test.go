package snapshot

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/storage"
)

const veleroMeta = `{"apiVersion":"velero.io/v1","kind":"Backup","metadata":{"name":"%s"},"status":{"phase":"Completed","formatVersion":"1.1.0"}}`

// killedBeforeManifest leaves what a ferry killed between velero-backup.json and its manifest
// leaves: claim, archive, Velero's metadata, and a heartbeat that is stale at now+1h.
func killedBeforeManifest(t *testing.T, store storage.Backend, name string) {
	t.Helper()
	ctx := context.Background()
	w, err := Create(ctx, store, name, plans.Cluster{}, &plans.Plan{}, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	bctx, kill := context.WithCancel(ctx)
	defer kill()
	if _, err := StartHeartbeat(bctx, store, name, time.Second, nil); err != nil {
		t.Fatal(err)
	}
	kill()
	if _, err := w.Put(ctx, name+".tar.gz", strings.NewReader("archive")); err != nil {
		t.Fatal(err)
	}
	if err := w.PutPlain(ctx, VeleroFile, strings.NewReader(strings.Replace(veleroMeta, "%s", name, 1))); err != nil {
		t.Fatal(err)
	}
}

// A claim without a manifest is a ferry backup that did not finish: listed, described and kept
// by prune as incomplete (running while its heartbeat is fresh), and never read as Velero's.
func TestClaimWithoutManifestIsNeverVelero(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	killedBeforeManifest(t, store, "killed")
	later := time.Now().Add(time.Hour)

	infos, err := List(ctx, store)
	if err != nil || len(infos) != 1 || infos[0].State == Velero {
		t.Fatalf("list: %+v, %v; want one backup, not velero", infos, err)
	}
	if infos[0].State != Incomplete && infos[0].State != Running {
		t.Errorf("list: %s, want incomplete or running", infos[0].State)
	}
	d, err := Describe(ctx, store, "killed", later)
	if err != nil || d.State != Incomplete || d.Velero != nil || d.Run != RunDead {
		t.Errorf("describe: %+v, %v; want incomplete, its run dead", d, err)
	}
	entries, err := History(ctx, store, later)
	if err != nil || len(entries) != 1 || entries[0].State != Incomplete {
		t.Fatalf("history: %+v, %v; want incomplete", entries, err)
	}
	ds := Policy{Last: 1, Grace: time.Minute}.Apply(entries, later)
	if len(ds) != 1 || ds[0].Keep {
		t.Errorf("prune, an hour later with a minute's grace: %+v; want removed", ds)
	}

	// Tampered with: the archive is replaced. Restore and verify must not read it.
	if err := store.Put(ctx, Prefix("killed")+"killed.tar.gz", strings.NewReader("tampered")); err != nil {
		t.Fatal(err)
	}
	r, err := Open(ctx, store, "killed", nil)
	// Its heartbeat may still be fresh: either way it is refused.
	if err == nil || !badinput.Is(err) || !strings.Contains(err.Error(), "incomplete") && !strings.Contains(err.Error(), "still being written") {
		t.Fatalf("Open of an incomplete backup: %+v, %v; want bad input saying it is incomplete", r, err)
	}
}

// A running backup (fresh heartbeat) lists as running, and cannot be opened.
func TestRunningBackup(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	if _, err := Create(ctx, store, "live", plans.Cluster{}, &plans.Plan{}, time.Now(), nil); err != nil {
		t.Fatal(err)
	}
	beat, err := StartHeartbeat(ctx, store, "live", time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer beat.Stop(ctx)
	if err := store.Put(ctx, Prefix("live")+VeleroFile, strings.NewReader(strings.Replace(veleroMeta, "%s", "live", 1))); err != nil {
		t.Fatal(err)
	}
	infos, err := List(ctx, store)
	if err != nil || len(infos) != 1 || infos[0].State != Running {
		t.Fatalf("list: %+v, %v; want running", infos, err)
	}
	d, err := Describe(ctx, store, "live", time.Now())
	if err != nil || d.State != Running || d.Run != RunLive {
		t.Fatalf("describe: %+v, %v", d, err)
	}
	if _, err := Open(ctx, store, "live", nil); !badinput.Is(err) || !strings.Contains(err.Error(), "still being written") {
		t.Fatalf("Open of a running backup: %v", err)
	}
}

// completeWithManifest writes a complete backup with velero-backup.json, then replaces its
// manifest with data.
func completeWithManifest(t *testing.T, store storage.Backend, name string, edit func(m map[string]any) []byte) {
	t.Helper()
	ctx := context.Background()
	w, err := Create(ctx, store, name, plans.Cluster{}, &plans.Plan{}, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Put(ctx, name+".tar.gz", strings.NewReader("archive")); err != nil {
		t.Fatal(err)
	}
	if err := w.PutPlain(ctx, VeleroFile, strings.NewReader(strings.Replace(veleroMeta, "%s", name, 1))); err != nil {
		t.Fatal(err)
	}
	w.SetVeleroCompatible(true)
	m, err := w.Commit(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(m)
	var doc map[string]any
	json.Unmarshal(data, &doc)
	if err := store.Put(ctx, Prefix(name)+ManifestFile, bytes.NewReader(edit(doc))); err != nil {
		t.Fatal(err)
	}
}

// A manifest that is there but cannot be read, or fails its checks, is an error: never a
// fallback to the backup's Velero files.
func TestCorruptManifestIsAnError(t *testing.T) {
	ctx := context.Background()
	marshal := func(m map[string]any) []byte { data, _ := json.Marshal(m); return data }
	for _, tt := range []struct {
		name string
		edit func(m map[string]any) []byte
		want string
	}{
		{"garbage", func(map[string]any) []byte { return []byte("\x00\x01not json") }, ManifestFile},
		{"truncated", func(m map[string]any) []byte { d := marshal(m); return d[:len(d)/2] }, ManifestFile},
		{"empty", func(map[string]any) []byte { return nil }, ManifestFile},
		{"no-format-version", func(m map[string]any) []byte { delete(m, "formatVersion"); return marshal(m) }, "formatVersion"},
		{"bad-stream-sum", func(m map[string]any) []byte {
			m["streams"].([]any)[0].(map[string]any)["sha256"] = "zz"
			return marshal(m)
		}, "sha256"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store := newStore(t)
			completeWithManifest(t, store, tt.name, tt.edit)
			r, err := Open(ctx, store, tt.name, nil)
			if err == nil || (r != nil && r.Velero) {
				t.Fatalf("Open: %+v, %v; want an error", r, err)
			}
			if !strings.Contains(err.Error(), tt.name) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Open: %v; want it to name the backup and %q", err, tt.want)
			}
			if _, err := Describe(ctx, store, tt.name, time.Now()); err == nil {
				t.Errorf("Describe: no error")
			}
			// A manifest whose head is sound lists as complete; the rest is checked when read.
			infos, err := List(ctx, store)
			if len(infos) != 1 || infos[0].State == Velero || (infos[0].State == Unreadable) != (err != nil) {
				t.Errorf("List: %+v, %v", infos, err)
			}
			if tt.name != "bad-stream-sum" && tt.name != "truncated" && infos[0].State != Unreadable {
				t.Errorf("List: %+v; want it unreadable", infos)
			}
			if _, err := History(ctx, store, time.Now()); (err != nil) != (infos[0].State == Unreadable) {
				t.Errorf("History: %v", err)
			}
		})
	}
}

// A manifest of a newer format than this ferry reads is refused, naming both versions.
func TestNewerFormatVersionRefused(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	completeWithManifest(t, store, "future", func(m map[string]any) []byte {
		m["formatVersion"] = "99"
		data, _ := json.Marshal(m)
		return data
	})
	for what, err := range map[string]error{
		"Open":         func() error { _, err := Open(ctx, store, "future", nil); return err }(),
		"ReadManifest": func() error { _, err := ReadManifest(ctx, store, "future"); return err }(),
		"Describe":     func() error { _, err := Describe(ctx, store, "future", time.Now()); return err }(),
	} {
		if !badinput.Is(err) || !strings.Contains(err.Error(), "format version 99") || !strings.Contains(err.Error(), "format version "+FormatVersion) {
			t.Errorf("%s: %v; want bad input naming format version 99 and %s", what, err, FormatVersion)
		}
	}
	// Still a complete backup to list and prune.
	if infos, err := List(ctx, store); err != nil || len(infos) != 1 || infos[0].State != Complete {
		t.Errorf("list: %+v, %v", infos, err)
	}
}

// recorder remembers the keys a backend deletes, in order.
type recorder struct {
	storage.Backend
	deleted []string
}

func (r *recorder) Delete(ctx context.Context, key string) error {
	r.deleted = append(r.deleted, strings.TrimPrefix(key, "backups/"))
	return r.Backend.Delete(ctx, key)
}

// Delete removes the manifest, then velero-backup.json, and ferry's claim last: whatever an
// interrupted delete leaves is incomplete.
func TestDeleteOrder(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	completeWithManifest(t, store, "b", func(m map[string]any) []byte { data, _ := json.Marshal(m); return data })
	for _, f := range []string{"a-first", "volumes/x.tar.zst", "zz-last"} {
		if err := store.Put(ctx, Prefix("b")+f, strings.NewReader("x")); err != nil {
			t.Fatal(err)
		}
	}
	rec := &recorder{Backend: store}
	if _, err := Delete(ctx, rec, "b"); err != nil {
		t.Fatal(err)
	}
	n := len(rec.deleted)
	if n < 4 || rec.deleted[0] != "b/"+ManifestFile || rec.deleted[1] != "b/"+VeleroFile || rec.deleted[n-1] != "b/"+ClaimFile {
		t.Fatalf("delete order: %v; want the manifest, velero-backup.json, ..., the claim", rec.deleted)
	}
}

func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		files []string
		fresh bool
		want  string
	}{
		{[]string{ManifestFile, ClaimFile, VeleroFile}, false, Complete},
		{[]string{ManifestFile}, false, Complete},
		{[]string{ClaimFile, VeleroFile, "b.tar.gz"}, false, Incomplete},
		{[]string{ClaimFile, HeartbeatFile, VeleroFile}, true, Running},
		{[]string{HeartbeatFile, VeleroFile}, false, Incomplete},
		{[]string{VeleroFile, "b.tar.gz"}, false, Velero},
		{[]string{"b.tar.gz"}, false, Incomplete},
		{nil, false, Incomplete},
	} {
		files := map[string]bool{}
		for _, f := range tt.files {
			files[f] = true
		}
		if got := Classify(files, tt.fresh); got != tt.want {
			t.Errorf("Classify(%v, fresh %v) = %s, want %s", tt.files, tt.fresh, got, tt.want)
		}
	}
}

// A backup Velero wrote: its pod volume backups and snapshots are the volume data ferry does not
// read, each named; without them there is none; a file of them that cannot be read is an error.
func TestVeleroVolumes(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	gz := func(s string) []byte {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write([]byte(s))
		zw.Close()
		return b.Bytes()
	}
	put := func(name, file string, data []byte) {
		if err := store.Put(ctx, Prefix(name)+file, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"plain", "pvb", "broken"} {
		put(name, VeleroFile, []byte(strings.Replace(veleroMeta, "%s", name, 1)))
		put(name, name+".tar.gz", gz(""))
	}
	put("plain", "plain-podvolumebackups.json.gz", gz("null"))
	put("pvb", "pvb-podvolumebackups.json.gz", gz(`[{"spec":{"pod":{"namespace":"a","name":"web-0"},"volume":"data"}}]`))
	put("pvb", "pvb-volumesnapshots.json.gz", gz(`[{"spec":{"persistentVolumeName":"pv-1"}}]`))
	put("pvb", "pvb-csi-volumesnapshots.json.gz", gz(`[{"metadata":{"namespace":"a","name":"snap-1"}}]`))
	put("broken", "broken-podvolumebackups.json.gz", []byte("not gzip"))

	r, err := Open(ctx, store, "plain", nil)
	if err != nil || !r.Velero || len(r.VeleroVolumes) != 0 {
		t.Fatalf("plain: %+v, %v; want a Velero backup without volume data", r, err)
	}
	r, err = Open(ctx, store, "pvb", nil)
	if err != nil || len(r.VeleroVolumes) != 3 || r.VeleroVolumes[0].Name != "a/web-0 volume data" ||
		r.VeleroVolumes[1].Name != "persistentvolume pv-1" || r.VeleroVolumes[2].Name != "volumesnapshot a/snap-1" {
		t.Fatalf("pvb: %+v, %v", r.VeleroVolumes, err)
	}
	if d, err := Describe(ctx, store, "pvb", time.Now()); err != nil || len(d.VeleroVolumes) != 3 {
		t.Fatalf("describe pvb: %+v, %v", d, err)
	}
	if _, err := Open(ctx, store, "broken", nil); err == nil || !strings.Contains(err.Error(), "broken-podvolumebackups.json.gz") {
		t.Fatalf("broken: %v; want an error naming the file", err)
	}
}
