package snapshot

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/ferrykube/ferry/storage"
	"github.com/klauspost/compress/zstd"
)

// FileList is a volume's list of entries as a stream of its own (format 4): one JSON File a line,
// zstd-compressed, encrypted when the backup is. The manifest keeps only its name and totals, so
// that neither it nor whoever reads it holds a volume's million entries, and so that the names and
// digests of an encrypted backup's files are never in plaintext.
type FileList struct {
	// Key is the stream's name as stored (with the encrypted suffix when encrypted).
	Key string `json:"key"`
	// Entries counts the lines; Files and FileBytes the regular files (every name of one) and
	// their sizes, as describe shows them.
	Entries   int64 `json:"entries"`
	Files     int64 `json:"files"`
	FileBytes int64 `json:"fileBytes"`
}

// FileListFile is the stream of a claim's file list, before the encrypted suffix.
func FileListFile(namespace, claim string) string {
	return ClaimStream("volume-files", namespace, claim, ".jsonl.zst")
}

// maxFileLine bounds one line of a file list: a name is at most a few KiB, even base64-encoded.
const maxFileLine = 1 << 20

// FileListWriter writes a volume's file list into the backup as its entries are added, holding
// none of them: a pipe feeds the upload.
type FileListWriter struct {
	list FileList
	pw   *io.PipeWriter
	enc  *zstd.Encoder
	buf  *bufio.Writer
	done chan error
}

// NewFileList starts the file list of a claim; Add its entries, then Close (or Abort).
func (w *Writer) NewFileList(ctx context.Context, namespace, claim string) (*FileListWriter, error) {
	pr, pw := io.Pipe()
	// A window of 1 MiB, not the default 8: the encoder holds its window (16 MiB of a backup's
	// heap with the default), and lines of paths repeat within far less.
	enc, err := zstd.NewWriter(pw, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<20))
	if err != nil {
		return nil, err
	}
	l := &FileListWriter{pw: pw, enc: enc, buf: bufio.NewWriterSize(enc, 64<<10), done: make(chan error, 1)}
	file := FileListFile(namespace, claim)
	go func() {
		stored, err := w.Put(storage.WithSmallParts(ctx), file, pr)
		if err != nil {
			err = fmt.Errorf("store the file list %s: %w", file, err)
		}
		l.list.Key = stored
		pr.CloseWithError(err) // an Add still writing stops there
		l.done <- err
	}()
	return l, nil
}

// Add writes one entry.
func (l *FileListWriter) Add(f File) error {
	line, err := json.Marshal(f)
	if err != nil {
		return err
	}
	if _, err := l.buf.Write(append(line, '\n')); err != nil {
		return err
	}
	l.list.Entries++
	if f.Type == "file" {
		l.list.Files++
		l.list.FileBytes += f.Size
	}
	return nil
}

// Close ends the list and waits until it is stored.
func (l *FileListWriter) Close() (FileList, error) {
	err := l.buf.Flush()
	if cerr := l.enc.Close(); err == nil {
		err = cerr
	}
	l.pw.CloseWithError(err)
	if perr := <-l.done; err == nil {
		err = perr
	}
	return l.list, err
}

// Abort ends the list with err: nothing is stored (or what was is replaced by a retry).
func (l *FileListWriter) Abort(err error) {
	l.enc.Close()
	l.pw.CloseWithError(err)
	<-l.done
}

// errHoldsSomething ends VolumeHoldsNothing's read at the first entry that is data.
var errHoldsSomething = errors.New("the volume holds an entry")

// VolumeHoldsNothing reports whether the volume held no entry but the filesystem's lost+found
// folder: a claim given a volume that nothing wrote to. Its file list is read (to its end, and
// checked) only when the manifest's counts leave it open.
func (r *Reader) VolumeHoldsNothing(ctx context.Context, v Volume) (bool, error) {
	switch {
	case v.Bytes > 0, v.List != nil && (v.List.Files > 0 || v.List.Entries > 1):
		return false, nil
	case v.List != nil && v.List.Entries == 0:
		return true, nil
	}
	err := r.VolumeFiles(ctx, v, func(f File) error {
		if f.Type == "dir" && strings.TrimSuffix(f.Path, "/") == "lost+found" {
			return nil
		}
		return errHoldsSomething
	})
	if errors.Is(err, errHoldsSomething) {
		return false, nil
	}
	return err == nil, err
}

// VolumeFiles calls fn for each entry of the volume's file list, in the order stored: from its
// stream (format 4), read, decompressed and decrypted as it goes and checked against the manifest
// at its end, or from the manifest (format 3 and older). An error of the stream (it does not match
// the manifest: ErrCorrupt) comes after fn has seen entries: what fn saw counts only when
// VolumeFiles returns nil, so nothing may be applied from it before.
func (r *Reader) VolumeFiles(ctx context.Context, v Volume, fn func(File) error) error {
	if v.List == nil {
		for _, f := range v.Files {
			if err := fn(f); err != nil {
				return err
			}
		}
		return nil
	}
	return r.readFileList(ctx, *v.List, fn)
}

func (r *Reader) readFileList(ctx context.Context, list FileList, fn func(File) error) (err error) {
	what := r.name + "/" + list.Key
	rc, err := r.Open(ctx, list.Key)
	if err != nil {
		return err
	}
	defer func() {
		// A stream that does not match the manifest explains any other error: it goes first.
		if cerr := Drain(rc); errors.Is(cerr, ErrCorrupt) || err == nil && cerr != nil {
			err = cerr
		}
	}()
	dec, err := zstd.NewReader(rc, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(64<<20))
	if err != nil {
		return err
	}
	defer dec.Close()
	lines := bufio.NewScanner(dec)
	lines.Buffer(make([]byte, 0, 64<<10), maxFileLine)
	var n int64
	for lines.Scan() {
		var f File
		if err := json.Unmarshal(lines.Bytes(), &f); err != nil {
			return fmt.Errorf("%s: entry %d: %v: %w", what, n+1, err, ErrCorrupt)
		}
		n++
		if err := fn(f); err != nil {
			return err
		}
	}
	if err := lines.Err(); err != nil {
		if errors.Is(err, ErrCorrupt) {
			return err
		}
		return fmt.Errorf("%s: %v: %w", what, err, ErrCorrupt)
	}
	if n != list.Entries {
		return fmt.Errorf("%s: %d entries, the manifest says %d: %w", what, n, list.Entries, ErrCorrupt)
	}
	return nil
}

// checkFileLists checks each volume's file list against the manifest's format: a format 4
// manifest names a recorded stream of the claim's list and lists no file itself (which would put
// names in plaintext); an older one has no list stream.
func checkFileLists(name string, m *Manifest, recorded map[string]bool) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("backup %s: %s: %w: %s", name, ManifestFile, ErrBadManifest, fmt.Sprintf(format, args...))
	}
	n, _ := formatNumber(m.FormatVersion)
	for _, v := range m.Volumes {
		claim := v.Namespace + "/" + v.Name
		if v.List == nil {
			if n >= 4 {
				return bad("volume %s has no file list", claim)
			}
			continue
		}
		if n < 4 {
			return bad("volume %s has a file list, which format %s does not have", claim, m.FormatVersion)
		}
		if len(v.Files) > 0 {
			return bad("volume %s lists files in the manifest and has a file list", claim)
		}
		want := FileListFile(v.Namespace, v.Name)
		whole := "volume-files/" + v.Namespace + "/" + v.Name + ".jsonl.zst" // a ferry before ClaimStream, which kept every name whole
		if !slices.Contains([]string{want, want + EncryptedSuffix, whole, whole + EncryptedSuffix}, v.List.Key) {
			return bad("volume %s keeps its file list in %.80q, not in %s", claim, v.List.Key, want)
		}
		if !recorded[v.List.Key] {
			return bad("volume %s: file list %s is not a recorded stream", claim, v.List.Key)
		}
		if v.List.Entries < 0 || v.List.Files < 0 || v.List.FileBytes < 0 {
			return bad("volume %s: negative counts of its file list", claim)
		}
	}
	for _, v := range m.Volumes {
		claim := v.Namespace + "/" + v.Name
		switch {
		case v.Format == "" && v.Repo == "":
		case v.Format != FormatChunks:
			return bad("volume %s: format %.40q: this ferry knows %q", claim, v.Format, FormatChunks)
		case n < 5:
			return bad("volume %s: format %s, which backup format %s does not have", claim, v.Format, m.FormatVersion)
		case !strings.HasPrefix(v.Repo, "metadata/ferry/") || strings.Contains(v.Repo, ".."):
			return bad("volume %s: its chunk repository %.80q is not under metadata/ferry/", claim, v.Repo)
		}
	}
	return nil
}
