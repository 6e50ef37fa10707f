package volumes

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/snapshot"
)

// A volume of a million files stages a million entries. Neither ferry nor the mover's stdin
// holds them: the mover keeps a large staged list in its staging folder (SaveStaged) and prints
// it, a line per entry after a first line that sums it up (PrintStaged); ferry checks the lines
// against the backup's file list as they come, and hands back only the summary with the SHA-256
// of the lines it checked, so that Apply puts in place exactly the list ferry checked
// (LoadStaged). A list of at most InlineStaged entries, when Stage staged nothing, stays off
// the volume (a restore that finds everything in place touches nothing, not even the root's
// times): ferry hands its lines back after the summary. Apply's result comes back as lines too
// (ApplyAndPrint).

// InlineStaged is the most entries of a staged list that ferry holds and hands back (some MiB),
// when Stage staged nothing; a longer list is saved in a staging folder made for it.
const InlineStaged = 1 << 16

// stagedListName is the staged list's file in the staging folder, whose staged files are
// numbered.
const stagedListName = "list.jsonl"

// SaveStaged records the number of st's entries and the SHA-256 of their lines in st, and saves
// the lines, one JSON line per entry, in its staging folder (Saved) unless Stage staged nothing
// and they are few. A long list of a volume where nothing was staged gets a staging folder of
// its own (Apply and Abort give the root its time back).
func SaveStaged(dir string, st *Staged) error {
	if st.loaded {
		return nil // Stage saved a long list as it read the archive
	}
	st.Saved = !st.RootModTime.IsZero() || len(st.Files) > InlineStaged
	if !st.Saved {
		return writeStaged(io.Discard, st)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	name, err := stagingDir(st.ID)
	if err != nil {
		return err
	}
	if st.RootModTime.IsZero() {
		fi, err := root.Lstat(".")
		if err != nil {
			return err
		}
		if err := root.Mkdir(name, 0o700); err != nil {
			return err
		}
		st.RootModTime = fi.ModTime()
	}
	f, err := root.OpenFile(name+"/"+stagedListName, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = writeStaged(f, st)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("save the staged list: %w", err)
	}
	return nil
}

// writeStaged writes st's entries to w, a JSON line each, and records their number and SHA-256.
func writeStaged(w io.Writer, st *Staged) error {
	out := newListWriter(w)
	enc := json.NewEncoder(out)
	for _, e := range st.Files {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return out.close(st, len(st.Files))
}

// listWriter writes a staged list's lines and sums them up as a Staged records them.
type listWriter struct {
	*bufio.Writer
	digest hash.Hash
}

func newListWriter(w io.Writer) *listWriter {
	digest := sha256.New()
	return &listWriter{Writer: bufio.NewWriterSize(io.MultiWriter(w, digest), 1<<16), digest: digest}
}

// close flushes the count lines written and records their number and SHA-256 in st.
func (l *listWriter) close(st *Staged, count int) error {
	if err := l.Flush(); err != nil {
		return err
	}
	st.Count, st.ListSHA256 = count, hex.EncodeToString(l.digest.Sum(nil))
	return nil
}

// PrintStaged writes head (st, or a result that holds it) as one JSON line, then st's entries,
// a line each, as SaveStaged saved them.
func PrintStaged(w io.Writer, dir string, head any, st Staged) error {
	if err := json.NewEncoder(w).Encode(head); err != nil {
		return err
	}
	if !st.Saved {
		return writeStaged(w, &st)
	}
	f, err := openStagedList(dir, st)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

func openStagedList(dir string, st Staged) (*os.File, error) {
	name, err := stagingDir(st.ID)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	return root.Open(name + "/" + stagedListName)
}

// LoadStaged checks the list of the summary req, as ferry hands it back: the one SaveStaged saved
// in the staging folder, or else the lines on in that follow the summary. A list of another
// number of entries or another SHA-256 than req's is refused. The list is not held: Apply reads
// it again (each), a saved one from the staging folder, and checks it once more.
func LoadStaged(dir string, req Staged, in *bufio.Reader) (Staged, error) {
	if req.Count < 0 {
		return req, badinput.Errorf("staged list of %s: %d entries", req.ID, req.Count)
	}
	if !req.Saved && req.Count > InlineStaged {
		return req, badinput.Errorf("staged list of %s: %d entries handed back, at most %d are", req.ID, req.Count, InlineStaged)
	}
	st := req
	st.Files, st.lines, st.loaded = nil, nil, true
	var keep *[]byte
	if !req.Saved {
		keep = &st.lines
	}
	if err := st.read(dir, in, keep, func(StagedFile) error { return nil }); err != nil {
		return req, err
	}
	return st, nil
}

// each gives fn the list's entries in order: Files, or the lines of a list LoadStaged checked,
// read again and checked again.
func (st Staged) each(dir string, fn func(StagedFile) error) error {
	if !st.loaded {
		for _, f := range st.Files {
			if err := fn(f); err != nil {
				return err
			}
		}
		return nil
	}
	return st.read(dir, bufio.NewReader(bytes.NewReader(st.lines)), nil, fn)
}

// read reads the list's lines, from the staging folder when it was saved, else from in (keeping
// a copy in keep, if set), gives fn each entry, and checks their number and SHA-256.
func (st Staged) read(dir string, in *bufio.Reader, keep *[]byte, fn func(StagedFile) error) error {
	lines := in
	if st.Saved {
		f, err := openStagedList(dir, st)
		if err != nil {
			return fmt.Errorf("nothing staged as %s: %w", st.ID, err)
		}
		defer f.Close()
		lines = bufio.NewReaderSize(f, 1<<16)
	}
	entries := newLines[StagedFile](lines, st.Count, nil)
	entries.keep = keep
	for {
		e, ok, err := entries.next()
		if err != nil {
			return fmt.Errorf("the staged list of %s: %w", st.ID, err)
		}
		if !ok {
			break
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if sum := entries.sum(); sum != st.ListSHA256 {
		return badinput.Errorf("staged list of %s: SHA-256 %s, %s checked", st.ID, sum, st.ListSHA256)
	}
	if st.Saved {
		if _, err := lines.ReadByte(); err != io.EOF {
			return badinput.Errorf("staged list of %s: more than the %d entries checked", st.ID, st.Count)
		}
	}
	return nil
}

// errMoverOutput marks what a mover printed that ferry cannot read.
var errMoverOutput = errors.New("the mover's output")

// lineReader reads n lines of JSON, an entry of T each, one at a time, and hashes them.
type lineReader[T any] struct {
	r      *bufio.Reader
	n, got int
	digest hash.Hash
	// mark, if set, is wrapped into every error.
	mark error
	// keep, if set, gets a copy of every line read.
	keep *[]byte
}

func newLines[T any](r *bufio.Reader, n int, mark error) *lineReader[T] {
	return &lineReader[T]{r: r, n: n, digest: sha256.New(), mark: mark}
}

// newLineReader reads the first line that a mover printed into head, which says (count) how
// many lines of entries follow; their errors match errMoverOutput.
func newLineReader[T any](r io.Reader, head any, count func() int) (*lineReader[T], error) {
	br := bufio.NewReaderSize(r, 1<<16)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errMoverOutput, err)
	}
	var counted struct {
		Count *int `json:"count"`
	}
	if err := json.Unmarshal(line, &counted); err == nil && counted.Count == nil {
		// A mover of before the lines printed everything on this one.
		return nil, fmt.Errorf("%w: it does not say how many entries follow: is the mover's image ferry of this version?", errMoverOutput)
	}
	if err := json.Unmarshal(line, head); err != nil {
		return nil, fmt.Errorf("%w: %w", errMoverOutput, err)
	}
	return newLines[T](br, count(), errMoverOutput), nil
}

// next reads the next entry: ok is false after the last.
func (l *lineReader[T]) next() (e T, ok bool, err error) {
	if l.got == l.n {
		return e, false, nil
	}
	line, err := l.r.ReadBytes('\n')
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err == nil {
		err = json.Unmarshal(line, &e)
	}
	if err != nil {
		err = fmt.Errorf("entry %d of %d: %w", l.got+1, l.n, err)
		if l.mark != nil {
			err = fmt.Errorf("%w: %w", l.mark, err)
		}
		return e, false, err
	}
	l.digest.Write(line)
	if l.keep != nil {
		*l.keep = append(*l.keep, line...)
	}
	l.got++
	return e, true, nil
}

// sum is the SHA-256 of the entry lines read.
func (l *lineReader[T]) sum() string { return hex.EncodeToString(l.digest.Sum(nil)) }

// files reads the entries as the files they are.
func (l *lineReader[T]) files(file func(T) snapshot.File) func() (snapshot.File, bool, error) {
	return func() (snapshot.File, bool, error) {
		e, ok, err := l.next()
		return file(e), ok, err
	}
}
