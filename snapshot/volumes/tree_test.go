package volumes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"filippo.io/age"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"github.com/ferrykube/ferry/storage/repo"
)

// treeDir makes a volume of every kind of entry Pack writes: files small and large, a sparse
// file, hard links, a symlink, a FIFO, an empty directory and a non-UTF-8 name.
func treeDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.NewChaCha8([32]byte{7})
	must(os.MkdirAll(filepath.Join(dir, "data", "empty"), 0o750))
	for i := range 20 {
		b := make([]byte, 1000+i*37)
		rng.Read(b)
		must(os.WriteFile(filepath.Join(dir, "data", "f"+strings.Repeat("x", i)), b, 0o640))
	}
	big := make([]byte, 3<<20+11)
	rng.Read(big)
	must(os.WriteFile(filepath.Join(dir, "big.bin"), big, 0o600))
	must(os.Link(filepath.Join(dir, "big.bin"), filepath.Join(dir, "big-link")))
	f, err := os.Create(filepath.Join(dir, "sparse.bin"))
	must(err)
	_, err = f.WriteAt([]byte("tail"), 5<<20)
	must(err)
	must(f.Close())
	must(os.Symlink("big.bin", filepath.Join(dir, "latest")))
	must(os.WriteFile(filepath.Join(dir, "caf\xe9"), []byte("latin-1 name"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "zero"), nil, 0o644))
	return dir
}

func testRepo(t *testing.T) (*repo.Repo, storage.Backend) {
	t.Helper()
	st, err := storage.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r, err := openRepo(context.Background(), st, repo.Options{Prefix: repo.DefaultPrefix, ChunkAverageBits: 16})
	if err != nil {
		t.Fatal(err)
	}
	return r, st
}

// chunkBackup packs dir as a chunked backup over prev, returning the tree stream and the
// writer's stats.
func chunkBackup(t *testing.T, r *repo.Repo, dir string, prev []byte) ([]byte, repo.Stats) {
	tree, st, _ := chunkBackupArchive(t, r, dir, prev)
	return tree, st
}

func chunkBackupArchive(t *testing.T, r *repo.Repo, dir string, prev []byte) ([]byte, repo.Stats, []byte) {
	t.Helper()
	ctx := context.Background()
	cw, err := r.NewWriter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var stats bytes.Buffer
	var find prevFinder
	if prev == nil {
		stats.WriteString(treeEnd + "\n")
	} else {
		hand := &handoff{hold: heldEntries}
		if err := writePrevStats(&stats, prevIterOf(t, prev), func(e treeEntry) bool { return cw.Reusable(e.Data) }, hand.sent); err != nil {
			t.Fatal(err)
		}
		find = hand.find
	}
	var archive bytes.Buffer
	if err := PackTree(dir, &stats, &archive); err != nil {
		t.Fatal(err)
	}
	var tree bytes.Buffer
	tw, _ := newTreeWriter(&tree)
	packed := bytes.Clone(archive.Bytes())
	var listed Listing
	index := newFileIndex(func(f snapshot.File) error {
		listed.Files = append(listed.Files, f)
		return nil
	})
	if err := chunkTar(ctx, &archive, cw, find, tw.add, index); err != nil {
		t.Fatal(err)
	}
	if listed.Skipped, err = index.end(); err != nil {
		t.Fatal(err)
	}
	listed.takeRoot()
	// The file list a chunked backup makes as it stores the stream is the one Index reads off it.
	indexed, err := Index(bytes.NewReader(packed))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(listed, indexed) {
		t.Fatalf("chunkTar's file list differs from Index's:\n%+v\n%+v", listed, indexed)
	}
	if err := tw.close(); err != nil {
		t.Fatal(err)
	}
	if err := cw.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return tree.Bytes(), cw.Stats(), packed
}

func prevIterOf(t testing.TB, tree []byte) *prevIter {
	t.Helper()
	lines, err := newTreeLines(bytes.NewReader(tree))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lines.close)
	return &prevIter{lines: lines}
}

func entriesOf(t *testing.T, tree []byte) map[string]treeEntry {
	t.Helper()
	m := map[string]treeEntry{}
	if err := readTree(bytes.NewReader(tree), func(e treeEntry) error {
		if e.Path != "" {
			m[string(e.Path)] = e
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return m
}

func untreeBytes(t *testing.T, r *repo.Repo, tree []byte) ([]byte, error) {
	t.Helper()
	var out bytes.Buffer
	_, err := untree(context.Background(), bytes.NewReader(tree), r, &out, func() error { return nil }, nil)
	return out.Bytes(), err
}

// TestTreeRegeneratesTheArchive: the archive regenerated from a tree and its chunks is the one
// the mover wrote, byte for byte, and lists the same entries as Pack's.
func TestTreeRegeneratesTheArchive(t *testing.T) {
	dir := treeDir(t)
	r, _ := testRepo(t)
	tree, _, packed := chunkBackupArchive(t, r, dir, nil)
	archive := bytes.NewBuffer(packed)
	got, err := untreeBytes(t, r, tree)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, archive.Bytes()) {
		i := 0
		for i < len(got) && i < archive.Len() && got[i] == archive.Bytes()[i] {
			i++
		}
		t.Fatalf("regenerated archive of %d bytes differs from the mover's %d at %d: %q vs %q", len(got), archive.Len(), i, got[i-100:i+20], archive.Bytes()[i-100:i+20])
	}
	var plain bytes.Buffer
	if err := Pack(dir, &plain); err != nil {
		t.Fatal(err)
	}
	want, err := Index(&plain)
	if err != nil {
		t.Fatal(err)
	}
	have, err := Index(bytes.NewReader(got))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(have, want) {
		t.Errorf("entries of the regenerated archive:\n%+v\nwant Pack's:\n%+v", have, want)
	}
}

// TestTreeIncremental: a second backup reads only the changed file, reuses the others' chunks,
// uploads little, and its archive lists the volume as it is now.
func TestTreeIncremental(t *testing.T) {
	dir := treeDir(t)
	r, _ := testRepo(t)
	first, st1 := chunkBackup(t, r, dir, nil)
	if st1.NewBytes == 0 {
		t.Fatalf("first backup stored nothing: %+v", st1)
	}
	changed := filepath.Join(dir, "data", "fxxx")
	if err := os.WriteFile(changed, []byte("new contents"), 0o640); err != nil {
		t.Fatal(err)
	}
	var seen []string
	var stats bytes.Buffer
	if err := writePrevStats(&stats, prevIterOf(t, first), func(treeEntry) bool { return true }, func(treeEntry) {}); err != nil {
		t.Fatal(err)
	}
	p := &packer{stat: true, prev: newStatReader(&stats).cursor.find}
	p.afterRead = func(rel string) { seen = append(seen, rel) }
	if err := p.pack(dir, io.Discard); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0] != "data/fxxx" {
		t.Errorf("the mover read %q; want only the changed data/fxxx", seen)
	}

	second, st2 := chunkBackup(t, r, dir, first)
	if st2.NewBytes > 100 || st2.Bytes != st1.Bytes-int64(1000+3*37)+12 || st2.StoredBytes > 200 {
		t.Errorf("second backup: %+v (first %+v): want only the 12 changed bytes new, every byte counted", st2, st1)
	}
	got, err := untreeBytes(t, r, second)
	if err != nil {
		t.Fatal(err)
	}
	var plain bytes.Buffer
	if err := Pack(dir, &plain); err != nil {
		t.Fatal(err)
	}
	want, _ := Index(&plain)
	have, err := Index(bytes.NewReader(got))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(have, want) {
		t.Errorf("entries of the second backup's archive:\n%+v\nwant the volume's now:\n%+v", have, want)
	}
}

// TestTreeOfAnUnchangedVolumeIsTheSame: reading a volume changes its access times (a backup's own
// walk does, on the usual relatime mounts), and nothing else; the next backup's tree must be the
// same, byte for byte, or a warm migration restores an unchanged claim again in full.
func TestTreeOfAnUnchangedVolumeIsTheSame(t *testing.T) {
	dir := treeDir(t)
	r, _ := testRepo(t)
	first, _ := chunkBackup(t, r, dir, nil)
	second, _ := chunkBackup(t, r, dir, first)
	if !bytes.Equal(first, second) {
		a, b := entryLines(t, first), entryLines(t, second)
		for i := range min(len(a), len(b)) {
			if a[i] != b[i] {
				t.Fatalf("the trees of two backups of an unchanged volume differ, first at line %d:\n%s\n%s", i, a[i], b[i])
			}
		}
		t.Fatalf("the trees of two backups of an unchanged volume differ: %d and %d lines", len(a), len(b))
	}
}

// entryLines are a tree's entries with their headers' PAX records in plain text.
func entryLines(t *testing.T, tree []byte) []string {
	t.Helper()
	var out []string
	if err := readTree(bytes.NewReader(tree), func(e treeEntry) error {
		out = append(out, fmt.Sprintf("%s stat %q sha256 %s head %q", e.Path, e.Stat, e.SHA256, bytes.ReplaceAll(e.Head, []byte{0}, nil)))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTreeTamperedChunkRefused: a chunk whose bytes changed in storage fails the regeneration
// before the end marker, so the mover never sees a whole archive.
func TestTreeTamperedChunkRefused(t *testing.T) {
	dir := treeDir(t)
	r, st := testRepo(t)
	tree, _ := chunkBackup(t, r, dir, nil)
	ctx := context.Background()
	var packs []string
	st.List(ctx, repo.DefaultPrefix+"packs/", func(o storage.ObjectInfo) error {
		packs = append(packs, o.Key)
		return nil
	})
	if len(packs) == 0 {
		t.Fatal("no packs")
	}
	for _, key := range packs {
		rc, err := st.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(rc)
		rc.Close()
		data[len(data)/2] ^= 1
		if err := st.Put(ctx, key, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	reopened, err := repo.Open(ctx, st, repo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := untreeBytes(t, reopened, tree)
	if !errors.Is(err, snapshot.ErrCorrupt) {
		t.Fatalf("untree of tampered chunks: %v; want ErrCorrupt", err)
	}
	// The mover staging it fails, and leaves nothing behind.
	target := t.TempDir()
	if _, err := Stage(ctx, target, bytes.NewReader(out)); err == nil {
		t.Errorf("Stage of the archive from tampered chunks succeeded")
	}
	if left, _ := os.ReadDir(target); len(left) != 0 {
		t.Errorf("Stage of the archive from tampered chunks left %v", left)
	}
	if _, ierr := Index(bytes.NewReader(out)); ierr == nil || errors.Is(ierr, io.ErrUnexpectedEOF) {
		t.Errorf("what was written before the error: %v; want a reader to fail on it, not wait for more", ierr)
	}
}

// TestTreeUnverifiedEndsWithoutEndMarker: a tree stream that fails its check against the
// manifest gives no end marker.
func TestTreeUnverifiedEndsWithoutEndMarker(t *testing.T) {
	dir := treeDir(t)
	r, _ := testRepo(t)
	tree, _ := chunkBackup(t, r, dir, nil)
	var out bytes.Buffer
	bad := errors.New("does not match the manifest")
	_, err := untree(context.Background(), bytes.NewReader(tree), r, &out, func() error { return bad }, nil)
	if !errors.Is(err, bad) {
		t.Fatalf("untree: %v", err)
	}
	if _, ierr := Index(bytes.NewReader(out.Bytes())); ierr == nil || errors.Is(ierr, io.ErrUnexpectedEOF) {
		t.Errorf("Index of the output: %v; want it to fail at the block after the last entry, not wait for more", ierr)
	}
}

func TestPackTreeNeedsItsEndLine(t *testing.T) {
	err := PackTree(t.TempDir(), strings.NewReader(`{"path":"a","stat":"1 2 3 4"}`+"\n"), io.Discard)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("PackTree without the end line: %v", err)
	}
}

// TestTreeEncrypted: a backup encrypted to recipients writes to the repository of its set, with
// no identity; reading it back needs the identity, and gives the archive the mover wrote.
func TestTreeEncrypted(t *testing.T) {
	ctx := context.Background()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	st, err := storage.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	recipients := []string{id.Recipient().String()}
	prefix := RepoPrefix(recipients)
	if prefix == repo.DefaultPrefix || !strings.HasPrefix(prefix, "metadata/ferry/") {
		t.Fatalf("RepoPrefix of recipients: %q", prefix)
	}
	w, err := openRepo(ctx, st, repo.Options{Prefix: prefix, Recipients: recipients, ChunkAverageBits: 16})
	if err != nil {
		t.Fatal(err)
	}
	dir := treeDir(t)
	tree, _, packed := chunkBackupArchive(t, w, dir, nil)
	if _, err := untreeBytes(t, w, tree); !errors.Is(err, repo.ErrNoIdentity) {
		t.Errorf("untree without the identity: %v; want ErrNoIdentity", err)
	}
	r, err := repo.Open(ctx, st, repo.Options{Prefix: prefix, Identities: []age.Identity{id}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := untreeBytes(t, r, tree)
	if err != nil || !bytes.Equal(got, packed) {
		t.Fatalf("untree with the identity: %v, %d bytes; want the mover's %d", err, len(got), len(packed))
	}
}

// TestTreeMissingPackIsCorrupt: a pack gone from storage fails the archive as a damaged backup.
func TestTreeMissingPackIsCorrupt(t *testing.T) {
	r, st := testRepo(t)
	tree, _ := chunkBackup(t, r, treeDir(t), nil)
	ctx := context.Background()
	var packs []string
	st.List(ctx, repo.DefaultPrefix+"packs/", func(o storage.ObjectInfo) error {
		packs = append(packs, o.Key)
		return nil
	})
	for _, key := range packs {
		if err := st.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := untreeBytes(t, r, tree); !errors.Is(err, snapshot.ErrCorrupt) {
		t.Fatalf("untree without its packs: %v; want ErrCorrupt", err)
	}
}

// countingStore counts the objects a reader opens under packs/ and the bytes it reads of them.
type countingStore struct {
	storage.Backend
	gets, bytes atomic.Int64
}

func (c *countingStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := c.Backend.Get(ctx, key)
	if err != nil || !strings.Contains(key, "/packs/") {
		return rc, err
	}
	c.gets.Add(1)
	return struct {
		io.Reader
		io.Closer
	}{io.TeeReader(rc, addWriter{&c.bytes}), rc}, nil
}

type addWriter struct{ n *atomic.Int64 }

func (w addWriter) Write(p []byte) (int, error) { w.n.Add(int64(len(p))); return len(p), nil }

// TestTreeReadsEachPackOnce: a volume of many small files, whose chunks share a few packs, is
// regenerated with each pack read once, front to back: a restore's requests and bytes from the
// storage are those of the packs, not one request (and a pack's head) per file.
func TestTreeReadsEachPackOnce(t *testing.T) {
	dir := t.TempDir()
	rng := rand.NewChaCha8([32]byte{9})
	for i := range 2000 {
		b := make([]byte, 1024)
		rng.Read(b)
		sub := filepath.Join(dir, fmt.Sprintf("%02d", i%20))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("%04d", i)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, st := testRepo(t)
	tree, _ := chunkBackup(t, r, dir, nil)

	counted := &countingStore{Backend: st}
	reopened, err := repo.Open(context.Background(), counted, repo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := untreeBytes(t, reopened, tree); err != nil {
		t.Fatal(err)
	}
	var packs, packBytes int64
	st.List(context.Background(), repo.DefaultPrefix+"packs/", func(o storage.ObjectInfo) error {
		packs++
		packBytes += o.Size
		return nil
	})
	if got := counted.gets.Load(); got > packs {
		t.Errorf("regenerating 2,000 files opened packs %d times; want each of the %d packs once", got, packs)
	}
	if got := counted.bytes.Load(); got > packBytes {
		t.Errorf("regenerating 2,000 files read %d bytes of packs; want at most their %d", got, packBytes)
	}
}
