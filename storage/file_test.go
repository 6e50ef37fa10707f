package storage_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/storage"
	"github.com/ferrykube/ferry/storage/storagetest"
)

func TestFileConformance(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Backend {
		b, err := storage.NewFile(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

// A Put killed with its process leaves a temporary file, never listed; CleanPartial removes those
// under the prefix and nothing else.
func TestFileCleansInterruptedPuts(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	b, err := storage.NewFile(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, "backups/x/kept", strings.NewReader("data")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"backups/x/sub/.ferry-tmp-123", "backups/x/.ferry-tmp-456", "backups/y/.ferry-tmp-789"} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n, err := b.CleanPartial(ctx, "backups/x/")
	if err != nil || n != 2 {
		t.Fatalf("CleanPartial = %d, %v; want the 2 temporary files under backups/x/", n, err)
	}
	for p, want := range map[string]bool{"backups/x/sub/.ferry-tmp-123": false, "backups/x/.ferry-tmp-456": false, "backups/y/.ferry-tmp-789": true, "backups/x/kept": true} {
		if _, err := os.Stat(filepath.Join(root, p)); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", p, err == nil, want)
		}
	}
}

// Direct movers need presigned URLs, which a local folder cannot give: the file backend says so
// by not being a Presigner.
func TestFileIsNoPresigner(t *testing.T) {
	b, err := storage.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := any(b).(storage.Presigner); ok {
		t.Fatal("the file backend claims to presign URLs")
	}
}
