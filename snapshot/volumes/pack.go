package volumes

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/ferrykube/ferry/snapshot"
)

// Pack writes a tar stream of dir's tree to w: regular files, directories (empty ones too) and
// symlinks, with modes, owners and modification times. It runs inside the mover pod, as
// `ferry mover pack`, in the claim's mount. The stream ends with tar's end-of-archive marker, so
// readers know where it ends without waiting for EOF.
func Pack(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		} else if !info.Mode().IsRegular() && !info.IsDir() {
			return nil // sockets, devices and pipes are not data
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		h.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			h.Name += "/"
		}
		h.Format = tar.FormatPAX // long names, large sizes, sub-second times
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			h.Uid, h.Gid = int(st.Uid), int(st.Gid)
		}
		h.Uname, h.Gname = "", ""
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		// A file that changed size while packing would corrupt the stream: copy exactly its size.
		if _, err := io.CopyN(tw, f, h.Size); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// Index reads a tar stream as Pack writes it and lists its entries with their SHA-256.
func Index(r io.Reader) ([]snapshot.File, error) {
	tr := tar.NewReader(r)
	var files []snapshot.File
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, nil
		}
		if err != nil {
			return files, err
		}
		f := snapshot.File{Path: h.Name, Mode: fmt.Sprintf("%#o", h.Mode), UID: h.Uid, GID: h.Gid, ModTime: h.ModTime.UTC()}
		switch h.Typeflag {
		case tar.TypeDir:
			f.Type = "dir"
		case tar.TypeSymlink:
			f.Type, f.Link = "symlink", h.Linkname
		case tar.TypeReg:
			f.Type, f.Size = "file", h.Size
			sum := sha256.New()
			if _, err := io.Copy(sum, tr); err != nil {
				return files, err
			}
			f.SHA256 = hex.EncodeToString(sum.Sum(nil))
		default:
			continue
		}
		files = append(files, f)
	}
}
