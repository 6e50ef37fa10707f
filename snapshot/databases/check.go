package databases

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/ferrykube/ferry/snapshot"
	"github.com/klauspost/compress/zstd"
)

// pinChunk is the size of the pieces of a dump's SQL whose SHA-256 the check records, so that the
// load passes on nothing the check did not see: each piece read again is held back until its
// digest matches.
const pinChunk = 1 << 20

// checkedDump is what reading a dump to its end found: it matches the manifest and is complete
// SQL.
type checkedDump struct {
	chunks     [][sha256.Size]byte
	largest    statement
	statements int64
	needs      dumpNeeds
}

// checkDump reads a database's dump from the backup to its end, without running any of it:
// the stored file's size and SHA-256, the zstd frames, the SQL's size and SHA-256 against the
// manifest, and the SQL's form (it ends between statements). It records the digest of each
// pinChunk of SQL for pinned, and the largest statement.
func checkDump(ctx context.Context, r *snapshot.Reader, d snapshot.Database) (*checkedDump, error) {
	rc, err := r.Open(ctx, d.Key)
	if err != nil {
		return nil, err
	}
	dec, err := zstd.NewReader(rc, zstd.WithDecoderConcurrency(1))
	if err != nil {
		rc.Close()
		return nil, fmt.Errorf("%s: %w", d.Key, err)
	}
	sql := newSQLStream(dec, d, func() {})
	scan := newSQLScanner(d.Engine)
	scan.needs = &dumpNeeds{}
	pins := &chunkDigests{h: sha256.New()}
	_, err = io.CopyBuffer(io.MultiWriter(scan, pins), sql, make([]byte, 256<<10))
	dec.Close()
	if err != nil {
		// Tell a damaged stored file (the usual cause of a bad zstd frame) from a failed read.
		if derr := snapshot.Drain(rc); errors.Is(derr, snapshot.ErrCorrupt) && !errors.Is(err, snapshot.ErrCorrupt) {
			err = fmt.Errorf("database %s: %w", d.Name, derr)
		}
		return nil, err
	}
	if err := rc.Close(); err != nil {
		return nil, fmt.Errorf("database %s: %w", d.Name, err)
	}
	if problem := scan.complete(); problem != "" {
		return nil, fmt.Errorf("database %s: the dump is not complete SQL: %s (line %d): %w", d.Name, problem, scan.line, snapshot.ErrCorrupt)
	}
	pins.finish()
	return &checkedDump{chunks: pins.sums, largest: scan.Largest, statements: scan.Statements, needs: *scan.needs}, nil
}

// chunkDigests records the SHA-256 of each pinChunk of what is written to it.
type chunkDigests struct {
	h    hash.Hash
	n    int
	sums [][sha256.Size]byte
}

func (c *chunkDigests) Write(p []byte) (int, error) {
	written := len(p)
	for len(p) > 0 {
		k := min(len(p), pinChunk-c.n)
		c.h.Write(p[:k])
		c.n += k
		p = p[k:]
		if c.n == pinChunk {
			c.finish()
		}
	}
	return written, nil
}

func (c *chunkDigests) finish() {
	if c.n == 0 {
		return
	}
	var sum [sha256.Size]byte
	c.h.Sum(sum[:0])
	c.sums = append(c.sums, sum)
	c.h.Reset()
	c.n = 0
}

// pinned passes on a dump read again only as the check saw it: each pinChunk is read whole and
// its digest compared before any of it is passed on, so a stored file changed between the check
// and the load stops the load before a changed byte reaches the client.
type pinned struct {
	src  io.Reader
	name string // the database's
	want [][sha256.Size]byte
	i    int
	buf  []byte
	off  int
	err  error // after buf is passed on
}

func newPinned(src io.Reader, name string, want [][sha256.Size]byte) *pinned {
	return &pinned{src: src, name: name, want: want}
}

func (p *pinned) Read(b []byte) (int, error) {
	if p.off == len(p.buf) {
		if p.err != nil {
			return 0, p.err
		}
		if p.buf == nil {
			p.buf = make([]byte, pinChunk)
		}
		n, err := io.ReadFull(p.src, p.buf[:pinChunk])
		p.buf, p.off = p.buf[:n], 0
		switch {
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			p.err = io.EOF
		case err != nil:
			p.buf, p.err = p.buf[:0], fmt.Errorf("database %s: read the dump again: %w", p.name, err)
			return 0, p.err
		}
		if n > 0 {
			if p.i >= len(p.want) || sha256.Sum256(p.buf) != p.want[p.i] {
				p.buf, p.err = p.buf[:0], p.changed()
				return 0, p.err
			}
			p.i++
		}
		if p.err != nil && p.i != len(p.want) { // shorter than the one checked
			p.buf, p.err = p.buf[:0], p.changed()
			return 0, p.err
		}
		if n == 0 {
			return 0, p.err
		}
	}
	n := copy(b, p.buf[p.off:])
	p.off += n
	return n, nil
}

func (p *pinned) changed() error {
	return fmt.Errorf("database %s: the dump read again differs from the one checked, at its MiB %d: %w", p.name, p.i, snapshot.ErrCorrupt)
}
