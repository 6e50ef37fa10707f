package volumes

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// A restore changes nothing of a volume before the archive is known good: Stage reads the whole
// archive, up to tar's end marker, and writes the contents of every file that differs from the
// target's into a staging folder at the volume's root (StagingPrefix and an id: the same
// filesystem, so that files are later renamed into place). ferry then checks the stored stream's
// size and SHA-256 and every staged entry against the backup's manifest, and only then has the
// mover Apply it: staged files renamed into place, directories, symlinks, modes, owners and times
// set, and, with Delete, what the archive lacks deleted, as a pass of its own. Anything wrong
// before Apply ends in Abort, which removes the staging folder and gives the root its time back:
// the target is as it was.

// Staged is what Stage did. `ferry mover unpack --stage` prints it as a line that sums it up,
// then its Files, a line each (see SaveStaged); Apply and Abort take the summary back (on stdin,
// from ferry).
type Staged struct {
	ID string `json:"id"`
	// Files lists the archive's entries, in its order, as it holds them: each file's size and
	// SHA-256 are those of the archive's bytes. A list that is long, or of a volume where files
	// were staged, is not held: Stage writes it to the staging folder as it reads the archive
	// (Saved), and Apply reads it from there.
	Files []StagedFile `json:"-"`
	// Count and ListSHA256 are the number of Files and the SHA-256 of their lines (SaveStaged);
	// Saved says the lines are in the staging folder, else ferry hands them back.
	Count      int    `json:"count"`
	ListSHA256 string `json:"listSHA256,omitempty"`
	Saved      bool   `json:"saved,omitempty"`
	// lines are the entries' lines as ferry read them, to hand back when they were not saved,
	// and as the mover got them back (loaded).
	lines []byte
	// loaded says LoadStaged checked the list: its entries are read again from the list.
	loaded bool
	// Skipped lists the files the backup left out: they are kept on the target as they are.
	Skipped []SkippedFile `json:"skipped,omitempty"`
	// Bytes counts the contents staged.
	Bytes int64 `json:"bytes"`
	// RootModTime is the root's time from before the staging folder was made, if one was.
	RootModTime time.Time `json:"rootModTime,omitzero"`
	// Xattrs is set by ferry as it hands the list back to apply: the backup holds its files'
	// extended attributes (UnpackOptions.Xattrs).
	Xattrs bool `json:"xattrs,omitempty"`
	// Root is the archive's entry of the volume's root folder (RootPath), applied last.
	Root *StagedFile `json:"root,omitempty"`
}

// StagedFile is an archive entry and where its contents wait.
type StagedFile struct {
	snapshot.File
	// Staged names the file in the staging folder with the entry's contents; empty when the
	// target's file already has them.
	Staged string `json:"staged,omitempty"`
}

// stagingDir is the staging folder of an id, checked: the id comes back on stdin.
func stagingDir(id string) (string, error) {
	if id == "" || strings.Trim(id, "0123456789abcdef") != "" {
		return "", badinput.Errorf("staged id %q: want hex digits", id)
	}
	return StagingPrefix + id, nil
}

// StageCompressed is Stage of a zstd-compressed archive, as Pack's output is stored.
func StageCompressed(ctx context.Context, dir string, r io.Reader) (Staged, error) {
	// One goroutine decodes just what the tar reader asks for: nothing reads on past the archive's
	// end marker into a stdin that may never end.
	return stageCompressed(ctx, dir, r, 1)
}

// downloadBlocksInFlight is how many blocks of a stream that ends (a download, read to its end
// anyway) are read, hashed and decoded ahead of the tar reader, on another core than the one
// writing the files.
const downloadBlocksInFlight = 4

// stageCompressed decodes with up to inflight blocks decoded ahead (1: none).
func stageCompressed(ctx context.Context, dir string, r io.Reader, inflight int) (Staged, error) {
	dec, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(inflight))
	if err != nil {
		return Staged{}, err
	}
	defer dec.Close()
	return Stage(ctx, dir, dec)
}

// Stage reads the tar stream that Pack wrote, up to its end marker, and stages it in dir without
// changing anything else of dir (see above). It first removes the staging folders that killed
// restores left. Entries that would leave dir, or reach it through a symlink, are bad input. On
// any error the staging folder is gone again and dir is as it was.
func Stage(ctx context.Context, dir string, r io.Reader) (Staged, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Staged{}, err
	}
	defer root.Close()
	if err := removeStaging(root); err != nil {
		return Staged{}, err
	}
	var id [8]byte
	rand.Read(id[:])
	s := &stager{u: newUnpacker(root, UnpackOptions{}), st: Staged{ID: hex.EncodeToString(id[:])},
		at: map[string]stagedRef{}, archiveDirs: map[string]bool{}, onTarget: map[string]bool{}, linked: map[string]uint64{},
		shared: map[string]uint64{}, dropped: map[int]bool{}, separated: map[int]string{}}
	defer s.u.close()
	defer func() {
		if s.held != nil {
			s.held.Close()
		}
	}()
	if err := s.run(ctx, r); err != nil {
		s.u.close()
		if s.draft != nil {
			s.draft.Close()
		}
		if s.staging != nil {
			s.staging.Close()
			s.staging = nil
			Abort(dir, s.st)
		}
		return Staged{}, err
	}
	return s.st, nil
}

// An exec that broke off can leave its mover running, or have it start only after ferry tried
// again, in the same volume. So a mover holds a flock(2) of its staging folder while it stages
// into it or applies it, and a stage removes only the staging folders no mover holds: those a
// killed restore left. Making a folder and taking its lock, and looking for folders to remove,
// are done under a lock of the root, so that no stage removes a folder between the two. On a
// filesystem without flock, staging folders are removed as before: the next stage removes them.

// lockRoot takes the exclusive lock of the volume's root, for a short step; unlock gives it back.
func lockRoot(root *os.Root) (unlock func(), err error) {
	d, err := root.Open(".")
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil && !noLocks(err) {
		d.Close()
		return nil, fmt.Errorf("lock the volume's root: %w", err)
	}
	return func() { d.Close() }, nil
}

// errStagingHeld is the error of a staging folder another mover holds.
var errStagingHeld = errors.New("another ferry mover holds it")

// holdStaging takes the lock of the staging folder name, which the returned file keeps until it
// is closed, or fails with errStagingHeld.
func holdStaging(root *os.Root, name string) (*os.File, error) {
	d, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil && !noLocks(err) {
		d.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", name, errStagingHeld)
		}
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	return d, nil
}

// noLocks says the filesystem does not take flock(2).
func noLocks(err error) bool {
	return errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.ENOLCK) || errors.Is(err, unix.EINVAL)
}

// removeAbandoned removes every staging folder at the root but keep, held or not, and gives the
// root its time back: once ferry applies what one mover staged, the others are of movers it gave
// up on (an exec that broke off whose stdin never ends keeps its mover, and its folder, forever).
func removeAbandoned(root *os.Root, keep string) error {
	unlock, err := lockRoot(root)
	if err != nil {
		return err
	}
	defer unlock()
	fi, err := root.Lstat(".")
	if err != nil {
		return err
	}
	entries, err := fs.ReadDir(root.FS(), ".")
	if err != nil {
		return err
	}
	removed := false
	for _, e := range entries {
		if isStaging(e.Name()) && e.Name() != keep {
			if err := root.RemoveAll(e.Name()); err != nil {
				return fmt.Errorf("remove %s, of a mover ferry gave up on: %w", e.Name(), err)
			}
			removed = true
		}
	}
	if !removed {
		return nil
	}
	return root.Chtimes(".", time.Time{}, fi.ModTime())
}

// removeStaging removes every staging folder at the root that no mover holds: a killed
// restore's.
func removeStaging(root *os.Root) error {
	unlock, err := lockRoot(root)
	if err != nil {
		return err
	}
	defer unlock()
	entries, err := fs.ReadDir(root.FS(), ".")
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !isStaging(e.Name()) {
			continue
		}
		held, err := holdStaging(root, e.Name())
		if errors.Is(err, errStagingHeld) {
			continue // a mover still stages or applies it
		}
		if err == nil {
			err = root.RemoveAll(e.Name())
			held.Close()
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove %s, left by an earlier restore: %w", e.Name(), err)
		}
	}
	return nil
}

type stager struct {
	u  *unpacker
	st Staged
	// at is what the list holds at each path: a later entry of the same name replaces it, a hard
	// link takes its head's size and SHA-256 from it.
	at map[string]stagedRef
	// archiveDirs are the archive's directories so far; onTarget says whether a path is a real
	// directory on the target, reached through real directories only.
	archiveDirs, onTarget map[string]bool
	// linked counts the later entries that are hard links to each file of the archive.
	linked map[string]uint64
	// shared holds the number of names of each target file kept as it is, when it has several.
	shared map[string]uint64
	// dropped are the entries, by their number, that a later one of the same name replaced;
	// separated the copies separate staged, by the number of the entry they are for.
	dropped   map[int]bool
	separated map[int]string
	// listed counts the entries listed, dropped ones too.
	listed int
	// draft holds the entries, a JSON line each, from when the staging folder is made (or the
	// list is long): the list is written as the archive is read, not held; finish writes the
	// staged list from it.
	draft    *os.File
	draftOut *bufio.Writer
	draftEnc *json.Encoder
	staging  *os.Root
	// held keeps the staging folder's lock while the stage runs.
	held *os.File
	n    int
}

// stagedRef is what the stager keeps of a listed entry: 56 bytes, not the entry (a claim of a
// million files keeps a million).
type stagedRef struct {
	index int32
	// staged is the number that names the entry's staged file, 0 for none.
	staged int32
	size   int64
	sum    [sha256.Size]byte
	// typ is the entry's type, an index in entryTypes.
	typ      uint8
	hardlink bool
	// asNamed says the entry's name in the archive is its path, as a hard link names it.
	asNamed bool
	// kept says the entry is TypeKept: the target's file is checked once the archive is read.
	kept bool
}

// entryTypes are the types of staged entries by the numbers a stagedRef keeps of them.
var entryTypes = []string{"file", "dir", "symlink", "fifo"}

func (r stagedRef) is(typ string) bool { return entryTypes[r.typ] == typ }

// draftName is the draft of the staged list in the staging folder.
const draftName = "list.draft"

func (s *stager) run(ctx context.Context, r io.Reader) error {
	tr := newArchiveReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read the archive: %w", err)
		}
		if err := s.entry(h, tr); err != nil {
			return err
		}
	}
	if err := s.checkKept(); err != nil {
		return err
	}
	if err := s.separate(); err != nil {
		return err
	}
	if err := s.finish(); err != nil {
		return err
	}
	if s.staging == nil {
		return nil
	}
	defer func() { s.staging.Close(); s.staging = nil }()
	// What is staged is on disk before anything is renamed into place.
	if err := syncDir(s.staging); err != nil {
		return fmt.Errorf("sync %s: %w", StagingPrefix+s.st.ID, err)
	}
	return nil
}

// list adds an entry at name to the staged list: to st.Files while the list is short and
// nothing is staged, else to the draft in the staging folder.
func (s *stager) list(name string, f StagedFile) error {
	ref := stagedRef{index: int32(s.listed), typ: uint8(slices.Index(entryTypes, f.Type)), hardlink: f.Hardlink != "", asNamed: f.Path == name, size: f.Size}
	if f.Staged != "" {
		n, err := strconv.Atoi(f.Staged)
		if err != nil {
			return err
		}
		ref.staged = int32(n)
	}
	if f.SHA256 != "" {
		if _, err := hex.Decode(ref.sum[:], []byte(f.SHA256)); err != nil {
			return err
		}
	}
	s.at[name] = ref
	s.listed++
	if s.draft == nil {
		s.st.Files = append(s.st.Files, f)
		if s.staging == nil && len(s.st.Files) <= InlineStaged {
			return nil
		}
		return s.openDraft()
	}
	return s.draftEnc.Encode(f)
}

// openDraft makes the staging folder if need be and moves the entries listed so far into a draft
// of the staged list there.
func (s *stager) openDraft() error {
	if err := s.makeStaging(); err != nil {
		return err
	}
	f, err := s.staging.OpenFile(draftName, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	s.draft, s.draftOut = f, bufio.NewWriterSize(f, 1<<16)
	s.draftEnc = json.NewEncoder(s.draftOut)
	for _, e := range s.st.Files {
		if err := s.draftEnc.Encode(e); err != nil {
			return err
		}
	}
	s.st.Files = nil
	return nil
}

// finish leaves out the dropped entries and adds the separated copies: in st.Files, or, from
// the draft, in the staged list saved in the staging folder (SaveStaged then has nothing to
// do), checked by its number and SHA-256 as Apply reads it.
func (s *stager) finish() error {
	if s.draft == nil {
		files := s.st.Files[:0]
		for i, f := range s.st.Files {
			if s.dropped[i] {
				continue
			}
			if staged, ok := s.separated[i]; ok {
				f.Staged = staged
			}
			files = append(files, f)
		}
		s.st.Files = files
		return nil
	}
	if err := s.draftOut.Flush(); err != nil {
		return fmt.Errorf("write the staged list: %w", err)
	}
	if _, err := s.draft.Seek(0, io.SeekStart); err != nil {
		return err
	}
	out, err := s.staging.OpenFile(stagedListName, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = s.writeList(out)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if cerr := s.draft.Close(); err == nil {
		err = cerr
	}
	s.draft = nil
	if err != nil {
		return fmt.Errorf("write the staged list: %w", err)
	}
	s.st.Saved, s.st.loaded = true, true
	return s.staging.Remove(draftName)
}

// writeList writes the draft's lines to out but the dropped ones, with the separated copies,
// and records their number and SHA-256.
func (s *stager) writeList(out io.Writer) error {
	w := newListWriter(out)
	draft := bufio.NewReaderSize(s.draft, 1<<16)
	count := 0
	for i := range s.listed {
		line, err := draft.ReadBytes('\n')
		if err != nil {
			return fmt.Errorf("entry %d of the draft: %w", i+1, err)
		}
		if s.dropped[i] {
			continue
		}
		if staged, ok := s.separated[i]; ok {
			var f StagedFile
			if err := json.Unmarshal(line, &f); err != nil {
				return err
			}
			f.Staged = staged
			if line, err = json.Marshal(f); err != nil {
				return err
			}
			line = append(line, '\n')
		}
		if _, err := w.Write(line); err != nil {
			return err
		}
		count++
	}
	return w.close(&s.st, count)
}

func (s *stager) entry(h *tar.Header, tr io.Reader) error {
	if h.Name == RootPath && h.Typeflag == tar.TypeDir && s.st.Root == nil && len(s.at) == 0 {
		s.st.Root = &StagedFile{File: headerFile(h)}
		s.st.Root.Type = "dir"
		return nil
	}
	name, err := entryPath(h.Name)
	if err != nil {
		return err
	}
	if top, _, _ := strings.Cut(name, "/"); isStaging(top) {
		return badinput.Errorf("archive entry %q: the name is reserved for ferry's staging folder", h.Name)
	}
	if err := s.parents(name); err != nil {
		return err
	}
	prev, dup := s.at[name]
	if dup && prev.is("dir") {
		// What follows would be written through whatever replaced the directory.
		return badinput.Errorf("archive entry %q appears twice, first as a directory: %w", h.Name, ErrUnsafePath)
	}
	if dup && (!prev.is("file") || prev.hardlink || s.linked[name] > 0 ||
		(h.Typeflag != tar.TypeReg && h.Typeflag != TypeKept && h.PAXRecords[SkippedRecord] == "")) {
		return badinput.Errorf("archive entry %q appears twice", h.Name)
	}
	if dup {
		if err := s.drop(prev); err != nil {
			return err
		}
		delete(s.at, name)
	}
	if reason := h.PAXRecords[SkippedRecord]; reason != "" {
		s.st.Skipped = append(s.st.Skipped, SkippedFile{Path: h.Name, Reason: reason})
		return nil
	}
	f := StagedFile{File: headerFile(h)}
	switch h.Typeflag {
	case tar.TypeDir:
		f.Type = "dir"
		s.archiveDirs[name] = true
	case tar.TypeSymlink:
		f.Type, f.Link = "symlink", h.Linkname
	case tar.TypeFifo:
		f.Type = "fifo"
	case tar.TypeLink:
		// Another name of a file the archive holds before: nothing to stage, Apply links it.
		head, err := entryPath(h.Linkname)
		if err != nil {
			return badinput.Errorf("archive entry %q links to %q: %w", h.Name, h.Linkname, ErrUnsafePath)
		}
		r, ok := s.at[head]
		if !ok || !r.is("file") || r.hardlink || !r.asNamed {
			return badinput.Errorf("archive entry %q links to %q, which is not a file before it in the archive", h.Name, h.Linkname)
		}
		f.Type, f.Hardlink, f.Size, f.SHA256 = "file", head, r.size, hex.EncodeToString(r.sum[:])
		s.linked[head]++
	case tar.TypeReg:
		f.Type, f.Size = "file", h.Size
		if f.SHA256, f.Staged, err = s.regular(name, h, tr); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	case TypeKept:
		f.Type = "file"
		if f.Size, f.SHA256, err = parseUnchanged(h.PAXRecords[UnchangedRecord]); err != nil {
			return badinput.Errorf("archive entry %q: %v", h.Name, err)
		}
		if err := s.list(name, f); err != nil {
			return err
		}
		r := s.at[name]
		r.kept = true
		s.at[name] = r
		return nil
	default:
		return badinput.Errorf("archive entry %q: type %q is not a file, directory, symlink, hard link or FIFO", h.Name, h.Typeflag)
	}
	return s.list(name, f)
}

// separate stages a copy of each target file kept as it is whose inode has more names on the
// target than the archive gives it: Apply would otherwise set one entry's mode and time through
// another's name, and leave files one that the archive holds apart.
func (s *stager) separate() error {
	for _, name := range slices.Sorted(maps.Keys(s.shared)) {
		r, ok := s.at[name]
		if !ok || !r.is("file") || r.hardlink || r.staged != 0 || s.shared[name] <= 1+s.linked[name] {
			continue
		}
		staged, err := s.copyTarget(name, r)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		s.separated[int(r.index)] = staged
	}
	return nil
}

// copyTarget stages a copy of the target's file at name, which has the contents of the entry r.
func (s *stager) copyTarget(name string, r stagedRef) (string, error) {
	old, err := s.u.open(name)
	if err != nil {
		return "", err
	}
	defer old.Close()
	if err := s.makeStaging(); err != nil {
		return "", err
	}
	s.n++
	staged := strconv.Itoa(s.n)
	out, err := s.staging.OpenFile(staged, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	digest := sha256.New()
	n, err := io.CopyBuffer(io.MultiWriter(&holeWriter{f: out, zero: s.u.zero}, digest), io.LimitReader(old, r.size), s.u.buf)
	if err == nil {
		err = out.Truncate(r.size)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	if n != r.size || !bytes.Equal(digest.Sum(nil), r.sum[:]) {
		return "", errors.New("changed on the target while the archive was staged")
	}
	s.st.Bytes += r.size
	return staged, nil
}

// drop forgets an entry a later one of the same name replaces.
func (s *stager) drop(r stagedRef) error {
	if r.staged != 0 {
		if err := s.staging.Remove(strconv.Itoa(int(r.staged))); err != nil {
			return err
		}
		s.st.Bytes -= r.size
	}
	s.dropped[int(r.index)] = true
	return nil
}

// parents checks that every parent of name is, or will be, a real directory: one of the
// archive's, or one on the target that is not a symlink (Apply makes missing ones).
func (s *stager) parents(name string) error {
	for i := 0; i < len(name); i++ {
		if name[i] != '/' {
			continue
		}
		p := name[:i]
		if s.archiveDirs[p] {
			continue
		}
		if r, ok := s.at[p]; ok {
			return badinput.Errorf("archive entry %q goes through %s, a %s of the archive: %w", name, p, entryTypes[r.typ], ErrUnsafePath)
		}
		if !s.targetDir(path.Dir(p)) {
			continue // the target has nothing there that is reached as the archive reaches it
		}
		fi, err := s.u.lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return err
		case fi.Mode()&fs.ModeSymlink != 0:
			return badinput.Errorf("archive entry %q goes through the symlink %s: %w", name, p, ErrUnsafePath)
		case !fi.IsDir():
			return badinput.Errorf("archive entry %q: %s is not a directory", name, p)
		}
	}
	return nil
}

// targetDir reports whether p ("." for the root) is a real directory of the target, reached
// through real directories only.
func (s *stager) targetDir(p string) bool {
	if p == "." || p == "" {
		return true
	}
	if ok, known := s.onTarget[p]; known {
		return ok
	}
	ok := s.targetDir(path.Dir(p))
	if ok {
		fi, err := s.u.lstat(p)
		ok = err == nil && fi.IsDir() && fi.Mode()&fs.ModeSymlink == 0
	}
	s.onTarget[p] = ok
	return ok
}

// regular reads a file's entry beside the target's file, if it has one of the same size, and
// stages its contents unless they are the same. It returns their SHA-256 and the staged name.
func (s *stager) regular(name string, h *tar.Header, tr io.Reader) (sum, staged string, err error) {
	digest := sha256.New()
	var old *os.File
	if s.targetDir(path.Dir(name)) {
		fi, err := s.u.lstat(name)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", "", err
		}
		if err == nil && fi.Mode().IsRegular() && fi.Size() == h.Size {
			old, err = s.u.open(name)
			if err != nil && !errors.Is(err, fs.ErrPermission) {
				return "", "", err
			}
		}
	}
	var matched int64
	var pending []byte
	if old != nil { // else unreadable: staged anew
		defer old.Close()
		matched, pending, err = s.u.compare(old, tr, digest, h.Size)
		if err != nil {
			return "", "", err
		}
		if matched == h.Size {
			if fi, err := old.Stat(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
					s.shared[name] = uint64(st.Nlink)
				}
			}
			return hex.EncodeToString(digest.Sum(nil)), "", nil
		}
	}
	if err := s.makeStaging(); err != nil {
		return "", "", err
	}
	s.n++
	staged = strconv.Itoa(s.n)
	f, err := s.staging.OpenFile(staged, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", "", err
	}
	err = s.u.writeContents(f, h, tr, old, matched, pending, digest)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", "", err
	}
	s.st.Bytes += h.Size
	return hex.EncodeToString(digest.Sum(nil)), staged, nil
}

// ErrKeptChanged is the error of a TypeKept entry whose file the target does not hold as the
// entry says: Stage fails before anything is applied, and ferry sends the claim in full.
var ErrKeptChanged = errors.New("the target's file is not as the restore before left it")

// checkKept checks the target's file of every TypeKept entry the list holds, once the archive is
// read to its end (a check as it is read would leave stdin unread for as long as the kept files
// take to read, and the API server answers no heartbeat while it waits to write stdin), and
// before anything is applied.
func (s *stager) checkKept() error {
	for name, r := range s.at {
		if !r.kept {
			continue
		}
		if err := s.kept(name, r.size, r.sum); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// kept checks the target's file at name against a TypeKept entry: a regular file of size bytes
// whose contents have the SHA-256 sum, read whole; nothing is staged for it. A file that cannot
// be read is not known to be kept either.
func (s *stager) kept(name string, size int64, sum [sha256.Size]byte) error {
	if !s.targetDir(path.Dir(name)) {
		return ErrKeptChanged
	}
	fi, err := s.u.lstat(name)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrKeptChanged, err)
	}
	if !fi.Mode().IsRegular() || fi.Size() != size {
		return ErrKeptChanged
	}
	old, err := s.u.open(name)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrKeptChanged, err)
	}
	defer old.Close()
	digest := sha256.New()
	if n, err := io.Copy(digest, old); err != nil {
		return fmt.Errorf("%w: %v", ErrKeptChanged, err)
	} else if n != size || [sha256.Size]byte(digest.Sum(nil)) != sum {
		return ErrKeptChanged
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
		s.shared[name] = uint64(st.Nlink)
	}
	return nil
}

// makeStaging makes the staging folder when the first file needs it: a restore that finds
// everything in place touches nothing, not even the root's time.
func (s *stager) makeStaging() error {
	if s.staging != nil {
		return nil
	}
	fi, err := s.u.root.Lstat(".")
	if err != nil {
		return err
	}
	name := StagingPrefix + s.st.ID
	unlock, err := lockRoot(s.u.root)
	if err != nil {
		return err
	}
	defer unlock()
	if err := s.u.root.Mkdir(name, 0o700); err != nil {
		return err
	}
	s.st.RootModTime = fi.ModTime()
	if s.held, err = holdStaging(s.u.root, name); err != nil {
		return err
	}
	s.staging, err = s.u.root.OpenRoot(name)
	return err
}

// Abort removes what Stage staged and gives the root its time back.
func Abort(dir string, st Staged) error {
	if st.RootModTime.IsZero() {
		return nil // nothing was staged
	}
	name, err := stagingDir(st.ID)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.RemoveAll(name); err != nil {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	return root.Chtimes(".", time.Time{}, st.RootModTime)
}

// Apply puts what Stage staged in place: in the archive's order, directories made (or kept),
// symlinks and FIFOs made, staged files renamed over the target's, hard links made to the files
// they name, the modes, owners (with opts.Owners) and times (a symlink's own) set; then, with
// opts.Delete, what the target holds beyond the archive (and the files the backup left out)
// deleted; then directories' modes and times set, children first. Entries already as the archive
// holds them are not touched, so applying twice changes nothing. The result holds every entry as
// it is on disk after.
func Apply(ctx context.Context, dir string, st Staged, opts UnpackOptions) (UnpackResult, error) {
	var res UnpackResult
	err := applyStaged(ctx, dir, st, opts, func(head UnpackResult) error { res = head; return nil },
		func(f UnpackedFile) error { res.Files = append(res.Files, f); return nil })
	return res, err
}

// ApplyAndPrint is Apply for `ferry mover unpack --apply`: it prints the result, a first line
// that sums it up, then a line per entry as it reads it back from the disk. The entries of a
// list LoadStaged checked are read from the list again: the mover holds neither the list nor
// the result, about 500 bytes a file, a claim of a million files more than its memory limit.
func ApplyAndPrint(ctx context.Context, dir string, st Staged, opts UnpackOptions, w io.Writer) error {
	out := bufio.NewWriterSize(w, 1<<16)
	enc := json.NewEncoder(out)
	err := applyStaged(ctx, dir, st, opts, func(head UnpackResult) error { return enc.Encode(head) },
		func(f UnpackedFile) error { return enc.Encode(f) })
	if err != nil {
		return err
	}
	return out.Flush()
}

// applyStaged is Apply, which gives head the result's summary, then file each entry's result.
func applyStaged(ctx context.Context, dir string, st Staged, opts UnpackOptions, head func(UnpackResult) error, file func(UnpackedFile) error) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	staging := ""
	if !st.RootModTime.IsZero() {
		if staging, err = stagingDir(st.ID); err != nil {
			return err
		}
		if fi, err := root.Lstat(staging); err != nil || !fi.IsDir() {
			return fmt.Errorf("nothing staged as %s: %w", st.ID, errors.Join(err, fs.ErrNotExist))
		}
		held, err := holdStaging(root, staging)
		if err != nil {
			return err
		}
		defer held.Close()
	}
	if err := removeAbandoned(root, staging); err != nil {
		return err
	}
	opts.Xattrs = opts.Xattrs || st.Xattrs
	u := newUnpacker(root, opts)
	defer u.close()
	err = st.each(dir, func(f StagedFile) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return u.apply(f, staging)
	})
	if err != nil {
		return err
	}
	for _, f := range st.Skipped {
		name, err := entryPath(f.Path)
		if err != nil {
			return err
		}
		u.keepWithParents(name)
	}
	if opts.Delete {
		if err := u.deleteOthers(); err != nil {
			return err
		}
	}
	u.keep = nil
	if err := u.finishDirs(); err != nil {
		return err
	}
	if st.Root != nil {
		// Read back, to be checked, where it was applied: else the notes say why not.
		if applied, err := u.applyRoot(*st.Root, staging != ""); err != nil {
			return fmt.Errorf("the volume's root: %w", err)
		} else if applied {
			if u.res.Root, err = u.readBackRoot(); err != nil {
				return fmt.Errorf("the volume's root: %w", err)
			}
		}
	}
	u.noteUnsetXattrs()
	if err := u.noteForeignOwners(dir, st); err != nil {
		return err
	}
	u.res.Count = len(u.actions)
	if err := head(u.res); err != nil {
		return err
	}
	i := 0
	err = st.each(dir, func(f StagedFile) error {
		out, err := u.readBack(f, u.actions[i])
		i++
		if err != nil {
			return err
		}
		return file(out)
	})
	if err != nil {
		return err
	}
	if staging != "" {
		u.close()
		if err := root.RemoveAll(staging); err != nil {
			return fmt.Errorf("remove %s: %w", staging, err)
		}
		switch {
		case st.Root != nil: // the archive's, as applied
			if err := root.Chtimes(".", time.Time{}, st.Root.ModTime); err != nil && !errors.Is(err, fs.ErrPermission) {
				return err
			}
		case !u.rootTouched:
			if err := root.Chtimes(".", time.Time{}, st.RootModTime); err != nil {
				return err
			}
		}
	}
	// The contents must be on disk before the restore is reported done.
	if err := syncDir(root); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

func (u *unpacker) keepWithParents(name string) {
	for i := 0; i < len(name); i++ {
		if name[i] == '/' {
			u.keep[name[:i]] = true
		}
	}
	u.keep[name] = true
}

// apply puts one staged entry in place.
func (u *unpacker) apply(f StagedFile, staging string) error {
	name, err := entryPath(f.Path)
	if err != nil {
		return err
	}
	if top, _, _ := strings.Cut(name, "/"); isStaging(top) {
		return badinput.Errorf("entry %q: the name is reserved for ferry's staging folder", f.Path)
	}
	h, err := f.header()
	if err != nil {
		return err
	}
	if err := u.parents(name); err != nil {
		return err
	}
	u.keep[name] = true
	var action string
	size := h.Size
	switch {
	case f.Type == "dir":
		action, err = u.directory(name, h)
	case f.Type == "symlink":
		action, err = u.link(name, h)
	case f.Type == "fifo":
		action, err = u.fifo(name, h)
	case f.Hardlink != "":
		size = 0
		var head string
		if head, err = entryPath(f.Hardlink); err == nil {
			action, err = u.hardlink(name, head)
		}
	default:
		action, err = u.place(name, h, staging, f.Staged)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if action == ActionWritten && !strings.Contains(name, "/") {
		u.rootTouched = true
	}
	u.actions = append(u.actions, byte(slices.Index(actions, action)))
	if h.Typeflag == tar.TypeDir {
		u.archiveDirs = append(u.archiveDirs, pendingDir{name: name, h: h, index: len(u.actions) - 1})
	} else {
		u.count(action, size)
	}
	return nil
}

// header is the entry's tar header, as far as Apply needs it.
func (f StagedFile) header() (*tar.Header, error) {
	mode, err := strconv.ParseInt(f.Mode, 0, 64)
	if err != nil {
		return nil, badinput.Errorf("entry %q: mode %q: %v", f.Path, f.Mode, err)
	}
	h := &tar.Header{Name: f.Path, Mode: mode, Uid: f.UID, Gid: f.GID, ModTime: f.ModTime, Linkname: f.Link, Size: f.Size}
	switch f.Type {
	case "dir":
		h.Typeflag = tar.TypeDir
	case "symlink":
		h.Typeflag = tar.TypeSymlink
	case "file":
		h.Typeflag = tar.TypeReg
	case "fifo":
		h.Typeflag = tar.TypeFifo
	default:
		return nil, badinput.Errorf("entry %q: type %q is not a file, directory, symlink or FIFO", f.Path, f.Type)
	}
	if err := withXattrs(h, f.Xattrs); err != nil {
		return nil, badinput.Errorf("entry %q: %v", f.Path, err)
	}
	return h, nil
}

// place renames a staged file over the target's, or, when the target's already has the entry's
// contents, sets its mode, owner and time where they differ.
func (u *unpacker) place(name string, h *tar.Header, staging, staged string) (string, error) {
	fi, err := u.lstat(name)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if staged == "" {
		if !exists || !fi.Mode().IsRegular() || fi.Size() != h.Size {
			return "", errors.New("changed on the target since the archive was staged")
		}
		if same, err := u.sameMeta(name, fi, h); err != nil || same {
			return ActionUnchanged, err
		}
		return ActionUpdated, u.setMeta(name, h)
	}
	if staging == "" || strings.ContainsAny(staged, "/\\") || staged == "." || staged == ".." {
		return "", badinput.Errorf("staged file %q", staged)
	}
	if exists && fi.IsDir() {
		if err := u.replace(name, fi); err != nil {
			return "", err
		}
	}
	if err := u.root.Rename(staging+"/"+staged, name); err != nil {
		return "", err
	}
	return ActionWritten, u.setMeta(name, h)
}
