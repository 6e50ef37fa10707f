package volumes

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// deepTree makes in dir a tree whose deepest paths pass PATH_MAX (4,096 bytes), which a call
// naming the whole path is refused (ENAMETOOLONG): 25 folders of 200-byte names, a file and a
// symlink at the bottom. It is made through each folder's descriptor, as nothing else can.
func deepTree(t *testing.T, dir string) string {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	name, deepest := strings.Repeat("d", 200), ""
	for range 25 {
		must(t, unix.Mkdirat(fd, name, 0o755))
		next, err := unix.Openat(fd, name, unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		must(t, err)
		unix.Close(fd)
		fd, deepest = next, deepest+name+"/"
	}
	defer unix.Close(fd)
	f, err := unix.Openat(fd, "leaf.txt", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	must(t, err)
	_, err = unix.Write(f, []byte("at the bottom\n"))
	must(t, err)
	unix.Close(f)
	must(t, unix.Symlinkat("leaf.txt", fd, "link"))
	return deepest + "leaf.txt"
}

// TestPackReadsATreeDeeperThanPathMax: a claim may hold a tree deeper than PATH_MAX (a copy made
// into itself, a build cache); its backup reads every file of it, and a restore writes it back.
func TestPackReadsATreeDeeperThanPathMax(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	leaf := deepTree(t, src)
	if len(src)+len(leaf) <= unix.PathMax {
		t.Fatalf("the tree's deepest path is %d bytes, not past PATH_MAX", len(src)+len(leaf))
	}
	var tar bytes.Buffer
	if err := Pack(src, &tar); err != nil {
		t.Fatalf("pack a tree deeper than PATH_MAX: %v", err)
	}
	if _, err := Unpack(context.Background(), dst, &tar, UnpackOptions{}); err != nil {
		t.Fatalf("unpack a tree deeper than PATH_MAX: %v", err)
	}
	want, err := List(src)
	must(t, err)
	got, err := List(dst)
	must(t, err)
	if len(want.Files) != 27 || want.Files[25].Path != leaf || want.Files[25].Size != int64(len("at the bottom\n")) {
		t.Fatalf("the backup lists %d entries, want 25 folders, the leaf and its symlink", len(want.Files))
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the restored tree lists %+v, the backup %+v", got, want)
	}
}

// TestPackFolderReplacedWhilePacked: a folder listed and then replaced (renamed away, a symlink
// out of the claim in its place) before the walk enters it is packed empty; one replaced after
// the walk entered it is packed from the folder listed. The rest of the claim is packed either
// way.
func TestPackFolderReplacedWhilePacked(t *testing.T) {
	for _, tc := range []struct {
		name, after string // the file whose read is followed by the replacement
		want        []string
	}{
		{"before the walk enters it", "a.txt", []string{"a.txt", "sub/", "z.txt"}},
		{"between its files", "sub/1.txt", []string{"a.txt", "sub/", "sub/1.txt", "sub/2.txt", "z.txt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := t.TempDir()
			for _, name := range []string{"a.txt", "sub/1.txt", "sub/2.txt", "z.txt"} {
				must(t, os.MkdirAll(filepath.Dir(filepath.Join(src, name)), 0o755))
				must(t, os.WriteFile(filepath.Join(src, name), []byte(name), 0o644))
			}
			p := &packer{afterRead: func(rel string) {
				if rel == tc.after {
					must(t, os.Rename(filepath.Join(src, "sub"), filepath.Join(src, "moved")))
					must(t, os.Symlink("/etc", filepath.Join(src, "sub")))
				}
			}}
			var tarball bytes.Buffer
			if err := p.pack(src, &tarball); err != nil {
				t.Fatalf("pack failed on a folder replaced while packed: %v", err)
			}
			listing, err := Index(bytes.NewReader(tarball.Bytes()))
			must(t, err)
			var got []string
			for _, f := range listing.Files {
				got = append(got, f.Path)
			}
			if !slices.Equal(got, tc.want) || len(listing.Skipped) != 0 {
				t.Errorf("packed %v, skipped %+v; want %v", got, listing.Skipped, tc.want)
			}
		})
	}
}
