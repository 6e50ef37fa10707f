package volumes

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/snapshot"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// posixACL is the value of a system.posix_acl_* attribute: owner rw, user 1000 r, group r, mask
// r, others nothing.
func posixACL() []byte {
	const undefined = 0xffffffff
	out := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range []struct {
		tag, perm uint16
		id        uint32
	}{{0x01, 6, undefined}, {0x02, 4, 1000}, {0x04, 4, undefined}, {0x10, 4, undefined}, {0x20, 0, undefined}} {
		out = binary.LittleEndian.AppendUint16(out, e.tag)
		out = binary.LittleEndian.AppendUint16(out, e.perm)
		out = binary.LittleEndian.AppendUint32(out, e.id)
	}
	return out
}

// xattrTree makes a volume whose files and folder carry what users and admins set on them: a
// user's attributes (one of bytes that are no text), POSIX ACLs (a folder's default ACL too), a
// file capability, and a file system's own trusted.* attribute, which stays.
func xattrTree(t *testing.T) string {
	dir := t.TempDir()
	if err := unix.Setxattr(dir, "user.probe", []byte("1"), 0); errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EPERM) {
		t.Skipf("this file system takes no user.* attributes: %v", err)
	}
	must(t, unix.Removexattr(dir, "user.probe"))
	old := time.Date(2024, 2, 29, 13, 14, 15, 0, time.UTC)
	must(t, os.MkdirAll(filepath.Join(dir, "shared", "team"), 0o770))
	for _, name := range []string{"shared/report.csv", "bin/tool", "plain.txt", "shared/team/notes.md"} {
		must(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755))
		must(t, os.WriteFile(filepath.Join(dir, name), []byte("contents of "+name), 0o640))
	}
	set := func(name, attr string, value []byte) {
		t.Helper()
		if err := unix.Lsetxattr(filepath.Join(dir, name), attr, value, 0); err != nil {
			if attr == "security.capability" || strings.HasPrefix(attr, "trusted.") {
				t.Skipf("%s: %v (not root?)", attr, err)
			}
			t.Fatalf("%s on %s: %v", attr, name, err)
		}
	}
	set("shared/report.csv", "user.origin", []byte("blue\x00\xff"))
	set("shared/report.csv", "system.posix_acl_access", posixACL())
	set("shared", "system.posix_acl_default", posixACL())
	set("shared", "user.team", []byte("analytics"))
	capability := binary.LittleEndian.AppendUint32(nil, 0x02000001)  // revision 2, effective
	capability = binary.LittleEndian.AppendUint32(capability, 1<<10) // CAP_NET_BIND_SERVICE
	capability = append(capability, make([]byte, 12)...)
	set("bin/tool", "security.capability", capability)
	set("plain.txt", "trusted.overlay.origin", []byte("x"))
	for _, name := range []string{"shared/report.csv", "bin/tool", "plain.txt", "shared/team/notes.md", "shared/team", "shared", "bin"} {
		must(t, os.Chtimes(filepath.Join(dir, name), old, old))
	}
	return dir
}

func xattrsAt(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	h := &tar.Header{}
	must(t, readXattrs(int(f.Fd()), h))
	return xattrsOf(h)
}

// TestExtendedAttributesMove: a volume's ACLs, file capabilities and user attributes are in its
// backup's entries and listing and come back on restore, exactly (what the target had beside them
// goes); the file system's own attributes stay; a second restore changes nothing.
func TestExtendedAttributesMove(t *testing.T) {
	src := xattrTree(t)
	stream, files := packed(t, src)
	byPath := map[string]snapshot.File{}
	for _, f := range files {
		byPath[f.Path] = f
	}
	if x := byPath["shared/report.csv"].Xattrs; len(x) != 2 || x["user.origin"] == "" || x["system.posix_acl_access"] == "" {
		t.Errorf("report.csv listed with %v, want its user attribute and ACL", x)
	}
	if x := byPath["shared/"].Xattrs; len(x) != 2 || x["system.posix_acl_default"] == "" {
		t.Errorf("shared/ listed with %v, want its default ACL and user attribute", x)
	}
	if x := byPath["bin/tool"].Xattrs; len(x) != 1 || x["security.capability"] == "" {
		t.Errorf("bin/tool listed with %v, want its capability", x)
	}
	if x := byPath["plain.txt"].Xattrs; x != nil {
		t.Errorf("plain.txt listed with %v: a file system's trusted.* attributes are its own", x)
	}

	dst := t.TempDir()
	// The target's copy of one file has the same contents and an attribute blue's lacks.
	must(t, os.MkdirAll(filepath.Join(dst, "shared"), 0o755))
	must(t, os.WriteFile(filepath.Join(dst, "shared", "report.csv"), []byte("contents of shared/report.csv"), 0o640))
	must(t, unix.Setxattr(filepath.Join(dst, "shared", "report.csv"), "user.stale", []byte("green"), 0))
	opts := UnpackOptions{Owners: os.Geteuid() == 0, Xattrs: true}
	res := unpack(t, stream, dst, opts)
	sameTree(t, files, dst)
	// What the mover says it applied, which ferry checks against the listing.
	if len(res.Files) != len(files) {
		t.Fatalf("the unpack says it applied %d entries, want %d", len(res.Files), len(files))
	}
	for _, f := range resultFiles(res) {
		if !maps.Equal(f.Xattrs, byPath[f.Path].Xattrs) {
			t.Errorf("%s applied with attributes %v, listed with %v", f.Path, f.Xattrs, byPath[f.Path].Xattrs)
		}
	}
	for _, name := range []string{"shared/report.csv", "shared", "bin/tool", "shared/team/notes.md"} {
		want, got := xattrsAt(t, filepath.Join(src, name)), xattrsAt(t, filepath.Join(dst, name))
		if len(want) != len(got) {
			t.Errorf("%s: %d attributes on the target, want %d", name, len(got), len(want))
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s differs on the target", name, k)
			}
		}
	}

	before := ctimes(t, dst)
	time.Sleep(10 * time.Millisecond)
	if res := unpack(t, stream, dst, opts); res.Written != 0 || res.Updated != 0 {
		t.Errorf("second unpack: %d written, %d updated; want nothing", res.Written, res.Updated)
	}
	for p, c := range ctimes(t, dst) {
		if before[p] != c {
			t.Errorf("%s was touched by the second unpack", p)
		}
	}

	// An attribute changed on the target alone: verify names it, never its value.
	must(t, unix.Setxattr(filepath.Join(dst, "shared", "report.csv"), "user.origin", []byte("green-secret"), 0))
	listing, err := List(dst)
	must(t, err)
	diffs, _ := compareInline(files, listing.Files, true)
	if len(diffs) != 1 || !strings.Contains(diffs[0].detail, "extended attributes: backup system.posix_acl_access, user.origin, target system.posix_acl_access, user.origin (another value: user.origin)") ||
		strings.Contains(diffs[0].detail, "green-secret") {
		t.Errorf("verify of a changed attribute: %+v", diffs)
	}
}

// TestExtendedAttributesOfAnOlderBackupAreTheTargets: a backup from before ferry moved extended
// attributes does not say what its files had, so a restore of it leaves the target's.
func TestExtendedAttributesOfAnOlderBackupAreTheTargets(t *testing.T) {
	src := xattrTree(t)
	stream, _ := packed(t, src)
	dst := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dst, "shared"), 0o755))
	must(t, os.WriteFile(filepath.Join(dst, "shared", "report.csv"), []byte("contents of shared/report.csv"), 0o640))
	must(t, unix.Setxattr(filepath.Join(dst, "shared", "report.csv"), "user.target", []byte("kept"), 0))
	unpack(t, stream, dst, UnpackOptions{Owners: os.Geteuid() == 0})
	got := xattrsAt(t, filepath.Join(dst, "shared", "report.csv"))
	if len(got) != 1 || got["user.target"] == "" {
		t.Errorf("report.csv on the target has %v, want only the target's own", got)
	}
}

// TestRootFolderMoves: the volume's root folder's mode (a shared folder's setgid bit), time and
// default ACL are the backup's (RootPath, held apart from the files) and come back on restore;
// a second restore changes nothing.
func TestRootFolderMoves(t *testing.T) {
	src := xattrTree(t)
	must(t, unix.Setxattr(src, "system.posix_acl_default", posixACL(), 0))
	must(t, os.Chmod(src, 0o2770|os.ModeSetgid))
	old := time.Date(2023, 5, 6, 7, 8, 9, 0, time.UTC)
	must(t, os.Chtimes(src, old, old))
	stream, files := packed(t, src)
	listing, err := Index(zstdReader(t, stream))
	must(t, err)
	if r := listing.Root; r == nil || r.Mode != "02770" || r.Xattrs["system.posix_acl_default"] == "" || !r.ModTime.Equal(old) || len(listing.Files) != len(files) {
		t.Fatalf("the listing's root folder: %+v", listing.Root)
	}
	dst := t.TempDir()
	opts := UnpackOptions{Owners: os.Geteuid() == 0, Xattrs: true}
	res := unpack(t, stream, dst, opts)
	fi, err := os.Stat(dst)
	must(t, err)
	if fi.Mode()&os.ModePerm != 0o770 || fi.Mode()&os.ModeSetgid == 0 || !fi.ModTime().Equal(old) || xattrsAt(t, dst)["system.posix_acl_default"] != listing.Root.Xattrs["system.posix_acl_default"] {
		t.Errorf("the target's root folder: %v, %v, %v", fi.Mode(), fi.ModTime(), xattrsAt(t, dst))
	}
	if res.Root == nil || fileDifference(*listing.Root, *res.Root) != "" {
		t.Errorf("the unpack says it left the root as %+v", res.Root)
	}
	before := ctimes(t, dst)
	time.Sleep(10 * time.Millisecond)
	unpack(t, stream, dst, opts)
	for p, c := range ctimes(t, dst) {
		if before[p] != c {
			t.Errorf("%s was touched by the second unpack", p)
		}
	}
}

func zstdReader(t *testing.T, stream []byte) io.Reader {
	t.Helper()
	dec, err := zstd.NewReader(bytes.NewReader(stream))
	must(t, err)
	t.Cleanup(dec.Close)
	return dec
}
