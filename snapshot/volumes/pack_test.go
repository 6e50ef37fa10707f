package volumes

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/snapshot"
)

func TestPackAndIndex(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "notebooks", "empty"), 0o750))
	must(os.WriteFile(filepath.Join(dir, "notebooks", "train.ipynb"), []byte(`{"cells": []}`), 0o640))
	must(os.WriteFile(filepath.Join(dir, "zero"), nil, 0o600))
	must(os.Symlink("notebooks/train.ipynb", filepath.Join(dir, "latest")))
	// A sparse file: a hole, then data.
	f, err := os.Create(filepath.Join(dir, "sparse.bin"))
	must(err)
	_, err = f.WriteAt([]byte("end"), 10<<20)
	must(err)
	must(f.Close())
	mtime := time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)
	must(os.Chtimes(filepath.Join(dir, "zero"), mtime, mtime))

	var buf bytes.Buffer
	must(Pack(dir, &buf))
	listing, err := Index(&buf)
	must(err)
	files := listing.Files
	byPath := map[string]snapshot.File{}
	for _, f := range files {
		byPath[f.Path] = f
	}
	sum := sha256.Sum256([]byte(`{"cells": []}`))
	sparse := make([]byte, 10<<20+3)
	copy(sparse[10<<20:], "end")
	sparseSum := sha256.Sum256(sparse)
	for path, want := range map[string]snapshot.File{
		"notebooks/":            {Type: "dir", Mode: "0750"},
		"notebooks/empty/":      {Type: "dir", Mode: "0750"},
		"notebooks/train.ipynb": {Type: "file", Mode: "0640", Size: 13, SHA256: hex.EncodeToString(sum[:])},
		"zero":                  {Type: "file", Mode: "0600", Size: 0, ModTime: mtime},
		"latest":                {Type: "symlink", Link: "notebooks/train.ipynb"},
		"sparse.bin":            {Type: "file", Size: 10<<20 + 3, SHA256: hex.EncodeToString(sparseSum[:])},
	} {
		got, ok := byPath[path]
		switch {
		case !ok:
			t.Errorf("%s missing from the archive", path)
		case got.Type != want.Type || got.Size != want.Size || got.Link != want.Link,
			want.Mode != "" && got.Mode != want.Mode,
			want.SHA256 != "" && got.SHA256 != want.SHA256,
			!want.ModTime.IsZero() && !got.ModTime.Equal(want.ModTime):
			t.Errorf("%s = %+v, want %+v", path, got, want)
		}
	}
	if len(files) != 6 {
		t.Errorf("archive has %d entries, want 6: %+v", len(files), files)
	}
}

// IndexEach hands out each entry once the stream is past it, holding none but the last: of
// entries of one name (Pack's file read again, or left out) the last counts, and a hard link
// gets its contents from the entry Pack marked as a file of several names.
func TestIndexEach(t *testing.T) {
	type entry struct {
		name, body, link string
		records          map[string]string
	}
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	stop := errors.New("stop")
	for _, tc := range []struct {
		name    string
		entries []entry
		emitErr error
		want    []string // path:size:sha256 prefix, or path->hardlink:size:sha256
		skipped []string
		wantErr error
	}{
		{name: "read again, the last counts", entries: []entry{{name: "a", body: "first"}, {name: "a", body: "second!"}, {name: "b", body: "b"}},
			want: []string{"a:7:" + sum("second!")[:8], "b:1:" + sum("b")[:8]}},
		{name: "left out", entries: []entry{{name: "a", body: "x"}, {name: "a", records: map[string]string{SkippedRecord: "it changed"}}, {name: "b", body: "b"}},
			want: []string{"b:1:" + sum("b")[:8]}, skipped: []string{"a"}},
		{name: "hard link to a marked file", entries: []entry{{name: "a", body: "shared", records: map[string]string{LinksRecord: "1"}}, {name: "z", body: "z"}, {name: "b", link: "a"}},
			want: []string{"a:6:" + sum("shared")[:8], "z:1:" + sum("z")[:8], "b->a:6:" + sum("shared")[:8]}},
		{name: "hard link to an unmarked file", entries: []entry{{name: "a", body: "shared"}, {name: "b", link: "a"}},
			wantErr: errors.New("does not mark")},
		{name: "emit fails", entries: []entry{{name: "a", body: "a"}, {name: "b", body: "b"}}, emitErr: stop, wantErr: stop},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			for _, e := range tc.entries {
				h := &tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(e.body)), PAXRecords: e.records, Format: tar.FormatPAX}
				if e.link != "" {
					h.Typeflag, h.Linkname = tar.TypeLink, e.link
				}
				if err := tw.WriteHeader(h); err != nil {
					t.Fatal(err)
				}
				io.WriteString(tw, e.body)
			}
			tw.Close()
			var got []string
			skipped, err := IndexEach(&buf, func(f snapshot.File) error {
				if tc.emitErr != nil {
					return tc.emitErr
				}
				p := f.Path
				if f.Hardlink != "" {
					p += "->" + f.Hardlink
				}
				got = append(got, fmt.Sprintf("%s:%d:%.8s", p, f.Size, f.SHA256))
				return nil
			})
			if tc.wantErr != nil {
				if err == nil || !errors.Is(err, tc.wantErr) && !strings.Contains(err.Error(), tc.wantErr.Error()) {
					t.Fatalf("got %v, want %v", err, tc.wantErr)
				}
				return
			}
			var left []string
			for _, s := range skipped {
				left = append(left, s.Path)
			}
			if err != nil || !slices.Equal(got, tc.want) || !slices.Equal(left, tc.skipped) {
				t.Fatalf("emitted %q, skipped %q, %v; want %q, %q", got, left, err, tc.want, tc.skipped)
			}
		})
	}
}
