package volumes

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/klauspost/compress/zstd"
)

// treeState lists a folder, one line per entry, with contents hashed and times, read here
// independently of ferry's own listing.
func treeState(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	must(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		line := fmt.Sprintf("%s %o %d mtime %d.%d", p, st.Mode, st.Size, st.Mtim.Sec, st.Mtim.Nsec)
		if d.Type().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" %x", sha256.Sum256(data))
		}
		out = append(out, line)
		return nil
	}))
	return out
}

func compress(t *testing.T, plain []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf)
	must(t, err)
	_, err = enc.Write(plain)
	must(t, err)
	must(t, enc.Close())
	return buf.Bytes()
}

// changedTree is a target that holds an older version of src: every file rewritten, one extra.
func changedTree(t *testing.T, src string) string {
	t.Helper()
	stream, _ := packed(t, src)
	dst := t.TempDir()
	unpack(t, stream, dst, UnpackOptions{})
	must(t, filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && !strings.HasSuffix(p, "sparse.img") {
			must(t, os.Chmod(p, 0o644))
			err = os.WriteFile(p, []byte("the target's own version of "+filepath.Base(p)), 0o644)
		}
		return err
	}))
	must(t, os.WriteFile(filepath.Join(dst, "only-on-the-target.txt"), []byte("keep me"), 0o600))
	return dst
}

// sameArchive says whether two zstd streams decode to the same bytes.
func sameArchive(a, b []byte) (bool, error) {
	dec, err := zstd.NewReader(nil)
	if err != nil {
		return false, err
	}
	defer dec.Close()
	pa, err := dec.DecodeAll(a, nil)
	if err != nil {
		return false, err
	}
	pb, err := dec.DecodeAll(b, nil)
	if err != nil {
		return false, err
	}
	return bytes.Equal(pa, pb), nil
}

// A stored stream with one byte changed, wherever: the target keeps every file as it was.
func TestUnpackOfAFlippedStreamChangesNothing(t *testing.T) {
	src := sourceTree(t)
	stream, _ := packed(t, src)
	for _, at := range []int{len(stream) / 3, len(stream) / 2, len(stream) - 40} {
		t.Run(fmt.Sprint(at), func(t *testing.T) {
			dst := changedTree(t, src)
			before := treeState(t, dst)
			bad := bytes.Clone(stream)
			bad[at] ^= 0x01
			_, err := UnpackCompressed(context.Background(), dst, bytes.NewReader(bad), UnpackOptions{Delete: true})
			if err == nil {
				// A bit zstd's decoder ignores (a block's padding): the archive is the same, and so
				// is what was applied. Any flip that changes the archive must fail.
				if same, derr := sameArchive(stream, bad); derr == nil && same {
					t.Skipf("the flip at %d is in a bit the decoder ignores: the archive is unchanged", at)
				}
				t.Fatal("a flipped stream unpacked without error")
			}
			if after := treeState(t, dst); !slices.Equal(before, after) {
				t.Fatalf("the target changed (%v):\nbefore %q\nafter  %q", err, before, after)
			}
		})
	}
}

// tarPrefix is a tar stream of src cut after its first n entries, without the end marker.
func tarPrefix(t *testing.T, src string, n int) []byte {
	t.Helper()
	var full bytes.Buffer
	must(t, Pack(src, &full))
	tr := tar.NewReader(bytes.NewReader(full.Bytes()))
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for range n {
		h, err := tr.Next()
		must(t, err)
		must(t, tw.WriteHeader(h))
		_, err = io.Copy(tw, tr)
		must(t, err)
	}
	must(t, tw.Flush()) // no Close: no end marker
	return out.Bytes()
}

// A tar cut at an entry's boundary, in a zstd frame that is whole, is not an archive: under
// --delete it would remove what the missing entries hold.
func TestUnpackRequiresTheEndMarker(t *testing.T) {
	src := sourceTree(t)
	dst := changedTree(t, src)
	before := treeState(t, dst)
	short := compress(t, tarPrefix(t, src, 3))
	_, err := UnpackCompressed(context.Background(), dst, bytes.NewReader(short), UnpackOptions{Delete: true})
	if err == nil {
		t.Fatal("a tar without its end marker unpacked without error")
	}
	if after := treeState(t, dst); !slices.Equal(before, after) {
		t.Fatalf("the target changed (%v):\nbefore %q\nafter  %q", err, before, after)
	}
	if _, err := Index(bytes.NewReader(tarPrefix(t, src, 3))); err == nil {
		t.Fatal("Index took a tar without its end marker")
	}
}

func blocks(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	must(t, syscall.Stat(path, &st))
	return st.Blocks
}

// Sparse files are stored by their data and restored with their holes.
func TestSparseFilesRoundTrip(t *testing.T) {
	src := t.TempDir()
	const size = 64 << 20
	hole := filepath.Join(src, "all-hole.img")
	must(t, os.WriteFile(hole, nil, 0o644))
	must(t, os.Truncate(hole, size))
	mixed := filepath.Join(src, "mixed.img")
	f, err := os.Create(mixed)
	must(t, err)
	_, err = f.WriteAt([]byte("header"), 0)
	must(t, err)
	_, err = f.WriteAt([]byte("middle"), 32<<20)
	must(t, err)
	must(t, f.Truncate(size))
	must(t, f.Close())
	if blocks(t, hole) != 0 {
		t.Skip("this filesystem does not keep holes")
	}

	var tarball bytes.Buffer
	must(t, Pack(src, &tarball))
	if tarball.Len() > 1<<20 {
		t.Fatalf("the archive of two sparse files of 64 MiB is %d bytes", tarball.Len())
	}
	listing, err := Index(bytes.NewReader(tarball.Bytes()))
	must(t, err)
	sums := map[string]string{}
	for _, p := range []string{hole, mixed} {
		h := sha256.New()
		r, err := os.Open(p)
		must(t, err)
		_, err = io.Copy(h, r)
		r.Close()
		must(t, err)
		sums[filepath.Base(p)] = hex.EncodeToString(h.Sum(nil))
	}
	for _, f := range listing.Files {
		if f.Size != size || f.SHA256 != sums[f.Path] {
			t.Errorf("%s listed as %d bytes, SHA-256 %s; want %d, %s", f.Path, f.Size, f.SHA256, size, sums[f.Path])
		}
	}
	dst := t.TempDir()
	res := unpack(t, compress(t, tarball.Bytes()), dst, UnpackOptions{})
	for _, f := range res.Files {
		if f.SHA256 != sums[f.Path] || f.Size != size {
			t.Errorf("restored %s: %d bytes, SHA-256 %s", f.Path, f.Size, f.SHA256)
		}
	}
	if b := blocks(t, filepath.Join(dst, "all-hole.img")); b != 0 {
		t.Errorf("the restored all-hole file has %d blocks", b)
	}
	if b := blocks(t, filepath.Join(dst, "mixed.img")); b == 0 || b > 64 {
		t.Errorf("the restored mixed file has %d blocks", b)
	}

	// Standard tools read the format too.
	gnuTar, err := exec.LookPath("tar")
	if err != nil {
		t.Skip("no tar to check the format with")
	}
	out := t.TempDir()
	cmd := exec.Command(gnuTar, "-xf", "-", "-C", out)
	cmd.Stdin = bytes.NewReader(tarball.Bytes())
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v: %s", err, msg)
	}
	for name, sum := range sums {
		data, err := os.ReadFile(filepath.Join(out, name))
		must(t, err)
		if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != sum || len(data) != size {
			t.Errorf("tar extracted %s as %d bytes, SHA-256 %x", name, len(data), got)
		}
	}
}

// A file that changes while it is read is read again; if it changes again, or vanishes, it is
// left out, named with its reason, and the rest is kept.
func TestPackSkipsAFileThatKeepsChanging(t *testing.T) {
	for _, tc := range []struct {
		name    string
		changes int  // reads of busy.log followed by a change
		vanish  bool // the change removes it
		skipped bool
	}{
		{"changes once", 1, false, false},
		{"changes twice", 2, false, true},
		{"vanishes", 1, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := t.TempDir()
			must(t, os.WriteFile(filepath.Join(src, "a-steady.txt"), []byte("steady"), 0o644))
			must(t, os.WriteFile(filepath.Join(src, "z-steady.txt"), []byte("steady too"), 0o644))
			busy := filepath.Join(src, "busy.log")
			must(t, os.WriteFile(busy, []byte("line 1\n"), 0o644))
			reads := 0
			p := &packer{afterRead: func(rel string) {
				if rel != "busy.log" {
					return
				}
				if reads++; reads > tc.changes {
					return
				}
				if tc.vanish {
					must(t, os.Remove(busy))
					return
				}
				f, err := os.OpenFile(busy, os.O_APPEND|os.O_WRONLY, 0)
				must(t, err)
				_, err = fmt.Fprintf(f, "line %d\n", reads+1)
				must(t, err)
				must(t, f.Close())
			}}
			var tarball bytes.Buffer
			if err := p.pack(src, &tarball); err != nil {
				t.Fatalf("pack failed on a file that changes: %v", err)
			}
			listing, err := Index(bytes.NewReader(tarball.Bytes()))
			must(t, err)
			var paths []string
			for _, f := range listing.Files {
				paths = append(paths, f.Path)
				if f.Path == "busy.log" {
					want := sha256.Sum256([]byte("line 1\nline 2\n"))
					if f.SHA256 != hex.EncodeToString(want[:]) || f.Size != 14 {
						t.Errorf("busy.log packed as %+v, want its contents after the change", f)
					}
				}
			}
			wantPaths := "a-steady.txt,busy.log,z-steady.txt"
			if tc.skipped {
				wantPaths = "a-steady.txt,z-steady.txt"
				if len(listing.Skipped) != 1 || listing.Skipped[0].Path != "busy.log" || listing.Skipped[0].Reason == "" {
					t.Errorf("skipped: %+v", listing.Skipped)
				}
				t.Logf("skipped: %+v", listing.Skipped)
			} else if len(listing.Skipped) != 0 {
				t.Errorf("skipped: %+v", listing.Skipped)
			}
			if strings.Join(paths, ",") != wantPaths {
				t.Errorf("packed %v, want %s", paths, wantPaths)
			}
			// Unpacked, and with Delete, the target keeps its own copy of a skipped file.
			dst := t.TempDir()
			must(t, os.WriteFile(filepath.Join(dst, "busy.log"), []byte("the target's"), 0o644))
			unpack(t, compress(t, tarball.Bytes()), dst, UnpackOptions{Delete: true})
			got, err := os.ReadFile(filepath.Join(dst, "busy.log"))
			must(t, err)
			if tc.skipped && string(got) != "the target's" {
				t.Errorf("the target's busy.log became %q", got)
			}
		})
	}
}

// What a restore does with a stored stream that is a valid archive but not the backup's: the
// mover stages it, ferry's check against the manifest fails, Abort leaves the target as it was,
// root's time included, even under Delete.
func TestStagedArchiveIsCheckedBeforeApply(t *testing.T) {
	src := sourceTree(t)
	var full bytes.Buffer
	must(t, Pack(src, &full))
	listing, err := Index(bytes.NewReader(full.Bytes()))
	must(t, err)
	v := snapshot.Volume{Namespace: "team", Name: "data", Key: "volumes/team/data.tar.zst", Files: listing.Files}

	// A shorter archive, whole: its first entries, then the end marker.
	short := tarPrefix(t, src, 3)
	short = append(short, make([]byte, 1024)...)
	// One byte of a file's contents changed, where neither tar nor zstd would notice.
	flipped := bytes.Clone(full.Bytes())
	at := bytes.Index(flipped, []byte("contents of notebooks/train.ipynb"))
	if at < 0 {
		t.Fatal("no file contents found in the archive")
	}
	flipped[at] ^= 0x01
	for name, stream := range map[string][]byte{"shorter": short, "flipped": flipped} {
		t.Run(name, func(t *testing.T) {
			dst := changedTree(t, src)
			before := treeState(t, dst)
			st, err := StageCompressed(context.Background(), dst, bytes.NewReader(compress(t, stream)))
			must(t, err)
			err = checkStaged("b/"+v.Key, inline(v.Files), stagedEntries(t, dst, st))
			if !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), v.Key) {
				t.Fatalf("check of a staged %s archive: %v", name, err)
			}
			t.Log(err)
			must(t, Abort(dst, st))
			if after := treeState(t, dst); !slices.Equal(before, after) {
				t.Fatalf("the target changed:\n%s", strings.Join(lineChanges(before, after), "\n"))
			}
		})
	}
}

func lineChanges(before, after []string) []string {
	var out []string
	for _, l := range before {
		if !slices.Contains(after, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range after {
		if !slices.Contains(before, l) {
			out = append(out, "+ "+l)
		}
	}
	return out
}

// A staging folder a killed restore left is neither packed, listed nor kept: the next restore
// removes it, and deleting what the archive lacks does not count it.
func TestStagingFolderIsNotData(t *testing.T) {
	src := sourceTree(t)
	stream, files := packed(t, src)
	dst := t.TempDir()
	unpack(t, stream, dst, UnpackOptions{})
	left := filepath.Join(dst, StagingPrefix+"0123abcd")
	must(t, os.Mkdir(left, 0o700))
	must(t, os.WriteFile(filepath.Join(left, "1"), []byte("half a restore"), 0o600))

	listing, err := List(dst)
	must(t, err)
	if diffs, identical := compareInline(files, listing.Files, true); len(diffs) > 0 || identical != len(files) {
		t.Fatalf("the staging folder shows in the listing: %+v", diffs)
	}
	must(t, os.WriteFile(filepath.Join(dst, "notebooks", "train.ipynb"), []byte("changed"), 0o644))
	res := unpack(t, stream, dst, UnpackOptions{Delete: true})
	if len(res.Deleted) != 0 || res.Written != 1 {
		t.Errorf("deleted %v, wrote %d; want nothing deleted, one file written", res.Deleted, res.Written)
	}
	if entries, _ := filepath.Glob(filepath.Join(dst, StagingPrefix+"*")); len(entries) != 0 {
		t.Errorf("staging folders left: %v", entries)
	}
	sameTree(t, files, dst)
	// An archive naming the staging folder is refused.
	_, err = UnpackCompressed(context.Background(), t.TempDir(), bytes.NewReader(archive(t, &tar.Header{Name: StagingPrefix + "x/f", Typeflag: tar.TypeReg})), UnpackOptions{})
	if !badinput.Is(err) {
		t.Errorf("an archive writing into a staging folder: %v", err)
	}
}

// The staged list goes to ferry as the mover's output and its summary back to the mover: Apply
// of the list loaded with it restores the tree, and applying it once more finds everything in
// place. A list changed on the volume after ferry checked it is refused.
func TestStagedListSurvivesTheMover(t *testing.T) {
	src := sourceTree(t)
	stream, files := packed(t, src)
	dst := changedTree(t, src)
	st, err := StageCompressed(context.Background(), dst, bytes.NewReader(stream))
	must(t, err)
	back := overMover(t, dst, st, inline(files))
	if n, staged := len(listedFiles(t, dst, back)), len(listedFiles(t, dst, st)); n != staged || back.ListSHA256 == "" {
		t.Fatalf("loaded %d entries (sum %q), staged %d", n, back.ListSHA256, staged)
	}
	list := filepath.Join(dst, StagingPrefix+st.ID, stagedListName)
	saved, err := os.ReadFile(list)
	must(t, err)
	must(t, os.WriteFile(list, bytes.Replace(saved, []byte(`"0644"`), []byte(`"0666"`), 1), 0o600))
	if _, err := LoadStaged(dst, back, nil); !badinput.Is(err) {
		t.Errorf("a list changed after it was checked: %v", err)
	}
	must(t, os.WriteFile(list, saved, 0o600))
	res, err := Apply(context.Background(), dst, back, UnpackOptions{Owners: os.Geteuid() == 0, Delete: true})
	must(t, err)
	if len(res.Deleted) != 1 || res.Deleted[0] != "only-on-the-target.txt" {
		t.Errorf("deleted %v", res.Deleted)
	}
	sameTree(t, files, dst)
	again := unpack(t, stream, dst, UnpackOptions{Owners: os.Geteuid() == 0})
	if again.Unchanged != len(files) {
		t.Errorf("a second unpack: %d written, %d updated, %d unchanged", again.Written, again.Updated, again.Unchanged)
	}
}
