package repo

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path"
	"slices"
	"strings"

	"github.com/ferrykube/ferry/storage"
)

// Read writes the chunks' bytes to w, in order. Each chunk is read, decrypted, decompressed and its
// ID recomputed before any of its bytes reach w: a tampered or misplaced chunk is refused with an
// error naming it and its pack, and w has then received only the verified chunks before it. A
// caller that must check a whole file before applying any of it calls Verify first, or writes to
// a staging file it renames only when Read returns nil. A caller that reads many files one after
// another uses a Reader, which keeps the packs open between them.
func (r *Repo) Read(ctx context.Context, refs []ChunkRef, w io.Writer) error {
	rd := r.NewReader()
	defer rd.Close()
	return rd.Read(ctx, refs, w)
}

// maxOpenPacks bounds the packs a Reader keeps open: the packs of new chunks and those of the
// unchanged files an incremental backup reuses alternate in a volume's walk order. Each may hold
// some of its object in memory (storage.S3 fetches ranges ahead).
const maxOpenPacks = 4

// Reader reads chunks as Repo.Read does, over many calls: the packs it opened stay open until it
// has read their last chunk (up to maxOpenPacks, the least recently used closed first), so that the
// small files whose chunks share a pack are read with one request, front to back, not one request
// and the pack's head per file.
// A Reader is not safe for concurrent use; Close releases its packs.
type Reader struct {
	r    *Repo
	open []*packReader // least recently used first
}

// NewReader returns a Reader of the repository's chunks.
func (r *Repo) NewReader() *Reader { return &Reader{r: r} }

// Read writes the chunks' bytes to w, in order, each checked first (see Repo.Read).
func (rd *Reader) Read(ctx context.Context, refs []ChunkRef, w io.Writer) error {
	r := rd.r
	if r.opts.WriteOnly {
		return fmt.Errorf("read: %w", ErrWriteOnly)
	}
	if r.cfg.Encrypted && len(r.opts.Identities) == 0 {
		return fmt.Errorf("read: %w", ErrNoIdentity)
	}
	for _, ref := range refs {
		if err := ctx.Err(); err != nil {
			return err
		}
		e, ok := r.lookup(ref.ID)
		if !ok {
			return fmt.Errorf("chunk %s: %w", ref.ID, ErrUnknownChunk)
		}
		if e.size != ref.Size {
			return fmt.Errorf("chunk %s: the index has %d bytes, the ref %d: %w", ref.ID, e.size, ref.Size, ErrCorrupt)
		}
		pr, err := rd.pack(ctx, e)
		if err != nil {
			return err
		}
		data, err := r.blob(pr, ref.ID, e)
		if err != nil {
			rd.drop(pr) // its position is no longer known
			return err
		}
		if pr.pos >= r.packEnd(pr.name) {
			rd.drop(pr) // read to its last chunk: its buffers go now, not when three more packs are open
		}
		if _, err := w.Write(data); err != nil {
			return fmt.Errorf("write chunk %s: %w", ref.ID, err)
		}
	}
	return nil
}

// pack returns an open reader of e's pack that is not past e, opening the pack (again) when none is.
func (rd *Reader) pack(ctx context.Context, e entry) (*packReader, error) {
	for i, pr := range rd.open {
		if pr.name != e.pack {
			continue
		}
		rd.open = append(rd.open[:i], rd.open[i+1:]...)
		if e.off >= pr.pos+4 {
			rd.open = append(rd.open, pr)
			return pr, nil
		}
		pr.rc.Close() // forward only: a chunk behind the reader needs the pack from its start
		break
	}
	if len(rd.open) == maxOpenPacks {
		rd.open[0].rc.Close()
		rd.open = rd.open[1:]
	}
	pr, err := rd.r.openPack(ctx, e.pack)
	if err != nil {
		return nil, err
	}
	rd.open = append(rd.open, pr)
	return pr, nil
}

func (rd *Reader) drop(pr *packReader) {
	if i := slices.Index(rd.open, pr); i >= 0 {
		rd.open = slices.Delete(rd.open, i, i+1)
	}
	pr.rc.Close()
}

// Close closes the packs the reader holds open.
func (rd *Reader) Close() error {
	for _, pr := range rd.open {
		pr.rc.Close()
	}
	rd.open = nil
	return nil
}

// Verify reads and checks the chunks as Read does, giving out nothing.
func (r *Repo) Verify(ctx context.Context, refs []ChunkRef) error {
	return r.Read(ctx, refs, io.Discard)
}

// Problem is one thing Check found wrong.
type Problem struct {
	Pack    string `json:"pack"`
	Chunk   string `json:"chunk,omitempty"`
	Problem string `json:"problem"`
}

// CheckResult is what Check read and found.
type CheckResult struct {
	Packs      int       `json:"packs"`      // packs read
	Chunks     int       `json:"chunks"`     // chunks decoded and their IDs recomputed
	Bytes      int64     `json:"bytes"`      // of the packs read
	Unindexed  int       `json:"unindexed"`  // packs no index names (a running writer's, or left by a crash)
	Unreadable int       `json:"unreadable"` // index objects of keys not held (open with the identity to check them)
	Problems   []Problem `json:"problems,omitempty"`
}

// Check reads back a share of the packs (sample in (0,1]; 1 or more reads all) and verifies them:
// every pack's name is the SHA-256 of its bytes (this needs no key), and, when the repository is
// readable (unencrypted, or opened with the identity), every chunk the index places in it decodes
// to its ID. Every pack the index names must exist. It returns an error matching ErrCorrupt when
// it found problems, all of them listed in the result.
func (r *Repo) Check(ctx context.Context, sample float64) (CheckResult, error) {
	var res CheckResult
	if r.opts.WriteOnly {
		return res, fmt.Errorf("check: %w", ErrWriteOnly)
	}
	l, err := r.load(ctx, true)
	if err != nil {
		return res, err
	}
	res.Unreadable = l.unreadable
	stored := map[string]bool{}
	if err := r.store.List(ctx, r.opts.Prefix+packsDir, func(o storage.ObjectInfo) error {
		stored[path.Base(o.Key)] = true
		return nil
	}); err != nil {
		return res, fmt.Errorf("list packs: %w", err)
	}
	var names []string // every stored pack: its hash is checked even when no readable index names it
	for name := range stored {
		if l.packs[name] == nil {
			res.Unindexed++
		}
		names = append(names, name)
	}
	for name := range l.packs {
		if !stored[name] {
			res.Problems = append(res.Problems, Problem{Pack: name, Problem: fmt.Sprintf("missing: the index places %d chunks in it", len(l.packs[name]))})
		}
	}
	slices.Sort(names)
	if sample < 1 && len(names) > 0 {
		var chosen []string
		for _, n := range names {
			if rand.Float64() < sample {
				chosen = append(chosen, n)
			}
		}
		if len(chosen) == 0 {
			chosen = append(chosen, names[rand.IntN(len(names))])
		}
		names = chosen
	}
	readable := !r.cfg.Encrypted || len(r.opts.Identities) > 0
	for _, name := range names {
		n, problems, err := r.checkPack(ctx, name, l.packs[name], readable)
		if err != nil {
			return res, err
		}
		res.Packs++
		res.Bytes += n
		res.Problems = append(res.Problems, problems...)
		if readable {
			res.Chunks += len(l.packs[name])
		}
	}
	if len(res.Problems) > 0 {
		var first []string
		for _, p := range res.Problems[:min(3, len(res.Problems))] {
			first = append(first, strings.TrimSpace("pack "+p.Pack+" "+p.Chunk)+": "+p.Problem)
		}
		return res, fmt.Errorf("check found %d problems (%s): %w", len(res.Problems), strings.Join(first, "; "), ErrCorrupt)
	}
	return res, nil
}

// checkPack reads one pack whole (packs are bounded by PackSize).
func (r *Repo) checkPack(ctx context.Context, name string, blobs []packBlob, readable bool) (int64, []Problem, error) {
	data, err := r.getAll(ctx, r.packKey(name))
	if err != nil {
		if errors.Is(err, storage.ErrNotExist) {
			return 0, []Problem{{Pack: name, Problem: "missing"}}, nil
		}
		return 0, nil, err
	}
	var problems []Problem
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != name {
		problems = append(problems, Problem{Pack: name, Problem: "its bytes do not hash to its name (tampered or truncated)"})
	}
	if !readable {
		return int64(len(data)), problems, nil
	}
	pr := &packReader{name: name, rc: io.NopCloser(nil), br: bufio.NewReader(bytes.NewReader(data))}
	if err := r.readPackHead(pr); err != nil {
		return int64(len(data)), append(problems, Problem{Pack: name, Problem: err.Error()}), nil
	}
	for _, b := range blobs {
		if b.e.off < 4 || b.e.off+int64(b.e.length) > int64(len(data)) {
			problems = append(problems, Problem{Pack: name, Chunk: b.id.String(), Problem: "outside the pack"})
			continue
		}
		if _, err := r.decodeBlob(pr.aead, name, b.id, b.e, data[b.e.off:b.e.off+int64(b.e.length)], &pr.bufs); err != nil {
			problems = append(problems, Problem{Pack: name, Chunk: b.id.String(), Problem: problemText(err)})
		}
	}
	return int64(len(data)), problems, nil
}

// problemText is the reason of a chunk's error, without the chunk and pack it names anyway.
func problemText(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "+ErrCorrupt.Error()); i > 0 {
		s = s[:i]
	}
	if i := strings.LastIndex(s, ": "); i > 0 {
		s = s[i+2:]
	}
	return s
}
