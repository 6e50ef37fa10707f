package volumes

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// packedTree is Pack's stream of a small real tree: files (one with a run of zeros, as sparse
// files are restored), a directory, an empty file, a symlink.
func packedTree(f *testing.F) []byte {
	dir := f.TempDir()
	for name, data := range map[string]string{"a.txt": "alpha\n", "d/b.bin": "\x00\x01" + strings.Repeat("\x00", 9000) + "z", "d/e/empty": ""} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			f.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o640); err != nil {
			f.Fatal(err)
		}
	}
	if err := os.Symlink("../a.txt", filepath.Join(dir, "d", "link")); err != nil {
		f.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Pack(dir, &buf); err != nil {
		f.Fatal(err)
	}
	return buf.Bytes()
}

// entryNames are the names of the entries a tar reader finds in data, up to its first error.
func entryNames(data []byte) []string {
	var out []string
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err != nil {
			return out
		}
		out = append(out, h.Name, strings.TrimSuffix(path.Clean(h.Name), "/"))
	}
}

// FuzzUnpack feeds tar streams to Unpack: it never panics, writes nothing outside its
// directory, and every error names the archive or the entry it failed on.
func FuzzUnpack(f *testing.F) {
	stream := packedTree(f)
	f.Add(stream)
	f.Add(stream[:len(stream)/2])
	f.Add(stream[:len(stream)-1024]) // without its end marker
	var evil bytes.Buffer
	tw := tar.NewWriter(&evil)
	tw.WriteHeader(&tar.Header{Name: "up/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "up/out", Typeflag: tar.TypeSymlink, Linkname: "../../.."})
	tw.WriteHeader(&tar.Header{Name: "up/out/escaped", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
	tw.Write([]byte("x"))
	tw.WriteHeader(&tar.Header{Name: "../x", Typeflag: tar.TypeReg, Size: 0})
	tw.Close()
	f.Add(evil.Bytes())
	var links bytes.Buffer
	tw = tar.NewWriter(&links)
	tw.WriteHeader(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc"})
	tw.WriteHeader(&tar.Header{Name: "hard", Typeflag: tar.TypeLink, Linkname: "l/passwd"})
	tw.WriteHeader(&tar.Header{Name: "up", Typeflag: tar.TypeLink, Linkname: "../../x"})
	tw.WriteHeader(&tar.Header{Name: "p", Typeflag: tar.TypeFifo, Mode: 0o600})
	tw.WriteHeader(&tar.Header{Name: "p/x", Typeflag: tar.TypeReg})
	tw.Close()
	f.Add(links.Bytes())

	f.Fuzz(func(t *testing.T, data []byte) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "vol")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		_, err := Unpack(context.Background(), dir, bytes.NewReader(data), UnpackOptions{})
		if entries, _ := os.ReadDir(parent); len(entries) != 1 {
			t.Fatalf("unpack wrote beside its directory: %v", entries)
		}
		if err == nil {
			return
		}
		msg := err.Error()
		if strings.Contains(msg, "archive") {
			return
		}
		for _, name := range entryNames(data) {
			if name != "" && name != "." && strings.Contains(msg, name) {
				return
			}
		}
		t.Fatalf("the error names neither the archive nor an entry: %v", err)
	})
}
