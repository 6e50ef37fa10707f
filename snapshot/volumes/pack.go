package volumes

import (
	"archive/tar"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/ferrykube/ferry/snapshot"
	"golang.org/x/sys/unix"
)

// StagingPrefix names the hidden folders at a volume's root where a restore stages what it
// writes (see Stage): never packed, listed or deleted as the volume's data, and removed by the
// next restore when a killed one left one behind.
const StagingPrefix = ".ferry-staging-"

// isStaging reports whether a path relative to the volume's root is a staging folder.
func isStaging(rel string) bool {
	return !strings.Contains(rel, "/") && strings.HasPrefix(rel, StagingPrefix)
}

// SkippedRecord is the PAX record of an entry Pack could not read steadily: a regular file of no
// contents whose value is the reason. It overrides an earlier entry of the same name, as a later
// entry always does in tar; standard tools extract it as an empty file.
const SkippedRecord = "FERRY.skipped"

// StatRecord is the PAX record of a regular file's identity as a chunked backup compares it with
// the previous backup's: "inode size mtime ctime x" (nanoseconds since the epoch; x: the entry
// holds the file's extended attributes, which an entry before them lacks, so such a file is read
// again once). A file whose record is unchanged is taken for unchanged, as restic and Kopia do:
// setting an extended attribute changes the ctime.
const StatRecord = "FERRY.stat"

// UnchangedRecord is the PAX record of an entry of no contents that stands for a file whose
// StatRecord is the previous backup's: its data is the previous backup's entry, and the record's
// value that entry's size and SHA-256 ("size sha256").
const UnchangedRecord = "FERRY.unchanged"

func statKey(st *syscall.Stat_t) string {
	return fmt.Sprintf("%d %d %d %d x", st.Ino, st.Size, st.Mtim.Nano(), st.Ctim.Nano())
}

// SkippedFile is a file Pack left out, and why.
type SkippedFile struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Listing is what an archive holds: its entries, and the files Pack left out; its root folder
// apart (Root; an emit of IndexEach and WriteList's files give it first, as RootPath).
type Listing struct {
	Files   []snapshot.File `json:"files"`
	Skipped []SkippedFile   `json:"skipped,omitempty"`
	Root    *snapshot.File  `json:"root,omitempty"`
}

// RootPath is the archive's entry of the volume's root folder: its mode, owner, time and
// extended attributes, packed first. A reader before it refuses the name (entryPath).
const RootPath = "./"

// Pack writes a tar stream of dir's tree to w: the root folder first (RootPath), then regular
// files, directories (empty ones too), symlinks and FIFOs, with modes, owners and modification
// times (a symlink's own), the extended attributes of files and folders that move (movedXattr),
// names byte for byte (hdrcharset=BINARY where they are not UTF-8). A file of several names is packed once,
// under the first, and its other names as hard links to it. It runs inside the mover pod, as
// `ferry mover pack`, in the claim's mount. The stream ends with tar's end-of-archive marker, so
// readers know where it ends without waiting for EOF.
//
// A file with holes is stored by its data, in the GNU PAX sparse format 1.0 (see writeSparse),
// which GNU tar, bsdtar and Go's archive/tar read back whole. A file that changes (size or
// modification time) or vanishes while it is read is read once more; if it changes again, a
// SkippedRecord entry takes its place and the rest of the tree is packed. The tree is walked
// through the claim's root, each path from its directory, so a tree deeper than PATH_MAX packs;
// a folder replaced once listed (a symlink out of the claim in its place) is packed empty, or,
// once the walk is in it, as it was listed.
func Pack(dir string, w io.Writer) error {
	return (&packer{}).pack(dir, w)
}

func (p *packer) pack(dir string, w io.Writer) error {
	p.w, p.tw, p.buf, p.links = w, tar.NewWriter(w), make([]byte, 1<<20), map[inode]string{}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	p.root = root
	defer p.closeRoot()
	if err := p.rootEntry(); err != nil {
		return err
	}
	err = walkRoot(root, func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			if rel != "." && (errors.Is(err, fs.ErrNotExist) || !p.isDir(rel)) {
				// A directory that vanished, or became something else (a symlink out of the
				// claim, which the root does not follow), once listed: nothing of it is left to
				// pack.
				return nil
			}
			return err
		}
		if rel == "." {
			return nil
		}
		if isStaging(rel) {
			return fs.SkipDir // a restore's, not the volume's
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return p.skip(rel, "it vanished while the volume was packed")
		}
		if err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			return p.regular(rel, info)
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = root.Readlink(rel); errors.Is(err, fs.ErrNotExist) {
				return p.skip(rel, "it vanished while the volume was packed")
			} else if err != nil {
				return err
			}
		} else if !info.IsDir() && info.Mode()&fs.ModeNamedPipe == 0 {
			// Sockets belong to a running process, devices to the node: neither is data. A FIFO
			// is a name programs agree on, and is kept.
			return nil
		}
		h, err := header(info, link, rel)
		if err != nil {
			return err
		}
		if info.IsDir() {
			if err := p.dirXattrs(rel, h); err != nil {
				return err
			}
		}
		if err := p.tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return p.tw.Close()
}

type packer struct {
	// root is the volume's; parent the directory of the last file opened, named parentName.
	root       *os.Root
	parent     *os.File
	parentName string
	w          io.Writer // under tw, for the raw blocks of sparse entries
	tw         *tar.Writer
	buf        []byte
	// links names the first entry packed of each file that has more than one name: its other
	// names are packed as hard links to it.
	links map[inode]string
	// afterRead, when set, runs once a file's contents are read: tests change files there.
	afterRead func(rel string)
	// stat, when set, adds a StatRecord to every regular file's entry (a chunked backup keeps it
	// for the next one); prev are the previous backup's by path: a file whose StatRecord is the
	// same is not read, and its entry is an UnchangedRecord.
	stat bool
	prev func(rel string) (prevStat, bool, error)
}

// inode identifies a file on the volume.
type inode struct{ dev, ino uint64 }

func header(info fs.FileInfo, link, rel string) (*tar.Header, error) {
	h, err := tar.FileInfoHeader(info, link)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", rel, err)
	}
	h.Name = rel
	if info.IsDir() {
		h.Name += "/"
	}
	h.Format = tar.FormatPAX // long names, large sizes, sub-second times
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		h.Uid, h.Gid = int(st.Uid), int(st.Gid)
	}
	h.Uname, h.Gname = "", ""
	// Left out: reading a file or folder changes its access time (a backup's own walk does), and
	// neither time is restored (Unpack sets the modification time). With them an unchanged volume's
	// tree differed from one backup to the next, and a warm round restored it again in full.
	h.AccessTime, h.ChangeTime = time.Time{}, time.Time{}
	if !utf8.ValidString(h.Name) || !utf8.ValidString(h.Linkname) {
		// PAX names are UTF-8 unless the entry says otherwise; these are bytes, kept as they are.
		h.PAXRecords = map[string]string{"hdrcharset": "BINARY"}
	}
	return h, nil
}

// rootEntry packs the volume's root folder (RootPath).
func (p *packer) rootEntry() error {
	d, err := p.root.Open(".")
	if err != nil {
		return err
	}
	defer d.Close()
	info, err := d.Stat()
	if err != nil {
		return err
	}
	h, err := header(info, "", ".")
	if err != nil {
		return err
	}
	if err := readXattrs(int(d.Fd()), h); err != nil {
		return fmt.Errorf("the volume's root: %w", err)
	}
	return p.tw.WriteHeader(h)
}

// dirXattrs adds to h the extended attributes of the directory rel that move; one that is no
// longer a directory has none (the walk finds what it became).
func (p *packer) dirXattrs(rel string, h *tar.Header) error {
	d, err := p.open(rel)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ELOOP) || errors.Is(err, errFolderReplaced) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	defer d.Close()
	if err := readXattrs(int(d.Fd()), h); err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	return nil
}

// closeRoot closes the volume's root and the directory last opened in it.
func (p *packer) closeRoot() {
	p.closeParent()
	p.root.Close()
	p.root = nil
}

// closeParent closes the directory last opened, if any.
func (p *packer) closeParent() {
	if p.parent != nil {
		p.parent.Close()
		p.parent, p.parentName = nil, ""
	}
}

// isDir says whether rel is a directory now (not a symlink to one).
func (p *packer) isDir(rel string) bool {
	info, err := p.root.Lstat(rel)
	return err == nil && info.IsDir()
}

// errFolderReplaced is open's error for a file whose directory is no longer one.
var errFolderReplaced = errors.New("its folder was replaced while the volume was packed")

// open opens the file rel for reading, refusing a symlink in its last component (ELOOP), as
// O_NOFOLLOW does, which os.Root.OpenFile does not: it is opened in its directory (kept open for
// its siblings, which the walk meets next), which is opened through the root. O_NONBLOCK: what
// was a file when listed may since be a FIFO, whose open would wait for a writer.
func (p *packer) open(rel string) (*os.File, error) {
	base, err := p.openParent(rel)
	if err != nil {
		return nil, err
	}
	for {
		fd, err := unix.Openat(int(p.parent.Fd()), base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		switch {
		case err == unix.EINTR: // a network filesystem's claim
			continue
		case err != nil:
			return nil, &fs.PathError{Op: "open", Path: rel, Err: err}
		}
		return os.NewFile(uintptr(fd), rel), nil
	}
}

// openParent makes p.parent the directory of rel, opened through the root, and returns rel's
// base name.
func (p *packer) openParent(rel string) (string, error) {
	dir, base := path.Split(rel)
	dir = cmp.Or(strings.TrimSuffix(dir, "/"), ".")
	if p.parent == nil || p.parentName != dir {
		p.closeParent()
		f, err := p.root.Open(dir)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) && !p.isDir(dir) {
				return "", errFolderReplaced
			}
			return "", err
		}
		p.parent, p.parentName = f, dir
	}
	return base, nil
}

// unchangedXattrs adds to h the extended attributes of rel, a file not opened, that move: by
// its name in its directory's descriptor (/proc/self/fd), which costs no open; where that does
// not serve, the file is opened (done false when it is no longer there as a file).
func (p *packer) unchangedXattrs(rel string, h *tar.Header) (done bool, err error) {
	base, err := p.openParent(rel)
	if err == nil {
		viaDir := fmt.Sprintf("/proc/self/fd/%d/%s", p.parent.Fd(), base)
		if err := pathXattrs(viaDir).read(h); err == nil {
			return true, nil
		}
	}
	f, err := p.open(rel)
	if err != nil {
		return false, nil // file() says what became of it
	}
	defer f.Close()
	return true, readXattrs(int(f.Fd()), h)
}

// regular packs a file, reading it a second time if it changed while read the first.
func (p *packer) regular(rel string, info fs.FileInfo) error {
	if done, err := p.unchanged(rel, info); done || err != nil {
		return err
	}
	var reason string
	for range 2 {
		var err error
		if reason, err = p.file(rel); err != nil || reason == "" {
			return err
		}
	}
	return p.skip(rel, reason)
}

// unchanged writes the UnchangedRecord entry of a file of one name whose StatRecord, by the
// walk's lstat, is the previous backup's, and reports whether it did: such a file is not opened
// (an open's fstat would say the same of it; opening costs more than the rest of an unchanged
// file's entry). A file of several names is left to file, which tracks its names.
func (p *packer) unchanged(rel string, info fs.FileInfo) (bool, error) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !p.stat || p.prev == nil || !ok || st.Nlink != 1 {
		return false, nil
	}
	key := statKey(st)
	prev, found, err := p.prev(rel)
	if err != nil || !found || prev.Stat != key {
		return false, err
	}
	h, err := header(info, "", rel)
	if err != nil {
		return false, err
	}
	if done, err := p.unchangedXattrs(rel, h); !done || errors.Is(err, errXattrsTooLarge) {
		return false, nil // file() says what became of it
	} else if err != nil {
		return false, err
	}
	if h.PAXRecords == nil {
		h.PAXRecords = map[string]string{}
	}
	h.PAXRecords[StatRecord] = key
	return true, p.writeUnchanged(h, prev, rel)
}

// writeUnchanged writes h, a file's header with its StatRecord, as the UnchangedRecord entry of
// the previous backup's prev: no contents follow.
func (p *packer) writeUnchanged(h *tar.Header, prev prevStat, rel string) error {
	h.PAXRecords[UnchangedRecord] = unchangedValue(prev)
	h.Size = 0
	if err := p.tw.WriteHeader(h); err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	return nil
}

// skip writes the SkippedRecord entry of a file left out.
func (p *packer) skip(rel, reason string) error {
	h := &tar.Header{Name: rel, Typeflag: tar.TypeReg, Mode: 0o600, Format: tar.FormatPAX,
		PAXRecords: map[string]string{SkippedRecord: reason}}
	if err := p.tw.WriteHeader(h); err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	return nil
}

// file writes one entry of a regular file as it is when opened. It returns why the file could
// not be read steadily, having written an entry of the declared size all the same (zeros for
// what could not be read), or "" when the entry holds the file's contents.
func (p *packer) file(rel string) (string, error) {
	// O_NOFOLLOW: what was a file when listed may since be a symlink.
	f, err := p.open(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "it vanished while the volume was packed", nil
	case errors.Is(err, syscall.ELOOP):
		return "it was replaced by a symlink while the volume was packed", nil
	case errors.Is(err, errFolderReplaced):
		return err.Error(), nil
	case err != nil:
		return "", fmt.Errorf("%s: %w", rel, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("%s: %w", rel, err)
	}
	if !info.Mode().IsRegular() {
		return "it was replaced by another type while the volume was packed", nil
	}
	h, err := header(info, "", rel)
	if err != nil {
		return "", err
	}
	var id inode
	if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
		id = inode{uint64(st.Dev), st.Ino}
		if first, ok := p.links[id]; !ok {
			if h.PAXRecords == nil {
				h.PAXRecords = map[string]string{}
			}
			h.PAXRecords[LinksRecord] = "1"
		} else {
			h.Typeflag, h.Linkname, h.Size = tar.TypeLink, first, 0
			if !utf8.ValidString(first) {
				h.PAXRecords = map[string]string{"hdrcharset": "BINARY"}
			}
			if err := p.tw.WriteHeader(h); err != nil {
				return "", fmt.Errorf("%s: %w", rel, err)
			}
			return "", nil
		}
	}
	if err := readXattrs(int(f.Fd()), h); errors.Is(err, errXattrsTooLarge) {
		return err.Error(), nil
	} else if err != nil {
		return "", fmt.Errorf("%s: %w", rel, err)
	}
	if p.stat {
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			key := statKey(st)
			if h.PAXRecords == nil {
				h.PAXRecords = map[string]string{}
			}
			h.PAXRecords[StatRecord] = key
			var prev prevStat
			found := false
			if p.prev != nil {
				if prev, found, err = p.prev(rel); err != nil {
					return "", err
				}
			}
			if found && prev.Stat == key {
				if err := p.writeUnchanged(h, prev, rel); err != nil {
					return "", err
				}
				if id != (inode{}) {
					p.links[id] = rel
				}
				return "", nil
			}
		}
	}
	data, err := dataRanges(f, h.Size)
	if err != nil {
		return "", fmt.Errorf("%s: find its data: %w", rel, err)
	}
	short := false
	if sparse(data, h.Size) {
		short, err = p.writeSparse(h, f, data)
	} else {
		if err = p.tw.WriteHeader(h); err == nil {
			short, err = p.copy(p.tw, f, 0, h.Size)
		}
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w", rel, err)
	}
	if p.afterRead != nil {
		p.afterRead(rel)
	}
	after, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("%s: %w", rel, err)
	}
	if st, ok := after.Sys().(*syscall.Stat_t); ok && st.Nlink == 0 {
		return "it vanished while the volume was packed", nil
	}
	if short || after.Size() != info.Size() || !after.ModTime().Equal(info.ModTime()) {
		return "it changed while it was read, twice", nil
	}
	if id != (inode{}) {
		p.links[id] = rel
	}
	return "", nil
}

// copy writes size bytes of f from off to w; it reports a file that ended sooner, and then
// writes zeros for the rest, so that the archive stays whole.
func (p *packer) copy(w io.Writer, f *os.File, off, size int64) (bool, error) {
	n, err := io.CopyBuffer(w, io.NewSectionReader(f, off, size), p.buf)
	if err != nil {
		return false, err
	}
	if n == size {
		return false, nil
	}
	clear(p.buf)
	for rest := size - n; rest > 0; {
		k := min(rest, int64(len(p.buf)))
		if _, err := w.Write(p.buf[:k]); err != nil {
			return true, err
		}
		rest -= k
	}
	return true, nil
}

// span is a range of a file that holds data.
type span struct{ off, len int64 }

// dataRanges lists the ranges of f that hold data, by SEEK_DATA and SEEK_HOLE; a filesystem
// that does not tell has all of the file as data.
func dataRanges(f *os.File, size int64) ([]span, error) {
	var out []span
	fd := int(f.Fd())
	for off := int64(0); off < size; {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
			return []span{{0, size}}, nil
		}
		if err != nil {
			return nil, err
		}
		if start >= size {
			break
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			return nil, err
		}
		end = min(end, size)
		out = append(out, span{start, end - start})
		off = end
	}
	return out, nil
}

// sparse reports whether ranges leave holes in a file of size bytes.
func sparse(data []span, size int64) bool {
	var n int64
	for _, s := range data {
		n += s.len
	}
	return n < size
}

// Index reads a tar stream as Pack writes it and lists its entries with their SHA-256, and the
// files Pack left out (see IndexEach).
func Index(r io.Reader) (Listing, error) {
	return collectListing(func(emit func(snapshot.File) error) ([]SkippedFile, error) { return IndexEach(r, emit) })
}

// collectListing gathers what an each-function emits into a Listing.
func collectListing(each func(emit func(snapshot.File) error) ([]SkippedFile, error)) (Listing, error) {
	var l Listing
	skipped, err := each(func(f snapshot.File) error {
		l.Files = append(l.Files, f)
		return nil
	})
	l.Skipped = skipped
	l.takeRoot()
	return l, err
}

// takeRoot moves the root folder's entry, first when there is one, from Files to Root.
func (l *Listing) takeRoot() {
	if len(l.Files) > 0 && l.Files[0].Path == RootPath {
		l.Root, l.Files = &l.Files[0], l.Files[1:]
	}
}

// LinksRecord is the PAX record of a regular file Pack packed under the first of its several
// names: the reader remembers its size and SHA-256 for the hard links to it that follow, and only
// those, so that listing a volume holds no list of its files.
const LinksRecord = "FERRY.links"

// IndexEach reads a tar stream as Pack writes it and hands each entry, with its SHA-256, to emit
// once the stream is past it, in the stream's order; it returns the files Pack left out (see
// fileIndex). A stream that ends without tar's end marker is an error matching
// io.ErrUnexpectedEOF.
func IndexEach(r io.Reader, emit func(snapshot.File) error) ([]SkippedFile, error) {
	tr := newArchiveReader(r)
	buf := make([]byte, 64<<10) // not io.Copy's 32 KiB a file
	index := newFileIndex(emit)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return index.end()
		}
		if err != nil {
			return index.skipped, err
		}
		err = index.add(h, func() (int64, string, error) {
			sum := sha256.New()
			_, err := io.CopyBuffer(sum, tr, buf)
			return h.Size, hex.EncodeToString(sum.Sum(nil)), err
		})
		if err != nil {
			return index.skipped, err
		}
	}
}

// fileIndex makes a volume's file list of the headers of a tar stream as Pack writes it. Of
// entries of the same name, which Pack writes one after the other (a file read again, or left
// out), the last counts, so each file is handed on once the stream is past it, holding none but
// the last. Of PackTree's stream, an UnchangedRecord entry's size and SHA-256 are its record's.
type fileIndex struct {
	emit    func(snapshot.File) error
	skipped []SkippedFile
	pending *snapshot.File          // the last entry, held until one of another name follows
	linked  map[string]fileContents // the first names of files of several names
}

type fileContents struct {
	size int64
	sum  string
}

// headerFile is the listing's entry of h as far as its header says: its name, mode, owner, time
// and extended attributes (not its type and contents).
func headerFile(h *tar.Header) snapshot.File {
	return snapshot.File{Path: h.Name, Mode: fmt.Sprintf("%#o", h.Mode), UID: h.Uid, GID: h.Gid, ModTime: h.ModTime.UTC(), Xattrs: xattrsOf(h)}
}

func newFileIndex(emit func(snapshot.File) error) *fileIndex {
	return &fileIndex{emit: emit, linked: map[string]fileContents{}}
}

// add takes the next entry's header; contents reads a regular file's contents, when the entry
// has them, and returns their size and SHA-256.
func (x *fileIndex) add(h *tar.Header, contents func() (int64, string, error)) error {
	f := headerFile(h)
	switch {
	case h.PAXRecords[SkippedRecord] != "":
		x.skipped = append(x.skipped, SkippedFile{Path: h.Name, Reason: h.PAXRecords[SkippedRecord]})
		if x.pending != nil && x.pending.Path == h.Name {
			x.pending = nil // removed
		}
		delete(x.linked, h.Name)
		return nil
	case h.Typeflag == tar.TypeDir:
		f.Type = "dir"
	case h.Typeflag == tar.TypeSymlink:
		f.Type, f.Link = "symlink", h.Linkname
	case h.Typeflag == tar.TypeFifo:
		f.Type = "fifo"
	case h.Typeflag == tar.TypeLink:
		// Another name of an earlier file: its contents are the earlier entry's.
		first, ok := x.linked[h.Linkname]
		if !ok {
			return fmt.Errorf("%s: a hard link to %s, which the archive does not mark as a file of several names (%s): is the mover's image older than ferry?", h.Name, h.Linkname, LinksRecord)
		}
		f.Type, f.Hardlink, f.Size, f.SHA256 = "file", h.Linkname, first.size, first.sum
	case h.Typeflag == tar.TypeReg:
		var err error
		if v := h.PAXRecords[UnchangedRecord]; v != "" {
			f.Size, f.SHA256, err = parseUnchanged(v)
		} else {
			f.Size, f.SHA256, err = contents()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
		f.Type = "file"
		if h.PAXRecords[LinksRecord] != "" {
			x.linked[h.Name] = fileContents{f.Size, f.SHA256}
		} else {
			delete(x.linked, h.Name)
		}
	default:
		return nil
	}
	if x.pending != nil && x.pending.Path == h.Name {
		*x.pending = f
		return nil
	}
	if err := x.flush(); err != nil {
		return err
	}
	x.pending = &f
	return nil
}

func (x *fileIndex) flush() error {
	if x.pending == nil {
		return nil
	}
	f := *x.pending
	x.pending = nil
	return x.emit(f)
}

// end hands on the last entry, once the stream ended, and returns the files Pack left out.
func (x *fileIndex) end() ([]SkippedFile, error) {
	return x.skipped, x.flush()
}
