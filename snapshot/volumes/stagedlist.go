package volumes

import (
	"bufio"
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
// holds them: the mover keeps the staged list in its staging folder (SaveStaged) and prints it,
// a line per entry after a first line that sums it up (PrintStaged); ferry checks the lines
// against the backup's file list as they come, and hands back only the summary with the
// SHA-256 of the lines it checked, so that Apply puts in place exactly the list ferry checked
// (LoadStaged). Apply's result comes back the same way (PrintUnpacked).

// stagedListName is the staged list's file in the staging folder, whose staged files are
// numbered.
const stagedListName = "list.jsonl"

// SaveStaged writes st's entries, one JSON line each, to the list in its staging folder (making
// the folder if Stage staged nothing: Apply and Abort give the root its time back), and records
// their number and SHA-256 in st.
func SaveStaged(dir string, st *Staged) error {
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
	digest := sha256.New()
	out := bufio.NewWriterSize(io.MultiWriter(f, digest), 1<<16)
	enc := json.NewEncoder(out)
	for _, e := range st.Files {
		if err = enc.Encode(e); err != nil {
			break
		}
	}
	if err == nil {
		err = out.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("save the staged list: %w", err)
	}
	st.Count, st.ListSHA256 = len(st.Files), hex.EncodeToString(digest.Sum(nil))
	return nil
}

// PrintStaged writes head (st, or a result that holds it) as one JSON line, then the list that
// SaveStaged saved for st, a line per entry.
func PrintStaged(w io.Writer, dir string, head any, st Staged) error {
	if err := json.NewEncoder(w).Encode(head); err != nil {
		return err
	}
	if st.Count == 0 && st.ListSHA256 == "" {
		return nil // nothing staged: a failed direct stage
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

// LoadStaged reads back the list SaveStaged saved for the summary req (as ferry hands it back),
// refusing one of another number of entries or another SHA-256 than req's.
func LoadStaged(dir string, req Staged) (Staged, error) {
	f, err := openStagedList(dir, req)
	if err != nil {
		return req, fmt.Errorf("nothing staged as %s: %w", req.ID, err)
	}
	defer f.Close()
	st := req
	st.Files = make([]StagedFile, 0, req.Count)
	sum, err := readLines(bufio.NewReaderSize(f, 1<<16), func(line []byte) error {
		var e StagedFile
		if err := json.Unmarshal(line, &e); err != nil {
			return err
		}
		st.Files = append(st.Files, e)
		return nil
	})
	if err != nil {
		return req, fmt.Errorf("the staged list of %s: %w", req.ID, err)
	}
	if len(st.Files) != req.Count || sum != req.ListSHA256 {
		return req, badinput.Errorf("staged list of %s: %d entries with SHA-256 %s on the volume, %d with %s checked", req.ID, len(st.Files), sum, req.Count, req.ListSHA256)
	}
	return st, nil
}

// readLines hands fn each line of r, to its end, and returns the SHA-256 of the lines.
func readLines(r *bufio.Reader, fn func(line []byte) error) (string, error) {
	digest := sha256.New()
	for i := 0; ; i++ {
		line, err := r.ReadBytes('\n')
		if err == io.EOF && len(line) == 0 {
			break
		}
		if err == io.EOF {
			return "", fmt.Errorf("line %d: %w", i+1, io.ErrUnexpectedEOF)
		}
		if err != nil {
			return "", err
		}
		digest.Write(line)
		if err := fn(line); err != nil {
			return "", fmt.Errorf("line %d: %w", i+1, err)
		}
	}
	return hex.EncodeToString(digest.Sum(nil)), nil
}

// PrintUnpacked writes Apply's result as one JSON line, then its files, a line each.
func PrintUnpacked(w io.Writer, res UnpackResult) error {
	res.Count = len(res.Files)
	out := bufio.NewWriterSize(w, 1<<16)
	enc := json.NewEncoder(out)
	if err := enc.Encode(res); err != nil {
		return err
	}
	for _, f := range res.Files {
		if err := enc.Encode(f); err != nil {
			return err
		}
	}
	return out.Flush()
}

// errMoverOutput marks what a mover printed that ferry cannot read.
var errMoverOutput = errors.New("the mover's output")

// lineReader reads, one at a time, the n entry lines of T after a first line, as a mover prints
// them, and hashes them.
type lineReader[T any] struct {
	r      *bufio.Reader
	n, got int
	digest hash.Hash
}

// newLineReader reads the first line into head, which says (count) how many lines follow.
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
	return &lineReader[T]{r: br, n: count(), digest: sha256.New()}, nil
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
	if err != nil {
		return e, false, fmt.Errorf("%w: entry %d of %d: %w", errMoverOutput, l.got+1, l.n, err)
	}
	if err := json.Unmarshal(line, &e); err != nil {
		return e, false, fmt.Errorf("%w: entry %d of %d: %w", errMoverOutput, l.got+1, l.n, err)
	}
	l.digest.Write(line)
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
