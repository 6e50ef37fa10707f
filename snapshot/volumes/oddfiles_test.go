package volumes

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrykube/ferry/snapshot"
	"golang.org/x/sys/unix"
)

// Names of the odd shapes a claim may hold.
const (
	latin1Name = "latin1-\xe9t\xe9.txt" // not UTF-8: names are bytes
	latin1Dir  = "d\xe9j\xe0"
	fifoName   = "control.fifo"
)

var (
	longComponent = strings.Repeat("n", 255)
	longPath      = strings.Repeat("deep-directory/", 8) + strings.Repeat("f", 120) // > 100 bytes: PAX
)

// oddTree makes a claim holding the shapes a tar of names and contents alone loses: a group of
// hard links, a FIFO, names that are not UTF-8, symlinks with their own times, empty directories,
// 255-byte names, long paths and a sparse file.
func oddTree(t *testing.T) string {
	dir := t.TempDir()
	old := time.Date(2023, 7, 1, 8, 9, 10, 111222333, time.UTC)
	write := func(name, contents string, mode fs.FileMode) {
		t.Helper()
		must(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755))
		must(t, os.WriteFile(filepath.Join(dir, name), []byte(contents), mode))
	}
	write("a.txt", "shared by three names", 0o640)
	must(t, os.Mkdir(filepath.Join(dir, "links"), 0o755))
	must(t, os.Link(filepath.Join(dir, "a.txt"), filepath.Join(dir, "links", "b.txt")))
	must(t, os.Link(filepath.Join(dir, "a.txt"), filepath.Join(dir, "links", "c.txt")))
	write("twin-1", "same contents, two files", 0o600)
	write("twin-2", "same contents, two files", 0o600)
	write("pair-1", "two names", 0o600)
	must(t, os.Link(filepath.Join(dir, "pair-1"), filepath.Join(dir, "pair-2")))
	must(t, unix.Mkfifo(filepath.Join(dir, fifoName), 0o620))
	write(latin1Name, "latin1", 0o644)
	write(latin1Dir+"/inside-"+latin1Name, "deeper", 0o600)
	write(longComponent, "long name", 0o644)
	write(longPath, "long path", 0o644)
	must(t, os.MkdirAll(filepath.Join(dir, "empty", "deeper"), 0o711))
	must(t, os.Symlink("a.txt", filepath.Join(dir, "link-to-a")))
	must(t, os.Symlink("nowhere", filepath.Join(dir, "links", "dangling")))
	must(t, os.Symlink(latin1Name, filepath.Join(dir, "link-to-latin1")))
	f, err := os.Create(filepath.Join(dir, "sparse.img"))
	must(t, err)
	_, err = f.WriteAt([]byte("end"), 6<<20)
	must(t, err)
	must(t, f.Close())
	// Times last, children first: symlinks' own, with lutimes.
	var paths []string
	must(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		paths = append(paths, p)
		return err
	}))
	for i, p := range slices.Backward(paths) {
		ts := []unix.Timespec{unix.NsecToTimespec(old.UnixNano()), unix.NsecToTimespec(old.Add(time.Duration(i) * time.Second).UnixNano())}
		must(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW))
	}
	return dir
}

// walked is an entry as an independent walk sees it.
type walked struct {
	Type, Mode, Link, SHA256 string
	Size                     int64
	ModTime                  int64 // nanoseconds
	// Group names every name of a regular file's inode, when it has more than one.
	Group string
}

// walkTree lists a tree by lstat, names as bytes, without any of the package's code.
func walkTree(t *testing.T, dir string) map[string]walked {
	t.Helper()
	out := map[string]walked{}
	inodes := map[uint64][]string{}
	must(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if strings.HasPrefix(rel, StagingPrefix) {
			t.Errorf("%s left behind", rel)
			return fs.SkipDir
		}
		var st unix.Stat_t
		must(t, unix.Lstat(p, &st))
		w := walked{Mode: fmt.Sprintf("%#o", st.Mode&0o7777), ModTime: st.Mtim.Nano()}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			w.Type = "dir"
		case unix.S_IFLNK:
			w.Type = "symlink"
			w.Link, err = os.Readlink(p)
			must(t, err)
		case unix.S_IFIFO:
			w.Type = "fifo"
		case unix.S_IFREG:
			w.Type, w.Size = "file", st.Size
			b, err := os.ReadFile(p)
			must(t, err)
			sum := sha256.Sum256(b)
			w.SHA256 = hex.EncodeToString(sum[:])
			if st.Nlink > 1 {
				inodes[st.Ino] = append(inodes[st.Ino], rel)
			}
		default:
			w.Type = fmt.Sprintf("mode %#o", st.Mode&unix.S_IFMT)
		}
		out[rel] = w
		return nil
	}))
	for _, names := range inodes {
		slices.Sort(names)
		for _, n := range names {
			w := out[n]
			w.Group = strings.Join(names, " ")
			out[n] = w
		}
	}
	return out
}

// sameWalk reports every difference between two walks, names quoted so that bytes show.
func sameWalk(t *testing.T, want, got map[string]walked, what string) {
	t.Helper()
	for name, w := range want {
		g, ok := got[name]
		switch {
		case !ok:
			t.Errorf("%s: %q missing", what, name)
		case g != w:
			t.Errorf("%s: %q = %+v, want %+v", what, name, g, w)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: %q not in the source", what, name)
		}
	}
}

// overJSON sends v through JSON, as the mover's results and requests go.
func overJSON[T any](t *testing.T, v T) T {
	t.Helper()
	b, err := json.Marshal(v)
	must(t, err)
	var out T
	must(t, json.Unmarshal(b, &out))
	return out
}

// overMover hands what Stage staged in dir over as a restore does: the mover saves it and
// prints it, ferry reads it and checks it against backup, and hands back the summary of what it
// checked, with which the mover loads the list again for Apply.
func overMover(t *testing.T, dir string, st Staged, backup files) Staged {
	t.Helper()
	must(t, SaveStaged(dir, &st))
	var out bytes.Buffer
	must(t, PrintStaged(&out, dir, &st, st))
	var summary Staged
	must(t, readStaged(&out, &summary, &summary, "volumes/ns/odd.tar.zst", backup))
	loaded, err := LoadStaged(dir, overJSON(t, summary), bufio.NewReader(bytes.NewReader(summary.lines)))
	must(t, err)
	return loaded
}

// listedFiles are the entries of a staged list as Apply reads them: Files, or the lines saved in
// the staging folder or handed back (LoadStaged).
func listedFiles(t *testing.T, dir string, st Staged) []StagedFile {
	t.Helper()
	var files []StagedFile
	must(t, st.each(dir, func(f StagedFile) error { files = append(files, f); return nil }))
	return files
}

// appliedOverMover applies st as the mover does (ApplyAndPrint) and returns the result as ferry
// reads it from the mover's output.
func appliedOverMover(t *testing.T, dir string, st Staged, opts UnpackOptions) UnpackResult {
	t.Helper()
	var out bytes.Buffer
	must(t, ApplyAndPrint(context.Background(), dir, st, opts, &out))
	var back UnpackResult
	lines, err := newLineReader[UnpackedFile](&out, &back, func() int { return back.Count })
	must(t, err)
	for {
		f, ok, err := lines.next()
		must(t, err)
		if !ok {
			break
		}
		back.Files = append(back.Files, f)
	}
	return back
}

func TestOddFilesRoundTrip(t *testing.T) {
	ctx := context.Background()
	src := oddTree(t)
	want := walkTree(t, src)
	if want[fifoName].Type != "fifo" || want["a.txt"].Group == "" || want[latin1Name].Type != "file" {
		t.Fatalf("the source tree lacks its odd shapes: %+v", want)
	}
	var contents int64 // each file once, whatever its names
	for name, w := range want {
		if w.Type == "file" && (w.Group == "" || strings.HasPrefix(w.Group, name+" ")) {
			contents += w.Size
		}
	}
	listing, err := List(src)
	must(t, err)
	var counter fileCounter
	for _, f := range listing.Files {
		counter.count(f)
	}
	if got := counter.bytes; got != contents {
		t.Errorf("a volume's contents count %d bytes, want %d", got, contents)
	}
	copyTree := func(t *testing.T, dst string) {
		var buf bytes.Buffer
		must(t, Pack(src, &buf))
		_, err := Unpack(ctx, dst, &buf, UnpackOptions{})
		must(t, err)
	}
	for _, tc := range []struct {
		name   string
		target func(t *testing.T, dst string) // what the claim holds before
		delete bool
	}{
		{name: "into an empty claim", target: func(*testing.T, string) {}},
		{name: "carried back over the same tree, deleting what the backup lacks", delete: true, target: func(t *testing.T, dst string) {
			copyTree(t, dst)
			must(t, os.WriteFile(filepath.Join(dst, "extra"), []byte("x"), 0o600))
		}},
		{name: "over separate copies, another FIFO and a symlink of another time", delete: true, target: func(t *testing.T, dst string) {
			must(t, os.MkdirAll(filepath.Join(dst, "links"), 0o755))
			for _, n := range []string{"a.txt", "links/b.txt", "links/c.txt"} {
				must(t, os.WriteFile(filepath.Join(dst, n), []byte("shared by three names"), 0o640))
			}
			must(t, unix.Mkfifo(filepath.Join(dst, "other.fifo"), 0o600))
			must(t, os.WriteFile(filepath.Join(dst, fifoName), []byte("a file, not a FIFO"), 0o600))
			must(t, os.Symlink("a.txt", filepath.Join(dst, "link-to-a")))
		}},
		{name: "over files the backup holds apart made one, and one name more of a group", target: func(t *testing.T, dst string) {
			copyTree(t, dst)
			must(t, os.Remove(filepath.Join(dst, "twin-2")))
			must(t, os.Link(filepath.Join(dst, "twin-1"), filepath.Join(dst, "twin-2")))
			must(t, os.Remove(filepath.Join(dst, "pair-2")))
			must(t, os.Link(filepath.Join(dst, "a.txt"), filepath.Join(dst, "pair-2")))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := t.TempDir()
			tc.target(t, dst)
			var buf bytes.Buffer
			must(t, Pack(src, &buf))
			listing, err := Index(bytes.NewReader(buf.Bytes()))
			must(t, err)
			manifest := overJSON(t, snapshot.Volume{Namespace: "ns", Name: "odd", Files: listing.Files})
			// As a restore does it: staged list and results go through the mover's output and
			// back, checked as they are read.
			st, err := Stage(ctx, dst, &buf)
			must(t, err)
			st = overMover(t, dst, st, inline(manifest.Files))
			res := appliedOverMover(t, dst, st, UnpackOptions{Delete: tc.delete})
			if len(res.Deleted) > 0 && (tc.name != "over separate copies, another FIFO and a symlink of another time" || !slices.Equal(res.Deleted, []string{"other.fifo"})) &&
				!slices.Equal(res.Deleted, []string{"extra"}) {
				t.Errorf("deleted %q", res.Deleted)
			}
			written := make([]snapshot.File, len(res.Files))
			for i, f := range res.Files {
				written[i] = f.File
			}
			if diffs, _ := compareInline(manifest.Files, written, false); len(diffs) > 0 {
				t.Errorf("applied entries differ from the manifest: %+v", diffs)
			}
			sameWalk(t, want, walkTree(t, dst), "restored")
			// Verify lists the claim as a backup lists the source.
			listed, err := List(dst)
			must(t, err)
			if diffs, _ := compareInline(manifest.Files, overJSON(t, listed).Files, true); len(diffs) > 0 {
				t.Errorf("verify finds differences: %+v", diffs)
			}
			// Applying again changes nothing.
			var again bytes.Buffer
			must(t, Pack(src, &again))
			res, err = Unpack(ctx, dst, &again, UnpackOptions{Delete: tc.delete})
			must(t, err)
			if res.Written != 0 || res.Updated != 0 || len(res.Deleted) != 0 {
				t.Errorf("a second restore wrote %d, updated %d, deleted %q", res.Written, res.Updated, res.Deleted)
			}
			sameWalk(t, want, walkTree(t, dst), "restored twice")
		})
	}
}

// TestStageRefusesBadHardLinks: a hard link names a file before it in the archive, inside the
// volume, or the archive is refused and the claim left as it was.
func TestStageRefusesBadHardLinks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []tar.Header
	}{
		{"out of the volume", []tar.Header{{Name: "x", Typeflag: tar.TypeLink, Linkname: "../outside"}}},
		{"absolute", []tar.Header{{Name: "x", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}}},
		{"to a later entry", []tar.Header{{Name: "x", Typeflag: tar.TypeLink, Linkname: "y"}, {Name: "y", Typeflag: tar.TypeReg}}},
		{"to a file of the target only", []tar.Header{{Name: "x", Typeflag: tar.TypeLink, Linkname: "kept"}}},
		{"through a symlink", []tar.Header{{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc"}, {Name: "x", Typeflag: tar.TypeLink, Linkname: "l/passwd"}}},
		{"to a directory", []tar.Header{{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "x", Typeflag: tar.TypeLink, Linkname: "d"}}},
		{"to a FIFO", []tar.Header{{Name: "p", Typeflag: tar.TypeFifo, Mode: 0o600}, {Name: "x", Typeflag: tar.TypeLink, Linkname: "p"}}},
		{"to the staging folder", []tar.Header{{Name: "x", Typeflag: tar.TypeLink, Linkname: StagingPrefix + "00/1"}}},
		{"a file replaced once linked", []tar.Header{{Name: "a", Typeflag: tar.TypeReg}, {Name: "x", Typeflag: tar.TypeLink, Linkname: "a"}, {Name: "a", Typeflag: tar.TypeReg}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			must(t, os.WriteFile(filepath.Join(dir, "kept"), []byte("k"), 0o600))
			before := walkTree(t, dir)
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			for _, h := range tc.entries {
				must(t, tw.WriteHeader(&h))
			}
			must(t, tw.Close())
			if _, err := Stage(context.Background(), dir, &buf); err == nil {
				t.Fatal("staged")
			}
			sameWalk(t, before, walkTree(t, dir), "after the refusal")
		})
	}
}

// TestVerifyFindsOddDifferences: verify compares hard-link groups, FIFOs and names byte for byte.
func TestVerifyFindsOddDifferences(t *testing.T) {
	src := oddTree(t)
	backup, err := List(src)
	must(t, err)
	manifest := overJSON(t, backup).Files
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, dir string)
		want   string // a path named by a difference
	}{
		{"a hard link made a copy", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "links", "c.txt")
			must(t, os.Remove(p))
			must(t, os.WriteFile(p, []byte("shared by three names"), 0o640))
		}, "links/c.txt"},
		{"the FIFO gone", func(t *testing.T, dir string) { must(t, os.Remove(filepath.Join(dir, fifoName))) }, fifoName},
		{"the FIFO a file", func(t *testing.T, dir string) {
			must(t, os.Remove(filepath.Join(dir, fifoName)))
			must(t, os.WriteFile(filepath.Join(dir, fifoName), nil, 0o620))
		}, fifoName},
		{"the name in UTF-8", func(t *testing.T, dir string) {
			must(t, os.Rename(filepath.Join(dir, latin1Name), filepath.Join(dir, "latin1-\u00e9t\u00e9.txt")))
		}, latin1Name},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := t.TempDir()
			var buf bytes.Buffer
			must(t, Pack(src, &buf))
			_, err := Unpack(context.Background(), dst, &buf, UnpackOptions{})
			must(t, err)
			tc.change(t, dst)
			listed, err := List(dst)
			must(t, err)
			diffs, _ := compareInline(manifest, overJSON(t, listed).Files, true)
			if !slices.ContainsFunc(diffs, func(d fileDiff) bool { return d.path == tc.want }) {
				t.Errorf("differences %+v do not name %q", diffs, tc.want)
			}
		})
	}
}

// TestNamesThatAreNotUTF8InJSON: JSON strings hold only UTF-8, so such names take another form,
// which reads back byte for byte; UTF-8 names are written as they always were.
func TestNamesThatAreNotUTF8InJSON(t *testing.T) {
	for _, f := range []snapshot.File{
		{Path: latin1Name, Type: "file", Mode: "0644", Size: 1, SHA256: "ab"},
		{Path: "link", Type: "symlink", Mode: "0777", Link: "../" + latin1Name},
		{Path: latin1Dir + "/b", Type: "file", Mode: "0644", Hardlink: latin1Dir + "/a"},
		{Path: "\xff/", Type: "dir", Mode: "0755"},
		{Path: "données-été.csv", Type: "file", Mode: "0644"},
	} {
		got := overJSON(t, f)
		if !reflect.DeepEqual(got, f) {
			t.Errorf("%q came back as %q", f.Path, got.Path)
		}
		sf := StagedFile{File: f, Staged: "7"}
		if got := overJSON(t, sf); !reflect.DeepEqual(got, sf) {
			t.Errorf("staged %q came back as %+v", f.Path, got)
		}
		uf := UnpackedFile{File: f, Action: ActionWritten}
		if got := overJSON(t, uf); !reflect.DeepEqual(got, uf) {
			t.Errorf("unpacked %q came back as %+v", f.Path, got)
		}
	}
	b, err := json.Marshal(snapshot.File{Path: "plain", Type: "file", Mode: "0644"})
	must(t, err)
	if !bytes.Contains(b, []byte(`{"path":"plain","type":"file"`)) {
		t.Errorf("a UTF-8 name is written as %s", b)
	}
	sk := SkippedFile{Path: latin1Name, Reason: "changed"}
	if got := overJSON(t, sk); got != sk {
		t.Errorf("skipped %q came back as %q", sk.Path, got.Path)
	}
	_ = syscall.Stat_t{}
}
