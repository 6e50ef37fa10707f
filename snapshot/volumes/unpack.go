package volumes

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"golang.org/x/sys/unix"
)

// UnpackOptions say how Unpack treats what the directory already holds.
type UnpackOptions struct {
	// Delete removes the entries the directory holds that the archive does not (a top-level
	// lost+found excepted: the filesystem's, not data).
	Delete bool
	// Owners sets every entry's owner and group as the archive records them; only root may.
	Owners bool
	// Xattrs gives each file and directory exactly the extended attributes that move as the
	// archive records them (its backup holds them: snapshot.Volume.Xattrs); else they are left
	// as the target has them.
	Xattrs bool
}

// What Unpack did with an entry.
const (
	ActionWritten   = "written"   // created, or replaced because its contents or type differed
	ActionUpdated   = "updated"   // its contents were as in the archive; its mode, owner or time were set
	ActionUnchanged = "unchanged" // already as the archive holds it
)

// actions are the actions by the numbers an unpacker keeps of them.
var actions = []string{ActionWritten, ActionUpdated, ActionUnchanged}

// UnpackedFile is an archive entry as it is on disk after Unpack: read back with lstat, its
// SHA-256 that of the bytes written (or found identical) while unpacking.
type UnpackedFile struct {
	snapshot.File
	Action string `json:"action"`
}

// UnpackResult is what `ferry mover unpack --apply` prints once the archive is on disk: one JSON
// line, then its Files, a line each (ApplyAndPrint).
type UnpackResult struct {
	Files []UnpackedFile `json:"-"`
	// Count is the number of Files, on the lines that follow.
	Count     int `json:"count"`
	Written   int `json:"written"`
	Updated   int `json:"updated"`
	Unchanged int `json:"unchanged"`
	// Bytes counts the contents of the files written.
	Bytes int64 `json:"bytes"`
	// Deleted lists what Delete removed.
	Deleted []string `json:"deleted,omitempty"`
	// Notes say what could not be done as the archive asks, such as setting owners without root.
	Notes []string `json:"notes,omitempty"`
	// Root is the volume's root folder as applied, when the archive has it (RootPath).
	Root *snapshot.File `json:"root,omitempty"`
}

// ErrUnsafePath matches the error of an archive entry that would land outside the directory:
// an absolute name, a ".." or a path through a symlink.
var ErrUnsafePath = errors.New("path leaves the volume")

// UnpackCompressed is Unpack of a zstd-compressed archive, as Pack's output is stored.
func UnpackCompressed(ctx context.Context, dir string, r io.Reader, opts UnpackOptions) (UnpackResult, error) {
	st, err := StageCompressed(ctx, dir, r)
	if err != nil {
		return UnpackResult{}, err
	}
	return Apply(ctx, dir, st, opts)
}

// Unpack writes the tar stream that Pack wrote into dir: Stage, then Apply. Nothing of dir
// changes unless the whole archive was read, up to its end marker. It is what ferry does when
// it has nothing to check between the two, as in tests and tools; a restore checks the staged
// archive against the backup's manifest before it applies it.
func Unpack(ctx context.Context, dir string, r io.Reader, opts UnpackOptions) (UnpackResult, error) {
	st, err := Stage(ctx, dir, r)
	if err != nil {
		return UnpackResult{}, err
	}
	return Apply(ctx, dir, st, opts)
}

// holeBlock is the granularity of holes in written files: a filesystem block.
const holeBlock = 4096

type unpacker struct {
	root *os.Root
	opts UnpackOptions
	res  UnpackResult
	// dirs are directories known to be real directories (not symlinks) during this run.
	dirs map[string]bool
	// keep holds every archive path and its parents, for Delete.
	keep map[string]bool
	// archiveDirs get their mode and times once their children are written.
	archiveDirs []pendingDir
	// actions are what was done with each entry, in the list's order: an index in actions.
	actions  []byte
	buf, cmp []byte
	zero     []byte
	// cur is the root of the directory curDir, where the last entries were: a path is resolved
	// component by component on every operation, so entries of one directory (as a tar stream
	// has them) are reached through their directory's root, by their base name.
	cur    *os.Root
	curDir string
	// rootTouched says an entry at the volume's root was written or deleted: the root's time is
	// then the apply's, not the one from before the staging folder.
	rootTouched bool
	// xattrsUnset counts the entries whose extended attributes could not be set, the first for
	// xattrsErr.
	xattrsUnset int
	xattrsErr   error
}

func newUnpacker(root *os.Root, opts UnpackOptions) *unpacker {
	return &unpacker{root: root, opts: opts, dirs: map[string]bool{}, keep: map[string]bool{},
		buf: make([]byte, 1<<20), cmp: make([]byte, 1<<20), zero: make([]byte, holeBlock)}
}

func (u *unpacker) close() {
	if u.cur != nil {
		u.cur.Close()
		u.cur, u.curDir = nil, ""
	}
}

// at returns the root to reach name through, and name in it.
func (u *unpacker) at(name string) (*os.Root, string, error) {
	dir, base := path.Split(name)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		return u.root, base, nil
	}
	if u.cur == nil || u.curDir != dir {
		if u.cur != nil {
			u.cur.Close()
			u.cur, u.curDir = nil, ""
		}
		r, err := u.root.OpenRoot(dir)
		if err != nil {
			return nil, "", err
		}
		u.cur, u.curDir = r, dir
	}
	return u.cur, base, nil
}

func (u *unpacker) lstat(name string) (fs.FileInfo, error) {
	r, base, err := u.at(name)
	if err != nil {
		return nil, err
	}
	return r.Lstat(base)
}

func (u *unpacker) mkdir(name string, perm fs.FileMode) error {
	r, base, err := u.at(name)
	if err != nil {
		return err
	}
	return r.Mkdir(base, perm)
}

func (u *unpacker) remove(name string) error {
	r, base, err := u.at(name)
	if err != nil {
		return err
	}
	return r.Remove(base)
}

func (u *unpacker) chmod(name string, mode fs.FileMode) error {
	r, base, err := u.at(name)
	if err != nil {
		return err
	}
	return r.Chmod(base, mode)
}

func (u *unpacker) chtimes(name string, atime, mtime time.Time) error {
	r, base, err := u.at(name)
	if err != nil {
		return err
	}
	return r.Chtimes(base, atime, mtime)
}

func (u *unpacker) lchown(name string, uid, gid int) error {
	r, base, err := u.at(name)
	if err != nil {
		return err
	}
	return r.Lchown(base, uid, gid)
}

func (u *unpacker) readlink(name string) (string, error) {
	r, base, err := u.at(name)
	if err != nil {
		return "", err
	}
	return r.Readlink(base)
}

func (u *unpacker) symlink(target, name string) error {
	r, base, err := u.at(name)
	if err != nil {
		return err
	}
	return r.Symlink(target, base)
}

func (u *unpacker) open(name string) (*os.File, error) {
	r, base, err := u.at(name)
	if err != nil {
		return nil, err
	}
	return r.Open(base)
}

func (u *unpacker) openFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	r, base, err := u.at(name)
	if err != nil {
		return nil, err
	}
	return r.OpenFile(base, flag, perm)
}

type pendingDir struct {
	name  string
	h     *tar.Header
	index int // in actions
}

// entryPath checks an archive name and returns it as a clean relative path.
func entryPath(name string) (string, error) {
	p := strings.TrimSuffix(name, "/")
	if p == "" || path.IsAbs(p) || path.Clean(p) != p || p == "." || p == ".." || strings.HasPrefix(p, "../") || strings.ContainsRune(p, 0) {
		return "", badinput.Errorf("archive entry %q: %w", name, ErrUnsafePath)
	}
	return p, nil
}

func (u *unpacker) count(action string, size int64) {
	switch action {
	case ActionWritten:
		u.res.Written++
		u.res.Bytes += size
	case ActionUpdated:
		u.res.Updated++
	default:
		u.res.Unchanged++
	}
}

// parents makes sure every parent of name is a real directory, creating missing ones, so that
// nothing is written through a symlink (os.Root would still keep it inside dir).
func (u *unpacker) parents(name string) error {
	for i := 0; i < len(name); i++ {
		if name[i] != '/' {
			continue
		}
		p := name[:i]
		u.keep[p] = true
		if u.dirs[p] {
			continue
		}
		fi, err := u.lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := u.mkdir(p, 0o755); err != nil {
				return err
			}
		case err != nil:
			return err
		case fi.Mode()&fs.ModeSymlink != 0:
			return badinput.Errorf("archive entry %q goes through the symlink %s: %w", name, p, ErrUnsafePath)
		case !fi.IsDir():
			return badinput.Errorf("archive entry %q: %s is not a directory", name, p)
		}
		u.dirs[p] = true
	}
	return nil
}

// forget drops name and what lies under it from the directories known to be real.
func (u *unpacker) forget(name string) {
	if u.cur != nil && (u.curDir == name || strings.HasPrefix(u.curDir, name+"/")) {
		u.cur.Close()
		u.cur, u.curDir = nil, ""
	}
	for d := range u.dirs {
		if d == name || strings.HasPrefix(d, name+"/") {
			delete(u.dirs, d)
		}
	}
}

// replace removes whatever is at name.
func (u *unpacker) replace(name string, fi fs.FileInfo) error {
	u.forget(name)
	if fi.IsDir() {
		return u.root.RemoveAll(name)
	}
	return u.remove(name)
}

func (u *unpacker) directory(name string, h *tar.Header) (string, error) {
	fi, err := u.lstat(name)
	action := ActionWritten
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return "", err
	case fi.IsDir():
		action = ActionUpdated
		if same, err := u.sameMeta(name, fi, h); err != nil {
			return "", err
		} else if same {
			action = ActionUnchanged
		}
	default:
		if err := u.replace(name, fi); err != nil {
			return "", err
		}
	}
	if action == ActionWritten {
		// Owner-writable until its children are in; finishDirs sets the archive's mode.
		if err := u.mkdir(name, 0o700); err != nil {
			return "", err
		}
	} else if !u.opts.Owners && fi.Mode().Perm()&0o300 != 0o300 {
		// Without root's DAC_OVERRIDE the owner must be able to write into it.
		if err := u.chmod(name, fi.Mode().Perm()|0o700); err != nil {
			return "", err
		}
	}
	u.dirs[name] = true
	return action, nil
}

func (u *unpacker) link(name string, h *tar.Header) (string, error) {
	fi, err := u.lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return "", err
	case fi.Mode()&fs.ModeSymlink != 0:
		if target, err := u.readlink(name); err == nil && target == h.Linkname {
			action := ActionUnchanged
			if u.opts.Owners && !sameOwner(fi, h) {
				action = ActionUpdated
				if err := u.chown(name, h); err != nil {
					return "", err
				}
			}
			if !fi.ModTime().Equal(h.ModTime) {
				action = ActionUpdated
				if err := u.lutimes(name, h.ModTime); err != nil {
					return "", err
				}
			}
			return action, nil
		}
		fallthrough
	default:
		if err := u.replace(name, fi); err != nil {
			return "", err
		}
	}
	// The target is data: it may point anywhere, and is never followed here.
	if err := u.symlink(h.Linkname, name); err != nil {
		return "", err
	}
	if err := u.chown(name, h); err != nil {
		return "", err
	}
	return ActionWritten, u.lutimes(name, h.ModTime)
}

// inDir runs fn with an open descriptor of name's directory and name's base name, for the calls
// os.Root lacks; the directory is reached as every other path is, inside the root.
func (u *unpacker) inDir(name string, fn func(dirfd int, base string) error) error {
	r, base, err := u.at(name)
	if err != nil {
		return err
	}
	d, err := r.Open(".")
	if err != nil {
		return err
	}
	defer d.Close()
	return fn(int(d.Fd()), base)
}

// lutimes sets the modification time of a symlink itself: Chtimes would follow it.
func (u *unpacker) lutimes(name string, mtime time.Time) error {
	return u.inDir(name, func(dirfd int, base string) error {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, unix.NsecToTimespec(mtime.UnixNano())}
		return unix.UtimesNanoAt(dirfd, base, ts, unix.AT_SYMLINK_NOFOLLOW)
	})
}

// fifo makes (or keeps) a FIFO; it is never opened, which would wait for a writer.
func (u *unpacker) fifo(name string, h *tar.Header) (string, error) {
	fi, err := u.lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return "", err
	case fi.Mode()&fs.ModeNamedPipe != 0:
		if same, err := u.sameMeta(name, fi, h); err != nil || same {
			return ActionUnchanged, err
		}
		return ActionUpdated, u.setMeta(name, h)
	default:
		if err := u.replace(name, fi); err != nil {
			return "", err
		}
	}
	err = u.inDir(name, func(dirfd int, base string) error { return unix.Mkfifoat(dirfd, base, 0o600) })
	if err != nil {
		return "", err
	}
	return ActionWritten, u.setMeta(name, h)
}

// hardlink makes name another name of head, an earlier entry already in place, unless it is.
// The file's mode, owner and time are head's, set with it.
func (u *unpacker) hardlink(name, head string) (string, error) {
	hfi, err := u.lstat(head)
	if err != nil {
		return "", err
	}
	if !hfi.Mode().IsRegular() {
		return "", fmt.Errorf("hard link to %s, which is not a file", head)
	}
	fi, err := u.lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return "", err
	case os.SameFile(fi, hfi):
		return ActionUnchanged, nil
	default:
		if err := u.replace(name, fi); err != nil {
			return "", err
		}
	}
	if err := u.root.Link(head, name); err != nil {
		return "", err
	}
	return ActionWritten, nil
}

// compare reads the entry and old in step until they differ. It returns how many bytes were
// equal and, on a difference, the entry's bytes it read past them.
func (u *unpacker) compare(old *os.File, tr io.Reader, digest hash.Hash, size int64) (int64, []byte, error) {
	var matched int64
	for matched < size {
		n := int(min(int64(len(u.buf)), size-matched))
		if _, err := io.ReadFull(tr, u.buf[:n]); err != nil {
			return 0, nil, fmt.Errorf("read the archive: %w", unexpected(err))
		}
		if _, err := io.ReadFull(old, u.cmp[:n]); err != nil || !bytes.Equal(u.buf[:n], u.cmp[:n]) {
			return matched, u.buf[:n], nil
		}
		digest.Write(u.buf[:n])
		matched += int64(n)
	}
	return matched, nil, nil
}

// writeContents writes an entry's contents to f: the first matched bytes from old, then pending
// and the rest of the entry.
func (u *unpacker) writeContents(f *os.File, h *tar.Header, tr io.Reader, old *os.File, matched int64, pending []byte, digest hash.Hash) error {
	var err error
	w := &holeWriter{f: f, zero: u.zero}
	if matched > 0 {
		_, err = io.CopyBuffer(w, io.NewSectionReader(old, 0, matched), u.cmp)
	}
	if err == nil && len(pending) > 0 {
		digest.Write(pending)
		_, err = w.Write(pending)
	}
	if err == nil {
		rest := h.Size - matched - int64(len(pending))
		var n int64
		n, err = io.CopyBuffer(io.MultiWriter(w, digest), io.LimitReader(tr, rest), u.buf)
		if err == nil && n != rest {
			err = fmt.Errorf("read the archive: %w", io.ErrUnexpectedEOF)
		}
	}
	if err == nil {
		err = f.Truncate(h.Size) // a hole at the end has no write to make the size
	}
	return err
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// holeWriter writes at increasing offsets and skips blocks of zeros, leaving holes.
type holeWriter struct {
	f    *os.File
	off  int64
	zero []byte
}

func (w *holeWriter) Write(p []byte) (int, error) {
	n := len(p)
	start := -1 // of the run of data blocks not yet written
	for i := 0; i < len(p); {
		// Blocks are aligned with the file's offsets, as the filesystem's are.
		end := i + holeBlock - int((w.off+int64(i))%holeBlock)
		end = min(end, len(p))
		if bytes.Equal(p[i:end], w.zero[:end-i]) {
			if start >= 0 {
				if _, err := w.f.WriteAt(p[start:i], w.off+int64(start)); err != nil {
					return 0, err
				}
				start = -1
			}
		} else if start < 0 {
			start = i
		}
		i = end
	}
	if start >= 0 {
		if _, err := w.f.WriteAt(p[start:], w.off+int64(start)); err != nil {
			return 0, err
		}
	}
	w.off += int64(n)
	return n, nil
}

// tarMode is a file mode as tar (and the manifest) records it: permissions with setuid 04000,
// setgid 02000 and sticky 01000.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

func sameOwner(fi fs.FileInfo, h *tar.Header) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == h.Uid && int(st.Gid) == h.Gid
}

// sameMeta reports whether the file, directory or FIFO name (fi) has the entry's mode, time,
// (when set) owner and extended attributes.
func (u *unpacker) sameMeta(name string, fi fs.FileInfo, h *tar.Header) (bool, error) {
	if tarMode(fi.Mode()) != h.Mode&0o7777 || !fi.ModTime().Equal(h.ModTime) || (u.opts.Owners && !sameOwner(fi, h)) {
		return false, nil
	}
	same := true
	err := u.withXattrs(name, h, func(fd int) (err error) {
		same, err = sameXattrs(fd, h)
		return err
	})
	if unsettable(err) {
		// Unreadable here (a mover without root): setMeta tries when there are some to set.
		return len(xattrsOf(h)) == 0, nil
	}
	return same, err
}

// unsettable says whether err is the target's file system's or the mover's refusal of extended
// attributes.
func unsettable(err error) bool {
	return errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)
}

// xattrs gives name exactly the entry's extended attributes among those that move. Where the
// target's file system or the mover may not set them (ENOTSUP, EPERM), it goes on and says so;
// verify names each entry that differs.
func (u *unpacker) xattrs(name string, h *tar.Header) error {
	err := u.withXattrs(name, h, func(fd int) error { return setXattrs(fd, h) })
	if unsettable(err) {
		if len(xattrsOf(h)) == 0 {
			return nil // none to set: a file the mover may not open (no root) keeps what it has
		}
		if u.xattrsUnset++; u.xattrsUnset == 1 {
			u.xattrsErr = err
		}
		return nil
	}
	return err
}

// withXattrs runs fn with an open descriptor of name, a file or directory whose extended
// attributes move: opened in its directory, never through a symlink.
func (u *unpacker) withXattrs(name string, h *tar.Header, fn func(fd int) error) error {
	if !u.opts.Xattrs || h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeDir {
		return nil
	}
	return u.inDir(name, func(dirfd int, base string) error {
		fd, err := unix.Openat(dirfd, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return fn(fd)
	})
}

// chown sets the entry's owner, when asked to. Where the mover may not (a container without
// CAP_CHOWN, user namespaces), it goes on without owners and says so.
func (u *unpacker) chown(name string, h *tar.Header) error {
	if !u.opts.Owners {
		return nil
	}
	err := u.lchown(name, h.Uid, h.Gid)
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) {
		u.opts.Owners = false
		u.res.Notes = append(u.res.Notes, fmt.Sprintf("owners are not set: %v", err))
		return nil
	}
	return err
}

// setMeta sets owner (first: chown clears setgid and file capabilities), extended attributes
// (before the mode: an ACL's may clear setgid, and the mode sets an ACL's mask as the archive's
// mode has it), mode and time.
func (u *unpacker) setMeta(name string, h *tar.Header) error {
	if err := u.chown(name, h); err != nil {
		return err
	}
	if err := u.xattrs(name, h); err != nil {
		return err
	}
	if err := u.chmod(name, h.FileInfo().Mode()); err != nil {
		return err
	}
	return u.chtimes(name, time.Time{}, h.ModTime)
}

// deleteOthers removes what the directory holds beyond the archive's entries and their parents.
func (u *unpacker) deleteOthers() error {
	return walkRoot(u.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." || u.keep[p] {
			return nil
		}
		if (p == "lost+found" && d.IsDir()) || isStaging(p) {
			return fs.SkipDir
		}
		if !strings.Contains(p, "/") {
			u.rootTouched = true
		}
		if err := u.root.RemoveAll(p); err != nil {
			return fmt.Errorf("delete %s: %w", p, err)
		}
		u.forget(p)
		if d.IsDir() {
			u.res.Deleted = append(u.res.Deleted, p+"/")
			return fs.SkipDir
		}
		u.res.Deleted = append(u.res.Deleted, p)
		return nil
	})
}

// finishDirs sets the archive's directories' owners, modes and times, children before parents:
// writing a child changes its directory's time.
func (u *unpacker) finishDirs() error {
	for _, d := range slices.Backward(u.archiveDirs) {
		if fi, err := u.lstat(d.name); err == nil {
			if same, err := u.sameMeta(d.name, fi, d.h); err != nil {
				return fmt.Errorf("%s: %w", d.name, err)
			} else if same {
				continue // untouched, so that unpacking twice changes nothing
			}
		}
		if err := u.setMeta(d.name, d.h); err != nil {
			return fmt.Errorf("%s: %w", d.name, err)
		}
	}
	for _, d := range u.archiveDirs {
		u.count(actions[u.actions[d.index]], 0)
	}
	return nil
}

// applyRoot gives the volume's root folder the archive's owner, extended attributes, mode and
// time (f, its RootPath entry), and says whether it could. Where the mover may not (not root, a
// root folder it does not own), it goes on and says so in the notes: the claim's root keeps
// what the target gave it.
func (u *unpacker) applyRoot(f StagedFile, staging bool) (bool, error) {
	h, err := f.header()
	if err != nil {
		return false, err
	}
	fi, err := u.root.Lstat(".")
	if err != nil {
		return false, err
	}
	like := *h
	if staging {
		like.ModTime = fi.ModTime() // the staging folder's; set once it is removed
	}
	if same, err := u.sameMeta(".", fi, &like); err != nil || same {
		return same, err // untouched, so that unpacking twice changes nothing
	}
	if err := u.chown(".", h); err != nil {
		return false, err
	}
	unset := u.xattrsUnset
	if err := u.xattrs(".", h); err != nil {
		return false, err
	}
	err = u.root.Chmod(".", h.FileInfo().Mode())
	if err == nil {
		err = u.root.Chtimes(".", time.Time{}, h.ModTime)
	}
	if errors.Is(err, fs.ErrPermission) {
		u.res.Notes = append(u.res.Notes, fmt.Sprintf("the volume's root folder keeps the target's mode and time: %v", err))
		return false, nil
	}
	return err == nil && u.xattrsUnset == unset, err
}

// readBackRoot is the volume's root folder as the target holds it.
func (u *unpacker) readBackRoot() (*snapshot.File, error) {
	f, err := u.readBack(StagedFile{File: snapshot.File{Path: RootPath}}, 0)
	return &f.File, err
}

// noteUnsetXattrs says in the result's notes how many entries' extended attributes could not be
// set, and why.
func (u *unpacker) noteUnsetXattrs() {
	if u.xattrsUnset > 0 {
		u.res.Notes = append(u.res.Notes, fmt.Sprintf("extended attributes (ACLs, file capabilities, user.*) are not set on %d entries: %v", u.xattrsUnset, u.xattrsErr))
	}
}

// noteForeignOwners says in the result's notes how many entries are not owned as the archive
// records, when the mover could not set owners.
func (u *unpacker) noteForeignOwners(dir string, st Staged) error {
	if u.opts.Owners {
		return nil
	}
	foreign := 0
	err := st.each(dir, func(f StagedFile) error {
		fi, err := u.lstat(strings.TrimSuffix(f.Path, "/"))
		if err != nil {
			return err
		}
		if uid, gid := owner(fi); uid != f.UID || gid != f.GID {
			foreign++
		}
		return nil
	})
	if foreign > 0 {
		u.res.Notes = append(u.res.Notes, fmt.Sprintf("%d entries are owned by the mover's user, not by the owner the backup records: only a mover running as root sets owners", foreign))
	}
	return err
}

// owner is a file's owner and group as lstat gives them.
func owner(fi fs.FileInfo) (uid, gid int) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid), int(st.Gid)
	}
	return 0, 0
}

// readBack is an entry's record as it is on disk now, after action.
func (u *unpacker) readBack(e StagedFile, action byte) (UnpackedFile, error) {
	f := UnpackedFile{File: snapshot.File{Path: e.Path, SHA256: e.SHA256, Hardlink: e.Hardlink}, Action: actions[action]}
	name := cmp.Or(strings.TrimSuffix(f.Path, "/"), ".")
	fi, err := u.lstat(name)
	if err != nil {
		return f, err
	}
	f.Mode, f.ModTime = fmt.Sprintf("%#o", tarMode(fi.Mode())), fi.ModTime().UTC()
	f.UID, f.GID = owner(fi)
	switch {
	case fi.IsDir():
		f.Type = "dir"
		f.Xattrs, err = u.readXattrs(name, tar.TypeDir)
	case fi.Mode()&fs.ModeSymlink != 0:
		f.Type = "symlink"
		if f.Link, err = u.readlink(name); err != nil {
			return f, err
		}
	case fi.Mode().IsRegular():
		f.Type, f.Size = "file", fi.Size()
		if f.Hardlink != "" {
			// Still the same file as its first name, or no hard link at all.
			hfi, err := u.lstat(f.Hardlink)
			if err != nil || !os.SameFile(fi, hfi) {
				f.Hardlink = ""
			}
		} else {
			f.Xattrs, err = u.readXattrs(name, tar.TypeReg)
		}
	case fi.Mode()&fs.ModeNamedPipe != 0:
		f.Type = "fifo"
	default:
		f.Type = "other"
	}
	return f, err
}

// readXattrs is the listing's record of the extended attributes that move of name, a file or
// directory (typ).
func (u *unpacker) readXattrs(name string, typ byte) (map[string]string, error) {
	h := &tar.Header{Typeflag: typ}
	err := u.withXattrs(name, h, func(fd int) error { return readXattrs(fd, h) })
	if unsettable(err) {
		err = nil // the mover may not open it (no root): ferry's check names what it lacks
	}
	return xattrsOf(h), err
}

// syncDir flushes the filesystem that holds root.
func syncDir(root *os.Root) error {
	d, err := root.Open(".")
	if err != nil {
		return err
	}
	defer d.Close()
	return unix.Syncfs(int(d.Fd()))
}

// DirectUnpackRequest is what ferry hands a mover, as one JSON line on stdin, so that the mover
// downloads a volume's stored archive and stages it by itself (ferry mover unpack --stage
// --direct): a presigned GET of that one object, valid for a short time. It holds no credential
// and no key: an encrypted archive is never handed over, ferry decrypts it and streams it through
// exec.
type DirectUnpackRequest struct {
	Key string                   `json:"key"` // the stored file, as the result names it
	Get storage.PresignedRequest `json:"get"`
}

// DirectUnpackResult is what the mover prints, also when staging failed: how many bytes of the
// stored file it read and their SHA-256, which ferry checks against the manifest, tell a bad
// backup from a failing target.
type DirectUnpackResult struct {
	Staged
	Stored snapshot.Stream `json:"stored"`
	Error  string          `json:"error,omitempty"`
}

// StageDirect runs in the mover pod (ferry mover unpack --stage --direct): it reads the stored
// file, stages it in dir (see Stage) and reads the file to its end. An error means nothing was
// read; a failed stage is in the result's Error, and left nothing.
func StageDirect(ctx context.Context, dir string, req DirectUnpackRequest) (DirectUnpackResult, error) {
	var res DirectUnpackResult
	if strings.HasSuffix(req.Key, snapshot.EncryptedSuffix) {
		return res, badinput.Errorf("request: %s is encrypted: ferry decrypts it and streams it through exec", req.Key)
	}
	rc, err := storage.GetPresigned(ctx, storage.PresignedHTTPClient(req.Get.InsecureSkipVerify), req.Get)
	if err != nil {
		return res, fmt.Errorf("read %s: %w", req.Key, err)
	}
	defer rc.Close()
	digest, counter := sha256.New(), &countWriter{}
	stored := io.TeeReader(rc, io.MultiWriter(digest, counter))
	res.Staged, err = stageCompressed(ctx, dir, stored, downloadBlocksInFlight)
	// All of the stored file is read, for ferry to check it whole against the manifest.
	if _, derr := io.Copy(io.Discard, stored); err == nil {
		err = derr
	}
	if err != nil {
		if res.ID != "" {
			Abort(dir, res.Staged)
			res.Staged = Staged{}
		}
		res.Error = err.Error()
	}
	res.Stored = snapshot.Stream{Key: req.Key, Bytes: counter.n, SHA256: hex.EncodeToString(digest.Sum(nil))}
	return res, nil
}

// walkRoot is fs.WalkDir of root's tree from ".", in lexical order, for names of any bytes:
// io/fs takes only UTF-8 paths, and root.FS() refuses the others. The root is visited with a nil
// DirEntry.
func walkRoot(root *os.Root, fn fs.WalkDirFunc) error {
	err := walkRootDir(root, ".", nil, fn)
	if err == fs.SkipDir || err == fs.SkipAll {
		return nil
	}
	return err
}

func walkRootDir(root *os.Root, dir string, de fs.DirEntry, fn fs.WalkDirFunc) error {
	if err := fn(dir, de, nil); err != nil {
		return err
	}
	d, err := root.Open(dir)
	if err != nil {
		return fn(dir, de, err)
	}
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return fn(dir, de, err)
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, e := range entries {
		p := e.Name()
		if dir != "." {
			p = dir + "/" + p
		}
		if e.IsDir() {
			err = walkRootDir(root, p, e, fn)
		} else {
			err = fn(p, e, nil)
		}
		if err == fs.SkipDir {
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}
