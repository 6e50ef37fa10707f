package storage

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/ferrykube/ferry/internal/badinput"
)

// tempPrefix starts the names of files being written; they are never listed.
const tempPrefix = ".ferry-tmp-"

// File stores objects as files under a local folder.
type File struct {
	root string
}

// NewFile returns a backend rooted at dir, creating dir when it is missing.
func NewFile(dir string) (*File, error) {
	if dir == "" {
		return nil, badinput.Errorf("storage folder: empty path")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, badinput.Errorf("storage folder %q: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("storage folder %q: %w", dir, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("storage folder %q: %w", dir, err)
	}
	if !st.IsDir() {
		return nil, badinput.Errorf("storage folder %q: not a directory", dir)
	}
	return &File{root: abs}, nil
}

func (f *File) String() string { return "file://" + f.root }

func (f *File) path(key string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", fmt.Errorf("%s: %w", f, err)
	}
	return filepath.Join(f.root, filepath.FromSlash(key)), nil
}

func (f *File) notExist(key string) error { return &NotExistError{Location: f.String(), Key: key} }

// Put writes to a temporary file in the target folder, syncs it and renames it over the key, so
// that concurrent writers of one key each replace the object whole and readers never see a part.
func (f *File) Put(ctx context.Context, key string, r io.Reader) error {
	p, err := f.path(key)
	if err != nil {
		return err
	}
	tmp, err := f.writeTemp(ctx, p, r)
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	unlock, err := lockDir(filepath.Dir(p))
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("put %s: %w", key, err)
	}
	defer unlock()
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("put %s: %w", key, err)
	}
	return syncDir(filepath.Dir(p))
}

// lockDir takes the exclusive flock(2) of a folder, which a Swap holds between comparing the
// object's version and renaming the new one over it, and Put and Delete around their one change,
// so that none of them lands in between. The kernel drops the lock of a process that dies.
func lockDir(dir string) (func(), error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(d.Fd()), syscall.LOCK_EX); err != nil {
		d.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return func() { d.Close() }, nil // closing the last descriptor releases the lock
}

// fileVersion names a file's content: the versions of file storage are content hashes, as the
// ETags of S3's single-part uploads are.
func fileVersion(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// ReadVersion implements Swapper.
func (f *File) ReadVersion(ctx context.Context, key string) ([]byte, string, error) {
	rc, err := f.Get(ctx, key)
	if err != nil {
		return nil, "", err
	}
	defer rc.Close()
	data, err := readSmall(rc)
	if err != nil {
		return nil, "", fmt.Errorf("read %s in %s: %w", key, f, err)
	}
	return data, fileVersion(data), nil
}

// Swap implements Swapper: the new content is written to a temporary file first; then, holding the
// folder's lock, the current file's version is compared and the temporary file renamed over it
// (or, from no version, linked to the key, which fails when the key exists).
func (f *File) Swap(ctx context.Context, key, version string, data []byte) (string, error) {
	p, err := f.path(key)
	if err != nil {
		return "", err
	}
	tmp, err := f.writeTemp(ctx, p, bytes.NewReader(data))
	if err != nil {
		return "", fmt.Errorf("swap %s: %w", key, err)
	}
	defer os.Remove(tmp)
	unlock, err := lockDir(filepath.Dir(p))
	if err != nil {
		return "", fmt.Errorf("swap %s: %w", key, err)
	}
	defer unlock()
	if version == "" {
		if err := os.Link(tmp, p); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return "", fmt.Errorf("swap %s in %s: it exists: %w", key, f, ErrChanged)
			}
			return "", fmt.Errorf("swap %s: %w", key, err)
		}
		return fileVersion(data), syncDir(filepath.Dir(p))
	}
	current, err := os.ReadFile(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("swap %s in %s: it no longer exists: %w", key, f, ErrChanged)
	case err != nil:
		return "", fmt.Errorf("swap %s: %w", key, err)
	case fileVersion(current) != version:
		return "", fmt.Errorf("swap %s in %s: %w", key, f, ErrChanged)
	}
	if err := os.Rename(tmp, p); err != nil {
		return "", fmt.Errorf("swap %s: %w", key, err)
	}
	return fileVersion(data), syncDir(filepath.Dir(p))
}

// readSmall reads a record whole, refusing one larger than MaxSwapSize.
func readSmall(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxSwapSize+1))
	if err == nil && len(data) > MaxSwapSize {
		err = fmt.Errorf("larger than %d bytes", MaxSwapSize)
	}
	return data, err
}

// Create links a fully written temporary file to the key; link(2) fails when the name exists, which
// makes the check and the creation one atomic step.
func (f *File) Create(ctx context.Context, key string, r io.Reader) error {
	p, err := f.path(key)
	if err != nil {
		return err
	}
	tmp, err := f.writeTemp(ctx, p, r)
	if err != nil {
		return fmt.Errorf("create %s: %w", key, err)
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, p); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create %s in %s: %w", key, f, ErrExists)
		}
		return fmt.Errorf("create %s: %w", key, err)
	}
	return syncDir(filepath.Dir(p))
}

// Copy implements Copier with a hard link, renamed over dst as Put renames its file; where the
// folder cannot hold links it copies the file.
func (f *File) Copy(ctx context.Context, src, dst string, _ int64) error {
	from, err := f.path(src)
	if err != nil {
		return err
	}
	to, err := f.path(dst)
	if err != nil {
		return err
	}
	if st, err := os.Stat(from); errors.Is(err, fs.ErrNotExist) || (err == nil && st.IsDir()) {
		return f.notExist(src)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	tmp := filepath.Join(filepath.Dir(to), tempPrefix+rand.Text())
	if err := os.Link(from, tmp); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return f.notExist(src)
		}
		rc, gerr := f.Get(ctx, src)
		if gerr != nil {
			return gerr
		}
		defer rc.Close()
		return f.Put(ctx, dst, rc)
	}
	unlock, err := lockDir(filepath.Dir(to))
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	defer unlock()
	if err := os.Rename(tmp, to); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return syncDir(filepath.Dir(to))
}

func (f *File) writeTemp(ctx context.Context, target string, r io.Reader) (string, error) {
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(filepath.Dir(target), tempPrefix+"*")
	if err != nil {
		return "", err
	}
	_, err = io.Copy(tmp, contextReader{ctx: ctx, r: r})
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	return tmp.Name(), nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

func (f *File) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	p, err := f.path(key)
	if err != nil {
		return nil, err
	}
	file, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, f.notExist(key)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	if st, err := file.Stat(); err == nil && st.IsDir() {
		file.Close()
		return nil, f.notExist(key)
	}
	return file, nil
}

func (f *File) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	p, err := f.path(key)
	if err != nil {
		return ObjectInfo{}, err
	}
	st, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && st.IsDir()) {
		return ObjectInfo{}, f.notExist(key)
	}
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("stat %s: %w", key, err)
	}
	return ObjectInfo{Key: key, Size: st.Size(), ModTime: st.ModTime()}, nil
}

// Delete removes the file and then any folders it leaves empty, up to the root.
func (f *File) Delete(ctx context.Context, key string) error {
	p, err := f.path(key)
	if err != nil {
		return err
	}
	unlock, err := lockDir(filepath.Dir(p))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	err = os.Remove(p)
	unlock()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	for dir := filepath.Dir(p); dir != f.root && strings.HasPrefix(dir, f.root); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break // not empty, or already gone
		}
	}
	return nil
}

// List walks only the folder the prefix points into and visits entries in key order: a folder
// "a" sorts as "a/", so that "a-b" comes before "a/c" as it does in S3.
func (f *File) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	if err := checkPrefix(prefix); err != nil {
		return fmt.Errorf("%s: %w", f, err)
	}
	dirKey := ""
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		dirKey = prefix[:i+1]
	}
	return f.walk(ctx, dirKey, prefix, fn)
}

func (f *File) walk(ctx context.Context, dirKey, prefix string, fn func(ObjectInfo) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	entries, err := os.ReadDir(filepath.Join(f.root, filepath.FromSlash(dirKey)))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && dirKey != "" {
			return nil
		}
		return fmt.Errorf("list %s: %w", dirKey, err)
	}
	sortKey := func(e fs.DirEntry) string {
		if e.IsDir() {
			return e.Name() + "/"
		}
		return e.Name()
	}
	sort.Slice(entries, func(i, j int) bool { return sortKey(entries[i]) < sortKey(entries[j]) })
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tempPrefix) {
			continue
		}
		key := dirKey + e.Name()
		if e.IsDir() {
			sub := key + "/"
			if strings.HasPrefix(sub, prefix) || strings.HasPrefix(prefix, sub) {
				if err := f.walk(ctx, sub, prefix, fn); err != nil {
					return err
				}
			}
			continue
		}
		if !strings.HasPrefix(key, prefix) || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted while listing
		}
		if err != nil {
			return fmt.Errorf("list %s: %w", key, err)
		}
		if err := fn(ObjectInfo{Key: key, Size: info.Size(), ModTime: info.ModTime()}); err != nil {
			return err
		}
	}
	return nil
}

// CleanPartial implements PartialCleaner: it removes the temporary files of interrupted Puts in the
// folder prefix names (up to its last "/") and the folders below it. A temporary file does not say
// which key it was for, so a prefix should name a folder, as a backup's does.
func (f *File) CleanPartial(ctx context.Context, prefix string) (int, error) {
	if err := checkPrefix(prefix); err != nil {
		return 0, fmt.Errorf("%s: %w", f, err)
	}
	dirKey := ""
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		dirKey = prefix[:i+1]
	}
	root := filepath.Join(f.root, filepath.FromSlash(dirKey))
	removed := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if d.IsDir() || !strings.HasPrefix(d.Name(), tempPrefix) {
			return nil
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		removed++
		return nil
	})
	if err != nil {
		return removed, fmt.Errorf("clean partial writes under %s in %s: %w", prefix, f, err)
	}
	return removed, nil
}
