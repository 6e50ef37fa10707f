package volumes

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/ferrykube/ferry/snapshot"
	"github.com/klauspost/compress/zstd"
)

// The previous tree of a claim is never held in memory: a volume of a million files would make
// ferry and the mover hold a million entries. Pack walks the volume in a fixed order (walkCompare),
// and the tree stream lists the files in that order, so each side merge-walks the previous tree
// alongside the files it meets: ferry streams the previous stats to the mover, the mover finds
// each file's among them as it walks, and ferry takes the entries of the files the mover found
// unchanged from those it sent (handoff). ferry reads the stream through prevIter, which keeps
// only what is in walk order; the mover's list is a subset of it (files of a stat whose chunks can
// be reused), so that what the mover finds, ferry finds too.

// walkCompare orders paths as filepath.WalkDir visits them: by name, component by component ("a/b"
// before "a.txt", whose '.' sorts before '/').
func walkCompare(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] == b[i] {
			continue
		}
		x, y := a[i], b[i]
		if x == '/' {
			x = 0
		}
		if y == '/' {
			y = 0
		}
		if x < y {
			return -1
		}
		return 1
	}
	return len(a) - len(b)
}

// treeLines reads a tree stream's entries one at a time.
type treeLines struct {
	dec    *zstd.Decoder
	lines  *bufio.Scanner
	n      int
	closer io.Closer // closed with the lines, when set
	// noHeads leaves each entry's Head out and keeps its line instead (treeEntry.line): decoding
	// the Head is most of what decoding an entry of a small file costs, the previous stats need
	// none, and an unchanged file's entry is written to the next tree as its line.
	noHeads bool
}

// noHead is a tree entry's Head left undecoded (treeLines.noHeads).
type noHead struct{}

func (noHead) UnmarshalJSON([]byte) error { return nil }

func newTreeLines(r io.Reader) (*treeLines, error) {
	dec, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(64<<20))
	if err != nil {
		return nil, err
	}
	lines := bufio.NewScanner(dec)
	lines.Buffer(make([]byte, 0, 64<<10), 16<<20)
	return &treeLines{dec: dec, lines: lines}, nil
}

// next returns the next entry; false at the end of the stream.
func (t *treeLines) next() (treeEntry, bool, error) {
	var e treeEntry
	if !t.lines.Scan() {
		if err := t.lines.Err(); err != nil {
			return e, false, fmt.Errorf("tree: %w", err)
		}
		return e, false, nil
	}
	t.n++
	var err error
	if t.noHeads {
		err = json.Unmarshal(t.lines.Bytes(), &struct {
			*treeEntry
			Head noHead `json:"head"`
		}{treeEntry: &e})
		e.line = bytes.Clone(t.lines.Bytes())
	} else {
		err = json.Unmarshal(t.lines.Bytes(), &e)
	}
	if err != nil {
		return e, false, fmt.Errorf("tree entry %d: %v: %w", t.n, err, snapshot.ErrCorrupt)
	}
	return e, true, nil
}

func (t *treeLines) close() {
	t.dec.Close()
	if t.closer != nil {
		t.closer.Close()
	}
}

// prevIter reads the entries of files of a previous tree stream that a backup may take: of
// consecutive entries of a path the last (a file read again, or left out), and none from the
// first path out of walk order on (a stream of another ferry's order is then only partly used).
type prevIter struct {
	lines   *treeLines
	pending *treeEntry
	last    string
	ended   bool
	// OutOfOrder is set once a path out of walk order ended the iteration.
	OutOfOrder string
}

func (p *prevIter) next() (treeEntry, bool, error) {
	for !p.ended {
		e, ok, err := p.lines.next()
		if err != nil {
			return e, false, err
		}
		if !ok {
			p.ended = true
			break
		}
		if e.Path == "" {
			continue
		}
		if p.pending != nil && e.Path == p.pending.Path {
			p.pending = &e
			continue
		}
		if p.last != "" && walkCompare(string(e.Path), p.last) <= 0 {
			p.OutOfOrder, p.ended = string(e.Path), true
			break
		}
		p.last = string(e.Path)
		out := p.pending
		p.pending = &e
		if out != nil {
			return *out, true, nil
		}
	}
	if p.pending != nil {
		out := *p.pending
		p.pending = nil
		return out, true, nil
	}
	return treeEntry{}, false, nil
}

// finder finds the entries of the iteration by paths asked in walk order.
func (p *prevIter) finder() prevFinder {
	c := &sortedCursor[treeEntry]{next: func() (treeEntry, string, bool, error) {
		e, ok, err := p.next()
		return e, string(e.Path), ok, err
	}}
	return c.find
}

// sortedCursor finds entries of a stream in walk order by paths asked in walk order, holding one
// entry. A path asked before the last one asked is not found: Pack never asks so, and a sequence
// of asks in order finds the same whatever entries it skipped asking for.
type sortedCursor[T any] struct {
	next     func() (T, string, bool, error) // the next entry and its path; false at the end
	head     T
	headPath string
	have     bool
	ended    bool
	last     string
	asked    bool
}

func (c *sortedCursor[T]) find(name string) (T, bool, error) {
	var zero T
	if c.asked && walkCompare(name, c.last) < 0 {
		return zero, false, nil
	}
	c.asked, c.last = true, name
	for !c.ended {
		if !c.have {
			e, p, ok, err := c.next()
			if err != nil {
				c.ended = true
				return zero, false, err
			}
			if !ok {
				c.ended = true
				break
			}
			c.head, c.headPath, c.have = e, p, true
		}
		switch cmp := walkCompare(c.headPath, name); {
		case cmp < 0:
			c.have = false
		case cmp == 0:
			return c.head, true, nil
		default:
			return zero, false, nil
		}
	}
	return zero, false, nil
}

// prevStat is a line of the previous backup's stats that ferry hands `ferry mover pack --tree`:
// a file's path and StatRecord, and its size and SHA-256, which the mover writes back in the
// UnchangedRecord of a file it finds unchanged (the file list needs them).
type prevStat struct {
	Path   snapshot.Name `json:"path"`
	Stat   string        `json:"stat"`
	Size   int64         `json:"size"`
	SHA256 string        `json:"sha256"`
}

// unchangedValue is the UnchangedRecord of a file of the previous stats s.
func unchangedValue(s prevStat) string { return strconv.FormatInt(s.Size, 10) + " " + s.SHA256 }

// parseUnchanged reads an UnchangedRecord's size and SHA-256.
func parseUnchanged(v string) (int64, string, error) {
	size, sum, ok := strings.Cut(v, " ")
	n, err := strconv.ParseInt(size, 10, 64)
	if !ok || err != nil || n < 0 || len(sum) != 64 {
		return 0, "", fmt.Errorf("%s %q: want the size and SHA-256 of the previous backup's entry (is the mover's image older than ferry?)", UnchangedRecord, v)
	}
	return n, sum, nil
}

// writePrevStats writes to w the stats of the previous tree's entries that keep says may be
// taken, then the end line, as PackTree reads them; each entry goes to sent before its stats are
// written. A write that fails because the mover is gone ends it without an error: the mover needed
// no more.
func writePrevStats(w io.Writer, prev *prevIter, keep func(treeEntry) bool, sent func(treeEntry)) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	for {
		e, ok, err := prev.next()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		if e.Stat == "" || !keep(e) {
			continue
		}
		line, err := json.Marshal(prevStat{Path: e.Path, Stat: e.Stat, Size: e.Size, SHA256: e.SHA256})
		if err != nil {
			return err
		}
		sent(e)
		if _, err := bw.Write(append(line, '\n')); err != nil {
			return nil
		}
	}
	bw.WriteString(treeEnd + "\n")
	bw.Flush()
	return nil
}

// handoff hands the entries whose stats ferry sent the mover to the finder of the entries of the
// files the mover found unchanged, so that the previous tree is decoded once. It holds the
// entries sent that the finder has not passed, up to hold of them: the feed never waits for the
// finder (the mover waits for the feed, and the finder for the mover), so past that it drops the
// rest, and the finder reads those from the tree again (reopen). The mover finds a file unchanged
// only by stats it read, which were handed over before they were written: the finder never waits
// either.
type handoff struct {
	mu       sync.Mutex
	held     []treeEntry
	hold     int
	overflow bool
	reopen   func() (*prevIter, error)
	again    prevFinder // of the second read, once the held entries ran out after an overflow
}

func (h *handoff) sent(e treeEntry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.overflow || len(h.held) >= h.hold {
		h.overflow = true
		return
	}
	h.held = append(h.held, e)
}

// find is a prevFinder of the entries sent; paths are asked in walk order.
func (h *handoff) find(name string) (treeEntry, bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for len(h.held) > 0 {
		e := h.held[0]
		switch cmp := walkCompare(string(e.Path), name); {
		case cmp < 0:
			h.held[0] = treeEntry{}
			h.held = h.held[1:]
		case cmp == 0:
			return e, true, nil
		default:
			return treeEntry{}, false, nil
		}
	}
	if !h.overflow {
		return treeEntry{}, false, nil
	}
	if h.again == nil {
		it, err := h.reopen()
		if err != nil {
			return treeEntry{}, false, err
		}
		it.lines.noHeads = true
		h.again = it.finder()
	}
	return h.again(name)
}

// statReader is the mover's side of writePrevStats: it finds each file's previous stats in
// walk order, reading the list no further than the files walked.
type statReader struct {
	lines  *bufio.Scanner
	n      int
	ended  bool
	cursor sortedCursor[prevStat]
}

func newStatReader(in io.Reader) *statReader {
	s := &statReader{lines: bufio.NewScanner(in)}
	s.lines.Buffer(make([]byte, 0, 64<<10), 1<<20)
	s.cursor.next = s.next
	return s
}

func (s *statReader) next() (prevStat, string, bool, error) {
	var st prevStat
	if s.ended {
		return st, "", false, nil
	}
	if !s.lines.Scan() {
		if err := s.lines.Err(); err != nil {
			return st, "", false, fmt.Errorf("previous stats: %w", err)
		}
		return st, "", false, fmt.Errorf("previous stats: no %q line: %w", treeEnd, io.ErrUnexpectedEOF)
	}
	if string(s.lines.Bytes()) == treeEnd {
		s.ended = true
		return st, "", false, nil
	}
	s.n++
	if err := json.Unmarshal(s.lines.Bytes(), &st); err != nil {
		return st, "", false, fmt.Errorf("previous stats: line %d: %w", s.n, err)
	}
	return st, string(st.Path), true, nil
}

// drain reads the rest of the list, up to its end line.
func (s *statReader) drain() error {
	for {
		_, _, ok, err := s.next()
		if err != nil || !ok {
			return err
		}
	}
}
