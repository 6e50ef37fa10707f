package volumes

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/klauspost/compress/zstd"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// sourceTree makes a volume with what users keep: nested files, an empty directory, symlinks
// (one dangling, one absolute), unusual modes, non-ASCII names, a sparse file, set times.
func sourceTree(t *testing.T) string {
	dir := t.TempDir()
	old := time.Date(2024, 2, 29, 13, 14, 15, 123456789, time.UTC)
	for name, mode := range map[string]fs.FileMode{
		"notebooks/train.ipynb":    0o640,
		"données-été.csv":          0o400,
		"日本語のノート.md":               0o754,
		"bin/tool":                 0o755 | fs.ModeSetuid,
		"shared/setgid/x":          0o660,
		"notebooks/deep/er/n.json": 0o644,
	} {
		must(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755))
		must(t, os.WriteFile(filepath.Join(dir, name), []byte("contents of "+name), 0o600))
		must(t, os.Chmod(filepath.Join(dir, name), mode))
		must(t, os.Chtimes(filepath.Join(dir, name), old, old))
	}
	must(t, os.Chmod(filepath.Join(dir, "shared", "setgid"), 0o2770|fs.ModeSetgid))
	must(t, os.MkdirAll(filepath.Join(dir, "empty", "deeper"), 0o711))
	must(t, os.Mkdir(filepath.Join(dir, "tmp"), 0o777))
	must(t, os.Chmod(filepath.Join(dir, "tmp"), 0o777|fs.ModeSticky))
	must(t, os.Symlink("notebooks/train.ipynb", filepath.Join(dir, "latest")))
	must(t, os.Symlink("../nowhere", filepath.Join(dir, "dangling")))
	must(t, os.Symlink("/etc/hostname", filepath.Join(dir, "absolute")))
	f, err := os.Create(filepath.Join(dir, "sparse.img"))
	must(t, err)
	_, err = f.WriteAt([]byte("header"), 0)
	must(t, err)
	_, err = f.WriteAt([]byte("end"), 8<<20)
	must(t, err)
	must(t, f.Close())
	must(t, os.Chtimes(filepath.Join(dir, "notebooks"), old, old))
	return dir
}

// packed is the tree as a backup stores it, and the manifest's list of its files.
func packed(t *testing.T, dir string) ([]byte, []snapshot.File) {
	t.Helper()
	var tarball, compressed bytes.Buffer
	must(t, Pack(dir, &tarball))
	listing, err := Index(bytes.NewReader(tarball.Bytes()))
	must(t, err)
	files := listing.Files
	enc, err := zstd.NewWriter(&compressed)
	must(t, err)
	_, err = enc.Write(tarball.Bytes())
	must(t, err)
	must(t, enc.Close())
	return compressed.Bytes(), files
}

func unpack(t *testing.T, stream []byte, dir string, opts UnpackOptions) UnpackResult {
	t.Helper()
	in := &endless{r: bytes.NewReader(stream)}
	res, err := UnpackCompressed(context.Background(), dir, in, opts)
	must(t, err)
	if in.readPast {
		t.Fatal("unpack read past the end of the stream: it would wait forever on a stdin that never ends")
	}
	return res
}

// endless is a stream that notes a read past its end, where a stdin that never ends would block.
type endless struct {
	r        *bytes.Reader
	readPast bool
}

func (e *endless) Read(p []byte) (int, error) {
	if e.r.Len() == 0 {
		e.readPast = true
	}
	return e.r.Read(p)
}

// sameTree fails unless both trees list alike, times and owners too.
func sameTree(t *testing.T, want []snapshot.File, dir string) {
	t.Helper()
	listing, err := List(dir)
	must(t, err)
	got := listing.Files
	if diffs, identical := compareInline(want, got, true); len(diffs) > 0 || identical != len(want) {
		t.Fatalf("unpacked tree differs (%d identical of %d): %+v", identical, len(want), diffs)
	}
	byPath := map[string]snapshot.File{}
	for _, f := range got {
		byPath[f.Path] = f
	}
	for _, w := range want {
		g := byPath[w.Path]
		if w.Type != "symlink" && !g.ModTime.Equal(w.ModTime) {
			t.Errorf("%s: time %s, want %s", w.Path, g.ModTime, w.ModTime)
		}
		if g.UID != w.UID || g.GID != w.GID {
			t.Errorf("%s: owner %d:%d, want %d:%d", w.Path, g.UID, g.GID, w.UID, w.GID)
		}
	}
}

func TestUnpackRestoresTheTree(t *testing.T) {
	src := sourceTree(t)
	stream, files := packed(t, src)
	dst := t.TempDir()
	res := unpack(t, stream, dst, UnpackOptions{Owners: os.Geteuid() == 0})
	sameTree(t, files, dst)
	if res.Written != len(files) || res.Unchanged != 0 || res.Updated != 0 || len(res.Files) != len(files) {
		t.Fatalf("first unpack: %d written, %d updated, %d unchanged of %d", res.Written, res.Updated, res.Unchanged, len(files))
	}
	// The result lets ferry check every file against the manifest.
	if diffs, identical := compareInline(files, resultFiles(res), false); len(diffs) > 0 || identical != len(files) {
		t.Fatalf("the result differs from the manifest: %+v", diffs)
	}
	for _, f := range res.Files {
		if f.Path == "données-été.csv" && (f.Mode != "0400" || f.SHA256 == "") {
			t.Errorf("result entry %+v", f)
		}
	}
	// Modes as a user would check them.
	for name, want := range map[string]fs.FileMode{
		"données-été.csv": 0o400, "日本語のノート.md": 0o754, "bin/tool": 0o755 | fs.ModeSetuid,
		"shared/setgid": 0o770 | fs.ModeSetgid | fs.ModeDir, "tmp": 0o777 | fs.ModeSticky | fs.ModeDir, "empty/deeper": 0o711 | fs.ModeDir,
	} {
		fi, err := os.Lstat(filepath.Join(dst, name))
		if err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v (%v), want %v", name, fi.Mode(), err, want)
		}
	}
	if link, _ := os.Readlink(filepath.Join(dst, "absolute")); link != "/etc/hostname" {
		t.Errorf("absolute symlink points to %q", link)
	}
	// The sparse file's hole stays a hole.
	var st syscall.Stat_t
	must(t, syscall.Stat(filepath.Join(dst, "sparse.img"), &st))
	if st.Blocks*512 > 1<<20 {
		t.Errorf("sparse.img takes %d bytes on disk", st.Blocks*512)
	}
}

func resultFiles(res UnpackResult) []snapshot.File {
	out := make([]snapshot.File, len(res.Files))
	for i, f := range res.Files {
		out[i] = f.File
	}
	return out
}

// ctimes records every entry's inode change time: anything written, chmod-ed or touched moves it.
func ctimes(t *testing.T, dir string) map[string]syscall.Timespec {
	out := map[string]syscall.Timespec{}
	must(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		out[p] = st.Ctim
		return nil
	}))
	return out
}

func TestUnpackTwiceChangesNothing(t *testing.T) {
	src := sourceTree(t)
	stream, files := packed(t, src)
	dst := t.TempDir()
	opts := UnpackOptions{Owners: os.Geteuid() == 0}
	unpack(t, stream, dst, opts)
	before := ctimes(t, dst)
	time.Sleep(10 * time.Millisecond) // so that a touch would show in ctime
	res := unpack(t, stream, dst, opts)
	if res.Written != 0 || res.Updated != 0 || res.Unchanged != len(files) || res.Bytes != 0 {
		t.Fatalf("second unpack: %d written, %d updated, %d unchanged of %d, %d bytes", res.Written, res.Updated, res.Unchanged, len(files), res.Bytes)
	}
	after := ctimes(t, dst)
	for p, c := range before {
		if after[p] != c {
			t.Errorf("%s was touched by the second unpack", p)
		}
	}
	sameTree(t, files, dst)

	// One byte of one file, and the mode of another: exactly those are rewritten or updated.
	data, _ := os.ReadFile(filepath.Join(dst, "notebooks", "train.ipynb"))
	data[3] ^= 1
	must(t, os.WriteFile(filepath.Join(dst, "notebooks", "train.ipynb"), data, 0o640))
	must(t, os.Chmod(filepath.Join(dst, "日本語のノート.md"), 0o644))
	res = unpack(t, stream, dst, opts)
	actions := map[string]string{}
	for _, f := range res.Files {
		if f.Action != ActionUnchanged {
			actions[f.Path] = f.Action
		}
	}
	want := map[string]string{"notebooks/train.ipynb": ActionWritten, "日本語のノート.md": ActionUpdated}
	if len(actions) != len(want) {
		t.Errorf("third unpack acted on %v, want %v", actions, want)
	}
	for p, a := range want {
		if actions[p] != a {
			t.Errorf("%s: %q, want %q", p, actions[p], a)
		}
	}
	sameTree(t, files, dst)
}

func TestUnpackReplacesOtherTypesAndLeavesOrDeletesExtras(t *testing.T) {
	src := sourceTree(t)
	stream, files := packed(t, src)
	dst := t.TempDir()
	// Where the backup has a file, the target has a directory; where it has a directory, a
	// file; a symlink points elsewhere; and there are files the backup does not hold.
	must(t, os.MkdirAll(filepath.Join(dst, "données-été.csv", "inner"), 0o755))
	must(t, os.WriteFile(filepath.Join(dst, "empty"), []byte("x"), 0o644))
	must(t, os.Symlink("elsewhere", filepath.Join(dst, "latest")))
	must(t, os.MkdirAll(filepath.Join(dst, "extra-dir", "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(dst, "extra-dir", "sub", "f"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(dst, "notebooks-extra.txt"), nil, 0o644))
	must(t, os.Mkdir(filepath.Join(dst, "lost+found"), 0o700))

	unpack(t, stream, dst, UnpackOptions{Owners: os.Geteuid() == 0})
	listing, err := List(dst)
	must(t, err)
	diffs, _ := compareInline(files, listing.Files, true)
	var extras []string
	for _, d := range diffs {
		if d.detail != "not in the backup" {
			t.Errorf("%s: %s", d.path, d.detail)
		}
		extras = append(extras, d.path)
	}
	if strings.Join(extras, ",") != "extra-dir/,extra-dir/sub/,extra-dir/sub/f,notebooks-extra.txt" {
		t.Errorf("without --delete the extras stay: %v", extras)
	}

	res := unpack(t, stream, dst, UnpackOptions{Owners: os.Geteuid() == 0, Delete: true})
	if strings.Join(res.Deleted, ",") != "extra-dir/,notebooks-extra.txt" || res.Written != 0 {
		t.Errorf("--delete deleted %v and wrote %d", res.Deleted, res.Written)
	}
	sameTree(t, files, dst)
	if _, err := os.Stat(filepath.Join(dst, "lost+found")); err != nil {
		t.Errorf("lost+found is the filesystem's, not to delete: %v", err)
	}
}

func TestUnpackWithoutRootLeavesOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs files of another owner, which only root makes")
	}
	src := sourceTree(t)
	must(t, os.Lchown(filepath.Join(src, "notebooks", "train.ipynb"), 1234, 5678))
	stream, files := packed(t, src)
	dst := t.TempDir()
	res := unpack(t, stream, dst, UnpackOptions{})
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "1 entries are owned by the mover's user") {
		t.Errorf("notes: %q", res.Notes)
	}
	if diffs, _ := compareInline(files, resultFiles(res), false); len(diffs) > 0 {
		t.Errorf("the data should match apart from owners: %+v", diffs)
	}
}

// archive builds a tar stream of the given entries, compressed as stored.
func archive(t *testing.T, entries ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf)
	must(t, err)
	tw := tar.NewWriter(enc)
	for _, h := range entries {
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(h.Name))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		must(t, tw.WriteHeader(h))
		if h.Typeflag == tar.TypeReg {
			_, err := tw.Write([]byte(h.Name))
			must(t, err)
		}
	}
	must(t, tw.Close())
	must(t, enc.Close())
	return buf.Bytes()
}

func TestUnpackRejectsPathsLeavingTheVolume(t *testing.T) {
	for name, entries := range map[string][]*tar.Header{
		"dot-dot":         {{Name: "../escaped", Typeflag: tar.TypeReg}},
		"inner dot-dot":   {{Name: "a/../../escaped", Typeflag: tar.TypeReg}},
		"absolute":        {{Name: "/tmp/escaped", Typeflag: tar.TypeReg}},
		"symlink outside": {{Name: "out", Typeflag: tar.TypeSymlink, Linkname: "PLACEHOLDER"}, {Name: "out/escaped", Typeflag: tar.TypeReg}},
		"symlink inside":  {{Name: "real/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "in", Typeflag: tar.TypeSymlink, Linkname: "real"}, {Name: "in/through", Typeflag: tar.TypeReg}},
		"dir then symlink": {{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "d/ok", Typeflag: tar.TypeReg},
			{Name: "d", Typeflag: tar.TypeSymlink, Linkname: "PLACEHOLDER"}, {Name: "d/escaped", Typeflag: tar.TypeReg}},
	} {
		t.Run(name, func(t *testing.T) {
			outside := t.TempDir()
			for _, h := range entries {
				if h.Linkname == "PLACEHOLDER" {
					h.Linkname = outside
				}
			}
			dst := filepath.Join(t.TempDir(), "volume")
			must(t, os.Mkdir(dst, 0o755))
			_, err := UnpackCompressed(context.Background(), dst, bytes.NewReader(archive(t, entries...)), UnpackOptions{})
			if !errors.Is(err, ErrUnsafePath) || !badinput.Is(err) {
				t.Fatalf("unpack: %v, want bad input matching ErrUnsafePath", err)
			}
			for _, dir := range []string{outside, filepath.Dir(dst), filepath.Join(dst, "real")} {
				leaked, _ := filepath.Glob(filepath.Join(dir, "*escaped*"))
				through, _ := filepath.Glob(filepath.Join(dir, "through"))
				if len(leaked)+len(through) > 0 {
					t.Fatalf("written outside the volume or through a symlink: %v %v", leaked, through)
				}
			}
		})
	}
}

func TestUnpackFailsOnABrokenStream(t *testing.T) {
	stream, _ := packed(t, sourceTree(t))
	for name, broken := range map[string][]byte{
		"truncated": stream[:len(stream)/2],
		"garbage":   append([]byte("not zstd at all"), stream...),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := UnpackCompressed(context.Background(), t.TempDir(), bytes.NewReader(broken), UnpackOptions{}); err == nil {
				t.Fatal("a broken stream unpacked without error")
			}
		})
	}
	// A tar stream that is not one at all.
	if _, err := Unpack(context.Background(), t.TempDir(), strings.NewReader(strings.Repeat("x", 1024)), UnpackOptions{}); err == nil {
		t.Fatal("garbage unpacked without error")
	}
}

// BenchmarkUnpack measures writing a volume of one large file and many small ones, and checking
// it again when it is already there (a second restore).
func BenchmarkUnpack(b *testing.B) {
	src := b.TempDir()
	big := make([]byte, 128<<20)
	rand.Read(big[:len(big)/2]) // half random, half zeros (a hole)
	if err := os.WriteFile(filepath.Join(src, "big.bin"), big, 0o644); err != nil {
		b.Fatal(err)
	}
	size := int64(len(big))
	for i := range 2000 {
		sub := filepath.Join(src, "small", fmt.Sprintf("%02d", i%50))
		os.MkdirAll(sub, 0o755)
		data := []byte(fmt.Sprintf("small file %d\n", i))
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%04d", i)), data, 0o644); err != nil {
			b.Fatal(err)
		}
		size += int64(len(data))
	}
	var tarball, compressed bytes.Buffer
	if err := Pack(src, &tarball); err != nil {
		b.Fatal(err)
	}
	enc, _ := zstd.NewWriter(&compressed)
	enc.Write(tarball.Bytes())
	enc.Close()
	for _, again := range []bool{false, true} {
		name := "new"
		if again {
			name = "unchanged"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				b.StopTimer()
				dst := b.TempDir()
				if again {
					if _, err := UnpackCompressed(context.Background(), dst, bytes.NewReader(compressed.Bytes()), UnpackOptions{}); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				if _, err := UnpackCompressed(context.Background(), dst, bytes.NewReader(compressed.Bytes()), UnpackOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
