package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/storage"
	"github.com/klauspost/compress/zstd"
)

// listFiles are entries of every kind, with names a JSON string cannot hold.
func listFiles(n int) []File {
	at := time.Date(2026, 3, 1, 2, 0, 0, 123, time.UTC)
	out := []File{
		{Path: "notebooks/", Type: "dir", Mode: "0755", UID: 1000, GID: 100, ModTime: at},
		{Path: "notebooks/train.ipynb", Type: "file", Mode: "0644", Size: 30, ModTime: at, SHA256: strings.Repeat("a", 64)},
		{Path: "notebooks/again.ipynb", Type: "file", Mode: "0644", Size: 30, ModTime: at, SHA256: strings.Repeat("a", 64), Hardlink: "notebooks/train.ipynb"},
		{Path: "latin1-\xe9t\xe9.txt", Type: "file", Mode: "0600", Size: 2, ModTime: at, SHA256: strings.Repeat("b", 64)},
		{Path: "current", Type: "symlink", Mode: "0777", ModTime: at, Link: "notebooks/train.ipynb"},
		{Path: "pipe", Type: "fifo", Mode: "0600", ModTime: at},
	}
	for i := len(out); i < n; i++ {
		out = append(out, File{Path: fmt.Sprintf("many/file-%07d", i), Type: "file", Mode: "0644", Size: 1, ModTime: at, SHA256: strings.Repeat("c", 64)})
	}
	return out
}

// writeListBackup writes a complete backup of one volume whose file list holds files.
func writeListBackup(t *testing.T, store storage.Backend, name string, recipients []string, files []File) *Manifest {
	t.Helper()
	ctx := context.Background()
	w, err := Create(ctx, store, name, plans.Cluster{}, &plans.Plan{}, time.Now(), recipients)
	if err != nil {
		t.Fatal(err)
	}
	key, err := w.Put(ctx, "volumes/ns/data.tar.zst", strings.NewReader("tar"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := w.NewFileList(ctx, "ns", "data")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if err := l.Add(f); err != nil {
			t.Fatal(err)
		}
	}
	list, err := l.Close()
	if err != nil {
		t.Fatal(err)
	}
	w.AddVolume(Volume{Namespace: "ns", Name: "data", Key: key, Bytes: 32, List: &list})
	m, err := w.Commit(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func readList(t *testing.T, r *Reader, v Volume) ([]File, error) {
	t.Helper()
	var got []File
	err := r.VolumeFiles(context.Background(), v, func(f File) error {
		got = append(got, f)
		return nil
	})
	return got, err
}

// A volume's files are a stream of their own, encrypted when the backup is: the manifest holds
// their totals, not their names, and the reader hands them back as written.
func TestFileListRoundTrip(t *testing.T) {
	ctx := context.Background()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		files      int
		recipients []string
		identities []age.Identity
		wantKey    string
	}{
		{"plain", 6, nil, nil, "volume-files/ns/data.jsonl.zst"},
		{"encrypted", 6, []string{id.Recipient().String()}, []age.Identity{id}, "volume-files/ns/data.jsonl.zst.age"},
		{"many", 5000, nil, nil, "volume-files/ns/data.jsonl.zst"},
		{"empty", 0, nil, nil, "volume-files/ns/data.jsonl.zst"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newStore(t)
			files := listFiles(tc.files)[:tc.files]
			m := writeListBackup(t, store, "b", tc.recipients, files)
			v := m.Volumes[0]
			var wantFiles, wantBytes int64
			for _, f := range files {
				if f.Type == "file" {
					wantFiles++
					wantBytes += f.Size
				}
			}
			if v.List == nil || v.List.Key != tc.wantKey || v.List.Entries != int64(len(files)) || v.List.Files != wantFiles || v.List.FileBytes != wantBytes || v.Files != nil {
				t.Fatalf("volume %+v, list %+v; want %s of %d entries, %d files of %d bytes", v, v.List, tc.wantKey, len(files), wantFiles, wantBytes)
			}
			rc, err := store.Get(ctx, Prefix("b")+ManifestFile)
			if err != nil {
				t.Fatal(err)
			}
			manifest, _ := io.ReadAll(rc)
			rc.Close()
			for _, f := range files[:min(len(files), 6)] {
				if bytes.Contains(manifest, []byte(f.Path)) || f.SHA256 != "" && bytes.Contains(manifest, []byte(f.SHA256)) {
					t.Errorf("the manifest names %q or its digest", f.Path)
				}
			}
			r, err := Open(ctx, store, "b", tc.identities)
			if err != nil {
				t.Fatal(err)
			}
			got, err := readList(t, r, r.Manifest.Volumes[0])
			if err != nil || !reflect.DeepEqual(got, files) && len(files) > 0 {
				t.Fatalf("read back %d entries, %v; want %d as written", len(got), err, len(files))
			}
			if d := Summarize(r.Manifest); d.Volumes[0].Files != int(wantFiles) || d.Volumes[0].Bytes != wantBytes || d.Volumes[0].StoredBytes <= 0 {
				t.Errorf("summary %+v", d.Volumes[0])
			}
			if kind, name := r.Manifest.ItemOf(tc.wantKey); kind != "volumes" || name != "ns/data" {
				t.Errorf("the list is the item %s %s, want volumes ns/data", kind, name)
			}
		})
	}
}

// A list stream that does not match the manifest, or a manifest whose lists do not match its
// format, is never taken for the volume's files.
func TestFileListRefused(t *testing.T) {
	ctx := context.Background()
	key := "volume-files/ns/data.jsonl.zst"
	compressed := func(lines string) []byte {
		var buf bytes.Buffer
		enc, _ := zstd.NewWriter(&buf)
		enc.Write([]byte(lines))
		enc.Close()
		return buf.Bytes()
	}
	for _, tc := range []struct {
		name string
		// stream replaces the stored list (and, with record, its record in the manifest)
		stream []byte
		record bool
		edit   func(m map[string]any)
		want   error
	}{
		{name: "truncated", stream: []byte("x"), want: ErrCorrupt},
		{name: "another list, recorded", stream: compressed(`{"path":"other","type":"file","mode":"0644","uid":0,"gid":0,"modTime":"2026-03-01T02:00:00Z"}` + "\n"), record: true, want: ErrCorrupt},
		{name: "not JSON, recorded", stream: compressed("{\n"), record: true, want: ErrCorrupt},
		{name: "no list in format 4", edit: func(m map[string]any) { delete(volume(m), "list") }, want: ErrBadManifest},
		{name: "files inline and a list", edit: func(m map[string]any) {
			volume(m)["files"] = []any{map[string]any{"path": "a", "type": "file", "mode": "0644", "modTime": "2026-03-01T02:00:00Z"}}
		}, want: ErrBadManifest},
		{name: "a list in format 3", edit: func(m map[string]any) { m["formatVersion"] = "3" }, want: ErrBadManifest},
		{name: "another claim's list", edit: func(m map[string]any) { volume(m)["list"].(map[string]any)["key"] = "volume-files/ns/other.jsonl.zst" }, want: ErrBadManifest},
		{name: "an unknown volume format", edit: func(m map[string]any) { volume(m)["format"] = "zip" }, want: ErrBadManifest},
		{name: "chunks in format 4", edit: func(m map[string]any) {
			m["formatVersion"] = "4"
			volume(m)["format"], volume(m)["repo"] = FormatChunks, "metadata/ferry/repo/"
		}, want: ErrBadManifest},
		{name: "a chunk repository elsewhere", edit: func(m map[string]any) {
			volume(m)["format"], volume(m)["repo"] = FormatChunks, "backups/other/"
		}, want: ErrBadManifest},
		{name: "a repository without chunks", edit: func(m map[string]any) { volume(m)["repo"] = "metadata/ferry/repo/" }, want: ErrBadManifest},
		{name: "not recorded", edit: func(m map[string]any) {
			var kept []any
			for _, s := range m["streams"].([]any) {
				if s.(map[string]any)["key"] != key {
					kept = append(kept, s)
				}
			}
			m["streams"] = kept
		}, want: ErrBadManifest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newStore(t)
			writeListBackup(t, store, "b", nil, listFiles(6))
			if tc.stream != nil {
				if err := store.Put(ctx, Prefix("b")+key, bytes.NewReader(tc.stream)); err != nil {
					t.Fatal(err)
				}
			}
			if tc.record || tc.edit != nil {
				m, err := ReadManifest(ctx, store, "b")
				if err != nil {
					t.Fatal(err)
				}
				if tc.record {
					for i, s := range m.Streams {
						if s.Key == key {
							m.Streams[i] = streamOf(key, tc.stream)
						}
					}
				}
				data, _ := json.Marshal(m)
				var doc map[string]any
				json.Unmarshal(data, &doc)
				if tc.edit != nil {
					tc.edit(doc)
				}
				data, _ = json.Marshal(doc)
				if err := store.Put(ctx, Prefix("b")+ManifestFile, bytes.NewReader(data)); err != nil {
					t.Fatal(err)
				}
			}
			r, err := Open(ctx, store, "b", nil)
			if err == nil {
				_, err = readList(t, r, r.Manifest.Volumes[0])
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			t.Logf("%v", err)
		})
	}
}

func volume(m map[string]any) map[string]any { return m["volumes"].([]any)[0].(map[string]any) }

func streamOf(key string, data []byte) Stream {
	return Stream{Key: key, Bytes: int64(len(data)), SHA256: fmt.Sprintf("%x", sha256.Sum256(data))}
}

// A backup of format 3 or older keeps its volumes' files in the manifest: it is read as it was.
func TestFormat3FilesInline(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	files := listFiles(6)
	completeWithManifest(t, store, "old", func(m map[string]any) []byte {
		m["formatVersion"] = "3"
		var inline []any
		data, _ := json.Marshal(files)
		json.Unmarshal(data, &inline)
		m["volumes"] = []any{map[string]any{"namespace": "ns", "name": "data", "key": "volumes/ns/data.tar.zst", "bytes": 32, "files": inline}}
		data, _ = json.Marshal(m)
		return data
	})
	r, err := Open(ctx, store, "old", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := readList(t, r, r.Manifest.Volumes[0])
	if err != nil || !reflect.DeepEqual(got, files) {
		t.Fatalf("a format 3 volume's files: %d, %v; want the %d inline", len(got), err, len(files))
	}
	if s := Summarize(r.Manifest); s.Volumes[0].Files != 3 || s.Volumes[0].Bytes != 62 {
		t.Errorf("summary of a format 3 volume %+v, want 3 files of 62 bytes", s.Volumes[0])
	}
}

// A backup an older ferry made of a claim of a long name keeps its file list under the claim's
// whole name (ClaimStream cuts it now): it is read as it was written.
func TestFileListOfALongClaimByAnOlderFerry(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	claim := strings.Repeat("c", 200)
	w, err := Create(ctx, store, "b", plans.Cluster{}, &plans.Plan{}, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tar, err := w.Put(ctx, "volumes/ns/"+claim+".tar.zst", strings.NewReader("tar"))
	if err != nil {
		t.Fatal(err)
	}
	var list bytes.Buffer
	enc, _ := zstd.NewWriter(&list)
	enc.Write([]byte(`{"path":"a","type":"file","mode":"0644","uid":0,"gid":0,"size":1,"modTime":"2026-03-01T02:00:00Z"}` + "\n"))
	enc.Close()
	key, err := w.Put(ctx, "volume-files/ns/"+claim+".jsonl.zst", &list)
	if err != nil {
		t.Fatal(err)
	}
	if key == FileListFile("ns", claim) {
		t.Fatalf("FileListFile keeps a claim of %d characters whole", len(claim))
	}
	w.AddVolume(Volume{Namespace: "ns", Name: claim, Key: tar, Bytes: 1, List: &FileList{Key: key, Entries: 1, Files: 1, FileBytes: 1}})
	if _, err := w.Commit(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	r, err := Open(ctx, store, "b", nil)
	if err != nil {
		t.Fatalf("open the older ferry's backup: %v", err)
	}
	got, err := readList(t, r, r.Manifest.Volumes[0])
	if err != nil || len(got) != 1 || got[0].Path != "a" {
		t.Fatalf("read back %v, %v; want the file a", got, err)
	}
}

// A volume holds nothing when its list has no entry but the filesystem's lost+found folder: a
// carry-back leaves such a volume of green's (a claim blue never gave one) out.
func TestVolumeHoldsNothing(t *testing.T) {
	ctx := context.Background()
	at := time.Date(2026, 3, 1, 2, 0, 0, 0, time.UTC)
	lostFound := File{Path: "lost+found/", Type: "dir", Mode: "0700", ModTime: at}
	for _, tc := range []struct {
		name  string
		files []File
		want  bool
	}{
		{"no entry", nil, true},
		{"lost+found only", []File{lostFound}, true},
		{"an empty folder", []File{{Path: "projects/", Type: "dir", Mode: "0755", ModTime: at}}, false},
		{"an empty file", []File{{Path: "notes.txt", Type: "file", Mode: "0644", ModTime: at, SHA256: strings.Repeat("e", 64)}}, false},
		{"a symlink", []File{{Path: "current", Type: "symlink", Mode: "0777", ModTime: at, Link: "elsewhere"}}, false},
		{"lost+found and a file", append([]File{lostFound}, listFiles(2)...), false},
		{"a file in lost+found", []File{{Path: "lost+found/#1234", Type: "file", Mode: "0600", Size: 3, ModTime: at, SHA256: strings.Repeat("f", 64)}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newStore(t)
			m := writeListBackup(t, store, "b", nil, tc.files)
			r, err := Open(ctx, store, "b", nil)
			if err != nil {
				t.Fatal(err)
			}
			v := r.Manifest.Volumes[0]
			v.Bytes = 0
			for _, f := range tc.files {
				v.Bytes += f.Size
			}
			got, err := r.VolumeHoldsNothing(ctx, v)
			if err != nil || got != tc.want {
				t.Errorf("VolumeHoldsNothing = %v, %v; want %v (list %+v of manifest %s)", got, err, tc.want, v.List, m.Name)
			}
		})
	}
}
