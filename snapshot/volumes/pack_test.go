package volumes

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
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

func TestStreamBroke(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("volume a/b: %w", io.ErrUnexpectedEOF), true},
		{fmt.Errorf("ferry mover pack: exec in pod a/m: error reading from error stream: next reader: %w",
			&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), true},
		{errors.New("mover pod a/m was deleted"), false},
		{fmt.Errorf("put: %w", errors.New("storage full")), false},
	} {
		if got := streamBroke(tc.err); got != tc.want {
			t.Errorf("streamBroke(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
