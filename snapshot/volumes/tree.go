package volumes

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"strings"

	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"github.com/ferrykube/ferry/storage/repo"
	"github.com/klauspost/compress/zstd"
)

// A chunked volume (snapshot.FormatChunks) keeps Pack's tar stream cut at its entries: each
// entry's header blocks as they were written, and its data (a regular file's contents, or of a
// sparse file its data ranges) as chunks of the repository. The tree stream lists the entries in
// order, one JSON treeEntry a line, zstd-compressed (and encrypted when the backup is); the last
// line holds the archive's end marker. Writing each entry's header, then its data, then zeros to
// the next 512-byte block gives back the archive byte for byte, which restore stages and checks
// as it does a stored tar.

// treeEntry is one line of a volume's tree stream.
type treeEntry struct {
	// Head is the entry's header blocks (PAX records and, of a sparse file, its map), or of the
	// last line the archive's end marker.
	Head []byte `json:"head"`
	// Data are the chunks of what follows the header; DataBytes their size.
	Data      []repo.ChunkRef `json:"data,omitempty"`
	DataBytes int64           `json:"dataBytes,omitempty"`
	// Path, Stat, Size and SHA256 are a regular file's: its name, StatRecord, size and the
	// SHA-256 of its contents. The next backup takes an unchanged file's entry from here.
	Path   snapshot.Name `json:"path,omitempty"`
	Stat   string        `json:"stat,omitempty"`
	Size   int64         `json:"size,omitempty"`
	SHA256 string        `json:"sha256,omitempty"`
	// line is the entry's line in the stream it was read from, when it was read without its Head
	// (treeLines.noHeads): it is written as it is.
	line []byte
}

// TarFile is the stream of a claim's tar, before the encrypted suffix.
func TarFile(namespace, claim string) string {
	return snapshot.ClaimStream("volumes", namespace, claim, ".tar.zst")
}

// TreeFile is the stream of a claim's tree, before the encrypted suffix.
func TreeFile(namespace, claim string) string {
	return snapshot.ClaimStream("volumes", namespace, claim, ".tree.jsonl.zst")
}

// treeEnd is the line after the last of the previous stats Pack reads on stdin: the exec stream
// may never end stdin (see kube.NewStdin), so the list says where it ends.
const treeEnd = "end"

// PackTree is Pack for a chunked backup: it reads the previous backup's stats from in (JSON lines
// of prevStat in walk order, then a line "end"), and writes the tar stream to w with a StatRecord on
// each regular file and, of a file whose record is unchanged, an UnchangedRecord entry of no
// contents instead of its data. It reads the stats as it walks (see prevtree.go), then the rest
// up to the end line.
func PackTree(dir string, in io.Reader, w io.Writer) error {
	stats := newStatReader(in)
	p := &packer{stat: true, prev: stats.cursor.find}
	if err := p.pack(dir, w); err != nil {
		return err
	}
	return stats.drain()
}

// segmenter is the reader under the tar reader of chunkTar: it keeps what the tar reader reads
// as headers, and hands what it reads as an entry's data to the chunk writer.
type segmenter struct {
	r    io.Reader
	pos  int64
	meta []byte
	data bool
	raw  []byte
}

func (s *segmenter) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.pos += int64(n)
	if s.data {
		s.raw = append(s.raw, p[:n]...)
	} else {
		s.meta = append(s.meta, p[:n]...)
	}
	return n, err
}

// dataReader reads an entry's data as stored (of a sparse file only its data ranges), driving
// the tar reader, and hashes the contents the tar reader gives (holes as zeros).
type dataReader struct {
	tr    *archiveReader
	seg   *segmenter
	sum   hash.Hash
	buf   []byte
	n     int64
	off   int
	ended bool
}

func (d *dataReader) Read(p []byte) (int, error) {
	for d.off == len(d.seg.raw) {
		d.seg.raw, d.off = d.seg.raw[:0], 0
		if d.ended {
			return 0, io.EOF
		}
		n, err := d.tr.Read(d.buf)
		d.sum.Write(d.buf[:n])
		if err == io.EOF {
			d.ended = true
		} else if err != nil {
			return 0, err
		}
	}
	n := copy(p, d.seg.raw[d.off:])
	d.off += n
	d.n += int64(n)
	return n, nil
}

// errPreviousTree is the error of a backup that cannot continue from the claim's previous one
// (its tree does not read, or does not hold what the mover found unchanged): it is made again,
// reading every file.
var errPreviousTree = errors.New("continuing from the previous backup")

// prevFinder finds the previous backup's entry of a path; paths are asked in walk order.
type prevFinder func(name string) (treeEntry, bool, error)

// chunkTar reads a tar stream as PackTree writes it, writes each entry's data through cw, and
// hands each entry to emit in order, the end marker last, and to index, whose file list takes
// each file's SHA-256 from here. An UnchangedRecord entry becomes the previous backup's entry of
// its path (found by prev), which must have the same StatRecord, size and SHA-256.
func chunkTar(ctx context.Context, r io.Reader, cw *repo.Writer, prev prevFinder, emit func(treeEntry) error, index *fileIndex) error {
	seg := &segmenter{r: r}
	tr := newArchiveReader(seg)
	buf := make([]byte, 1<<20)
	for {
		start := seg.pos
		seg.meta = seg.meta[:0]
		h, err := tr.Next()
		// What the reader read first is the padding of the last entry's data.
		pad := int(-start & 511)
		if err == io.EOF {
			return emit(treeEntry{Head: append([]byte(nil), seg.meta[min(pad, len(seg.meta)):]...)})
		}
		if err != nil {
			return err
		}
		e := treeEntry{Head: append([]byte(nil), seg.meta[pad:]...)}
		if h.Typeflag == tar.TypeReg {
			// A SkippedRecord entry has a path and no stat: it hides an earlier entry of its name
			// from the next backup.
			e.Path, e.Stat = snapshot.Name(h.Name), h.PAXRecords[StatRecord]
			if h.PAXRecords[SkippedRecord] != "" {
				e.Stat = ""
			} else if v := h.PAXRecords[UnchangedRecord]; v != "" {
				size, sum, err := parseUnchanged(v)
				if err != nil {
					return fmt.Errorf("%s: %w", h.Name, err)
				}
				var p treeEntry
				ok := false
				if prev != nil {
					if p, ok, err = prev(h.Name); err != nil {
						return fmt.Errorf("%w: its tree: %w", errPreviousTree, err)
					}
				}
				if !ok || p.Stat != e.Stat || p.Size != size || p.SHA256 != sum {
					return fmt.Errorf("%w: %s: the mover found it unchanged, but the previous backup has no such entry", errPreviousTree, h.Name)
				}
				if !cw.Reuse(p.Data) {
					return fmt.Errorf("%w: %s: the previous backup's chunks of it are no longer in the repository", errPreviousTree, h.Name)
				}
				e = p
			} else {
				d := &dataReader{tr: tr, seg: seg, sum: sha256.New(), buf: buf}
				seg.data = true
				refs, err := cw.Write(ctx, d)
				seg.data, seg.raw = false, seg.raw[:0]
				if err != nil {
					return fmt.Errorf("%s: %w", h.Name, err)
				}
				e.Data, e.DataBytes, e.Size, e.SHA256 = refs, d.n, h.Size, hex.EncodeToString(d.sum.Sum(nil))
			}
		}
		err = index.add(h, func() (int64, string, error) { return e.Size, e.SHA256, nil })
		if err != nil {
			return err
		}
		if err := emit(e); err != nil {
			return err
		}
	}
}

// writeTree writes a tree stream's lines, zstd-compressed, to w.
type treeWriter struct {
	enc *zstd.Encoder
	buf *bufio.Writer
}

func newTreeWriter(w io.Writer) (*treeWriter, error) {
	// A small window: the encoder's history is several times it, for each claim stored at once,
	// and lines of a tree compress about as well with 1 MiB of it as with the default 8.
	enc, err := zstd.NewWriter(w, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<20))
	if err != nil {
		return nil, err
	}
	return &treeWriter{enc: enc, buf: bufio.NewWriterSize(enc, 64<<10)}, nil
}

func (t *treeWriter) add(e treeEntry) error {
	line := e.line
	if line == nil {
		var err error
		if line, err = json.Marshal(e); err != nil {
			return err
		}
	}
	if _, err := t.buf.Write(line); err != nil {
		return err
	}
	return t.buf.WriteByte('\n')
}

func (t *treeWriter) close() error {
	err := t.buf.Flush()
	if cerr := t.enc.Close(); err == nil {
		err = cerr
	}
	return err
}

// readTree calls fn for each line of a tree stream (decompressed), in order.
func readTree(r io.Reader, fn func(treeEntry) error) error {
	lines, err := newTreeLines(r)
	if err != nil {
		return err
	}
	defer lines.close()
	for {
		e, ok, err := lines.next()
		if err != nil || !ok {
			return err
		}
		if err := fn(e); err != nil {
			return err
		}
	}
}

// untree writes the archive a tree stream stands for to w: each entry's header, its data read
// back from the repository (every chunk checked before its bytes are written) and its padding.
// verify runs after the last entry is read and before the end marker is written. On an error of
// the tree or of a chunk, untree ends what it wrote with a block no tar reader takes for a
// header (see poison) and returns the error: the mover staging it fails and removes what it
// staged, as it does for a corrupt stored archive, even where the exec's stdin never ends.
// With a base (the tree a restore before left on the target; nil for none), a regular file
// whose entry is the base's, header and chunks alike, is sent as a TypeKept entry instead (see
// keptEntry): a restore that follows another sends only what changed since. untree returns the
// bytes of file contents it sent.
func untree(ctx context.Context, tree io.Reader, rp *repo.Repo, w io.Writer, verify func() error, base *prevIter) (int64, error) {
	chunks := rp.NewReader() // one for the whole archive: small files share packs
	defer chunks.Close()
	bw := bufio.NewWriterSize(w, 1<<20)
	cw := &archiveCounter{w: bw}
	var find prevFinder
	if base != nil {
		find = base.finder()
	}
	var last *treeEntry
	var sent int64
	var entryEnd int64 // where the entry being written ends in the archive
	err := readTree(tree, func(e treeEntry) error {
		if last != nil {
			if head, ok := keptEntry(*last, find); ok {
				// The target holds it: its header alone, as the mover checks it there.
				entryEnd = cw.n + int64(len(head))
				if _, err := cw.Write(head); err != nil {
					return err
				}
			} else {
				entryEnd = cw.n + int64(len(last.Head)) + last.DataBytes + (-last.DataBytes & 511)
				if err := writeEntry(ctx, cw, chunks, *last); err != nil {
					return err
				}
				sent += last.DataBytes
			}
		}
		last = &e
		return nil
	})
	if err == nil {
		err = verify()
	}
	if err == nil && (last == nil || len(last.Data) > 0) {
		err = fmt.Errorf("the tree stream has no end marker: %w", snapshot.ErrCorrupt)
	}
	if err != nil {
		if cw.err == nil {
			poison(cw, entryEnd)
			bw.Flush()
		}
		return sent, err
	}
	if _, err := cw.Write(last.Head); err != nil {
		return sent, err
	}
	return sent, bw.Flush()
}

// TypeKept is the type of an archive entry a restore sends for a regular file that the target's
// claim holds as the backup has it, a restore before having left it so: the file's header, of
// no contents, with an UnchangedRecord of its size and SHA-256. The mover reads the target's file
// and checks both before anything is applied (a file that differs fails the stage, and ferry
// sends the claim in full); a mover older than the type refuses it rather than write an empty
// file.
const TypeKept = 'U'

// keptEntry is the TypeKept header of e when find (the base tree; nil for none) has an entry of
// e's path with e's header and chunks: the base restored the file as e has it. ok is false for
// any other entry, and for one kept headers cannot stand for: a sparse file, a file without a
// digest (skipped).
func keptEntry(e treeEntry, find prevFinder) (head []byte, ok bool) {
	if find == nil || e.Path == "" || e.SHA256 == "" {
		return nil, false
	}
	b, found, err := find(string(e.Path))
	if err != nil || !found || !bytes.Equal(b.Head, e.Head) || b.DataBytes != e.DataBytes || !slices.Equal(b.Data, e.Data) {
		return nil, false // a base that cannot be read only costs sending the file
	}
	h, err := tar.NewReader(bytes.NewReader(e.Head)).Next()
	if err != nil || h.Typeflag != tar.TypeReg || h.Size != e.Size || h.Size != e.DataBytes {
		return nil, false
	}
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return nil, false
		}
	}
	h.Typeflag, h.Size, h.Format = TypeKept, 0, tar.FormatPAX
	if h.PAXRecords == nil {
		h.PAXRecords = map[string]string{}
	}
	h.PAXRecords[UnchangedRecord] = unchangedValue(prevStat{Size: e.Size, SHA256: e.SHA256})
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	if tw.WriteHeader(h) != nil || tw.Flush() != nil {
		return nil, false
	}
	return out.Bytes(), true
}

// poison fills the entry being written up to end, then writes a block of 0xff, which is no tar
// header (its checksum field is not a number): a reader of the archive fails there, never
// taking what came before for a whole archive.
func poison(w io.Writer, end int64) {
	cw := w.(*archiveCounter)
	fill := bytes.Repeat([]byte{0xff}, 512)
	for cw.n < end {
		cw.Write(fill[:min(int64(len(fill)), end-cw.n)])
	}
	cw.Write(fill)
}

type archiveCounter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *archiveCounter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if err != nil {
		c.err = err
	}
	return n, err
}

var zeros [512]byte

func writeEntry(ctx context.Context, w io.Writer, chunks *repo.Reader, e treeEntry) error {
	if _, err := w.Write(e.Head); err != nil {
		return err
	}
	var n int64
	for _, c := range e.Data {
		n += int64(c.Size)
	}
	if n != e.DataBytes {
		return fmt.Errorf("tree entry %s: chunks of %d bytes, %d recorded: %w", e.Path, n, e.DataBytes, snapshot.ErrCorrupt)
	}
	if err := chunks.Read(ctx, e.Data, w); err != nil {
		// A chunk that fails its check, or that the index or storage lacks: the backup is damaged.
		if errors.Is(err, repo.ErrCorrupt) || errors.Is(err, repo.ErrUnknownChunk) || errors.Is(err, storage.ErrNotExist) {
			return fmt.Errorf("%s: %w: %w", e.Path, snapshot.ErrCorrupt, err)
		}
		return fmt.Errorf("%s: %w", e.Path, err)
	}
	_, err := w.Write(zeros[:-n&511])
	return err
}
