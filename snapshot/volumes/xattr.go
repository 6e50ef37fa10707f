package volumes

import (
	"archive/tar"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// xattrRecord prefixes the PAX record of each extended attribute of an entry, as GNU tar, star
// and Go's archive/tar write them.
const xattrRecord = "SCHILY.xattr."

// movedXattr says whether an extended attribute moves with its file or directory: a user's
// (user.*), its POSIX ACLs and its file capabilities. The rest are the node's or the file
// system's: SELinux labels and other security modules' (the target labels its own), trusted.*
// (a file system's own records, which only CAP_SYS_ADMIN reads), NFSv4 ACLs (an NFS server's
// view of its own ACLs, which no other file system takes).
func movedXattr(name string) bool {
	switch name {
	case "system.posix_acl_access", "system.posix_acl_default", "security.capability":
		return true
	}
	return strings.HasPrefix(name, "user.")
}

// xattrSource reads the extended attributes of one file: through its open descriptor
// (fdXattrs) or its path (pathXattrs, which does not follow a symlink).
type xattrSource struct {
	list func(dest []byte) (int, error)
	get  func(name string, dest []byte) (int, error)
}

func fdXattrs(fd int) xattrSource {
	return xattrSource{
		list: func(dest []byte) (int, error) { return unix.Flistxattr(fd, dest) },
		get:  func(name string, dest []byte) (int, error) { return unix.Fgetxattr(fd, name, dest) },
	}
}

func pathXattrs(path string) xattrSource {
	return xattrSource{
		list: func(dest []byte) (int, error) { return unix.Llistxattr(path, dest) },
		get:  func(name string, dest []byte) (int, error) { return unix.Lgetxattr(path, name, dest) },
	}
}

// readXattrs adds to h the extended attributes of the open file or directory fd that move.
func readXattrs(fd int, h *tar.Header) error { return fdXattrs(fd).read(h) }

// errXattrsTooLarge is read's error for a file whose extended attributes a tar header cannot
// hold (archive/tar takes 1 MiB of PAX records; XFS allows more).
var errXattrsTooLarge = errors.New("its extended attributes exceed what a tar header holds (512 KiB)")

// read adds to h the file's extended attributes that move. A file system without them
// (ENOTSUP) has none.
func (x xattrSource) read(h *tar.Header) error {
	names, err := x.names()
	if err != nil {
		return err
	}
	total := 0
	for _, name := range names {
		value, err := x.value(name)
		if errors.Is(err, unix.ENODATA) {
			continue // removed since it was listed
		}
		if err != nil {
			return fmt.Errorf("extended attribute %s: %w", name, err)
		}
		if total += len(name) + len(value); total > 512<<10 {
			return errXattrsTooLarge
		}
		if h.PAXRecords == nil {
			h.PAXRecords = map[string]string{}
		}
		h.PAXRecords[xattrRecord+name] = string(value)
	}
	return nil
}

// names lists the file's extended attributes that move, sorted.
func (x xattrSource) names() ([]string, error) {
	for {
		size, err := x.list(nil)
		if errors.Is(err, unix.ENOTSUP) || size == 0 && err == nil {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("extended attributes: %w", err)
		}
		buf := make([]byte, size)
		n, err := x.list(buf)
		if errors.Is(err, unix.ERANGE) || err == nil && n > len(buf) {
			continue // one was added since
		}
		if err != nil {
			return nil, fmt.Errorf("extended attributes: %w", err)
		}
		var names []string
		for _, name := range bytes.Split(buf[:n], []byte{0}) {
			// Left out: a name that is no UTF-8, which the listing (JSON) cannot hold, and one
			// with "=", which no PAX record's key may hold (names are words by custom).
			if len(name) > 0 && movedXattr(string(name)) && utf8.Valid(name) && !bytes.ContainsRune(name, '=') {
				names = append(names, string(name))
			}
		}
		slices.Sort(names)
		return names, nil
	}
}

func (x xattrSource) value(name string) ([]byte, error) {
	for {
		size, err := x.get(name, nil)
		if err != nil {
			return nil, err
		}
		buf := make([]byte, size)
		n, err := x.get(name, buf)
		if errors.Is(err, unix.ERANGE) || err == nil && n > len(buf) {
			continue // it grew since
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}

// xattrsOf is a listing's record of h's extended attributes: name -> value in base64 (values
// are bytes, names text); nil for none.
func xattrsOf(h *tar.Header) map[string]string {
	var out map[string]string
	for k, v := range h.PAXRecords {
		if name, ok := strings.CutPrefix(k, xattrRecord); ok && movedXattr(name) {
			if out == nil {
				out = map[string]string{}
			}
			out[name] = base64.StdEncoding.EncodeToString([]byte(v))
		}
	}
	return out
}

// withXattrs puts a listing's extended attributes (xattrsOf's) back into h's PAX records.
func withXattrs(h *tar.Header, xattrs map[string]string) error {
	for name, v := range xattrs {
		value, err := base64.StdEncoding.DecodeString(v)
		if err != nil || !movedXattr(name) {
			return fmt.Errorf("extended attribute %q: not one ferry moves, or its value is not base64", name)
		}
		if h.PAXRecords == nil {
			h.PAXRecords = map[string]string{}
		}
		h.PAXRecords[xattrRecord+name] = string(value)
	}
	return nil
}

// sameXattrs says whether fd has exactly h's extended attributes among those that move.
func sameXattrs(fd int, h *tar.Header) (bool, error) {
	have := &tar.Header{}
	if err := readXattrs(fd, have); err != nil {
		return false, err
	}
	return maps.Equal(xattrsOf(have), xattrsOf(h)), nil
}

// setXattrs gives fd exactly h's extended attributes among those that move: it removes the
// others and sets each of h's that differs. Each is tried, whatever the others do (a capability
// the mover may not set leaves the ACLs set); the error is the first's.
func setXattrs(fd int, h *tar.Header) error {
	have := &tar.Header{}
	if err := readXattrs(fd, have); err != nil {
		return err
	}
	var first error
	for _, k := range slices.Sorted(maps.Keys(have.PAXRecords)) {
		if _, keep := h.PAXRecords[k]; !keep {
			name := strings.TrimPrefix(k, xattrRecord)
			if err := unix.Fremovexattr(fd, name); err != nil && !errors.Is(err, unix.ENODATA) && first == nil {
				first = fmt.Errorf("extended attribute %s: %w", name, err)
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(h.PAXRecords)) {
		name, ok := strings.CutPrefix(k, xattrRecord)
		if v, had := have.PAXRecords[k]; !ok || !movedXattr(name) || had && v == h.PAXRecords[k] {
			continue
		}
		if err := unix.Fsetxattr(fd, name, []byte(h.PAXRecords[k]), 0); err != nil && first == nil {
			first = fmt.Errorf("extended attribute %s: %w", name, err)
		}
	}
	return first
}
