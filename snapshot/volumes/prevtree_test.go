package volumes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"filippo.io/age"
	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/klauspost/compress/zstd"

	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage/repo"
)

// TestWalkCompareIsWalkOrder: walkCompare orders paths as filepath.WalkDir visits them, which is
// not the order of the bytes ("a.txt" sorts before "a/b", and is walked after it).
func TestWalkCompareIsWalkOrder(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"a/b", "a/b.c/d", "a/b-c", "a.txt", "a-b", "a b", "ab/c", "a/bc", "b", "a0/x", "\xff"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var walked []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if rel, _ := filepath.Rel(dir, path); rel != "." {
			walked = append(walked, filepath.ToSlash(rel))
		}
		return err
	})
	sorted := slices.Clone(walked)
	slices.Reverse(sorted)
	slices.SortFunc(sorted, walkCompare)
	if !slices.Equal(sorted, walked) {
		t.Errorf("sorted by walkCompare:\n%q\nwalked:\n%q", sorted, walked)
	}
}

// treeOf writes entries as a tree stream.
func treeOf(t *testing.T, entries ...treeEntry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw, _ := newTreeWriter(&b)
	for _, e := range entries {
		tw.add(e)
	}
	if err := tw.close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestTreeLinesWithoutHeads: read without its Head, an entry has every other field, and its line,
// written as it is, makes the same tree as the entry read whole.
func TestTreeLinesWithoutHeads(t *testing.T) {
	entries := []treeEntry{
		{Head: bytes.Repeat([]byte{7}, 1024), Data: []repo.ChunkRef{{ID: repo.ID{1, 2}, Size: 5}}, DataBytes: 5, Path: "a", Stat: "1", Size: 5, SHA256: "ab"},
		{Head: []byte("end")},
	}
	tree := treeOf(t, entries...)
	lines, err := newTreeLines(bytes.NewReader(tree))
	if err != nil {
		t.Fatal(err)
	}
	defer lines.close()
	lines.noHeads = true
	var again []treeEntry
	for {
		e, ok, err := lines.next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if e.Head != nil || e.line == nil {
			t.Fatalf("entry %q: head %d bytes, line %d bytes; want no head, and the line", e.Path, len(e.Head), len(e.line))
		}
		if want := entries[len(again)]; e.Path != want.Path || e.Stat != want.Stat || e.Size != want.Size || e.SHA256 != want.SHA256 ||
			e.DataBytes != want.DataBytes || !slices.Equal(e.Data, want.Data) {
			t.Fatalf("entry %+v, want %+v", e, want)
		}
		again = append(again, e)
	}
	if got := treeOf(t, again...); !bytes.Equal(got, tree) {
		t.Error("the lines written as they are make another tree")
	}
}

// TestPrevIterTakesTheLastOfANameAndStopsOutOfOrder: of consecutive entries of a path the last
// counts (a SkippedRecord entry, of no stat, hides the file), and a path out of walk order ends
// what is taken, in the mover's list and in ferry's lookups alike.
func TestPrevIterTakesTheLastOfANameAndStopsOutOfOrder(t *testing.T) {
	tree := treeOf(t,
		treeEntry{Path: "a/x", Stat: "1", Size: 1, SHA256: "a1"},
		treeEntry{Path: "a/x", Stat: "2", Size: 2, SHA256: "a2"},
		treeEntry{Head: []byte("dir")},
		treeEntry{Path: "a.txt", Stat: "3", SHA256: "t"},
		treeEntry{Path: "b", Stat: "4", SHA256: "b"},
		treeEntry{Path: "b", Stat: ""},
		treeEntry{Path: "c", Stat: "5", SHA256: "c"},
		treeEntry{Path: "bb", Stat: "6", SHA256: "bb"}, // out of order
		treeEntry{Path: "d", Stat: "7", SHA256: "d"},
		treeEntry{Head: []byte("end")},
	)
	var stats bytes.Buffer
	var sent []string
	if err := writePrevStats(&stats, prevIterOf(t, tree), func(treeEntry) bool { return true }, func(e treeEntry) { sent = append(sent, string(e.Path)) }); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a/x", "a.txt", "c"}; !slices.Equal(sent, want) {
		t.Errorf("entries sent: %q, want those of the stats written, %q", sent, want)
	}
	want := `{"path":"a/x","stat":"2","size":2,"sha256":"a2"}
{"path":"a.txt","stat":"3","size":0,"sha256":"t"}
{"path":"c","stat":"5","size":0,"sha256":"c"}
end
`
	if stats.String() != want {
		t.Errorf("stats:\n%s\nwant:\n%s", stats.String(), want)
	}
	find := prevIterOf(t, tree).finder()
	for _, tc := range []struct {
		name, stat string
		ok         bool
	}{{"a/x", "2", true}, {"a/x", "2", true}, {"a.txt", "3", true}, {"b", "", true}, {"bb", "", false}, {"c", "5", true}, {"d", "", false}} {
		e, ok, err := find(tc.name)
		if err != nil || ok != tc.ok || e.Stat != tc.stat {
			t.Errorf("find(%q) = %+v, %v, %v; want stat %q, %v", tc.name, e, ok, err, tc.stat, tc.ok)
		}
	}
	// Asked out of walk order: not found, and the cursor stays where it was.
	find = prevIterOf(t, tree).finder()
	if _, ok, _ := find("c"); !ok {
		t.Fatal("c not found")
	}
	if _, ok, _ := find("a/x"); ok {
		t.Error("a/x found after c")
	}
}

// incremental backs dir up with packChunks over the previous tree prev, as streamTree does with
// the mover in the pod, writes the new tree stream to out and returns how many files it took from
// the previous tree.
func incremental(t testing.TB, cw *repo.Writer, dir string, prev []byte, out io.Writer, list func(snapshot.File) error) int {
	t.Helper()
	return incrementalHolding(t, cw, dir, prev, out, list, heldEntries)
}

// incrementalHolding is incremental with hold as previous.hold.
func incrementalHolding(t testing.TB, cw *repo.Writer, dir string, prev []byte, out io.Writer, list func(snapshot.File) error, hold int) int {
	t.Helper()
	tw, _ := newTreeWriter(out)
	var feed *previous
	if prev != nil {
		feed = &previous{iter: prevIterOf(t, prev), hold: hold, reopen: func() (*prevIter, error) { return prevIterOf(t, prev), nil }}
	}
	pack := func(stdin io.Reader, stdout io.Writer) error { return PackTree(dir, stdin, stdout) }
	_, reused, err := packChunks(context.Background(), cw, feed, pack, tw.add, list)
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.close(); err != nil {
		t.Fatal(err)
	}
	return reused.files
}

func smallFiles(t testing.TB, dir string, n int) {
	t.Helper()
	b := make([]byte, 1024)
	for i := range n {
		sub := filepath.Join(dir, fmt.Sprintf("d%03d", i/1000))
		if i%1000 == 0 {
			if err := os.MkdirAll(sub, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		copy(b, fmt.Sprintf("file %d", i))
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%05d", i)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestIncrementalHeapDoesNotGrowWithFiles: the heap an incremental backup holds (ferry's side
// and the mover's, both here), measured after a collection as the last file is listed, grows by
// far less than an entry per file of the previous tree: it is streamed, not held. Holding it
// took about 3 KiB a file.
func TestIncrementalHeapDoesNotGrowWithFiles(t *testing.T) {
	small, large := 1500, 4500
	if !testing.Short() {
		small, large = 5000, 50000
	}
	live := func(n int) int64 {
		dir := t.TempDir()
		smallFiles(t, dir, n)
		r, _ := testRepo(t)
		ctx := context.Background()
		cw, err := r.NewWriter(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var first bytes.Buffer
		incremental(t, cw, dir, nil, &first, func(snapshot.File) error { return nil })
		if err := cw.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if cw, err = r.NewWriter(ctx); err != nil {
			t.Fatal(err)
		}
		defer cw.Close(ctx)
		var base, held runtime.MemStats
		runtime.GC()
		runtime.GC() // and the pools the first backup left
		runtime.ReadMemStats(&base)
		files := 0
		reused := incremental(t, cw, dir, first.Bytes(), io.Discard, func(f snapshot.File) error {
			if files++; files == n {
				runtime.GC()
				runtime.ReadMemStats(&held)
			}
			return nil
		})
		if reused != n {
			t.Fatalf("%d files unchanged, %d taken from the previous tree", n, reused)
		}
		return int64(held.HeapAlloc) - int64(base.HeapAlloc)
	}
	a, b := live(small), live(large)
	perFile := (float64(b) - float64(a)) / float64(large-small)
	t.Logf("heap held by an incremental backup: %d KiB at %d files, %d KiB at %d files: %.0f bytes a file", a>>10, small, b>>10, large, perFile)
	if perFile > 100 {
		t.Errorf("the heap grows by %.0f bytes a file of the previous tree; want it streamed", perFile)
	}
}

// TestPruneChunksNeedsTheIdentityOfEncryptedRepos: the storage's repositories are found by
// listing, the encrypted ones too, and a prune without an identity refuses them as bad input
// before it prunes any.
func TestPruneChunksNeedsTheIdentityOfEncryptedRepos(t *testing.T) {
	ctx := context.Background()
	_, st := testRepo(t)
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	recipients := []string{id.Recipient().String()}
	if _, err := repo.Init(ctx, st, repo.Options{Prefix: RepoPrefix(recipients), Recipients: recipients}); err != nil {
		t.Fatal(err)
	}
	repos, err := ChunkRepos(ctx, st)
	if err != nil || len(repos) != 2 || repos[repo.DefaultPrefix] || !repos[RepoPrefix(recipients)] {
		t.Fatalf("ChunkRepos: %v, %v; want %s unencrypted and %s encrypted", repos, err, repo.DefaultPrefix, RepoPrefix(recipients))
	}
	if _, err := PruneChunks(ctx, st, nil); !badinput.Is(err) || !errors.Is(err, snapshot.ErrNoIdentity) {
		t.Errorf("PruneChunks without an identity: %v; want bad input matching snapshot.ErrNoIdentity (cmd/ferry names the flag)", err)
	}
	res, err := PruneChunks(ctx, st, []age.Identity{id})
	if err != nil || res == nil {
		t.Errorf("PruneChunks with the identity: %+v, %v", res, err)
	}
}

// TestPreviousTreeThatCannotBeContinuedFrom: a previous tree that does not read, or does not hold
// what the mover found unchanged, fails the stream with errPreviousTree, which capture answers by
// reading every file (streamTree without continueFrom) instead of failing the backup.
func TestPreviousTreeThatCannotBeContinuedFrom(t *testing.T) {
	dir := treeDir(t)
	r, _ := testRepo(t)
	first, _ := chunkBackup(t, r, dir, nil)
	var altered []treeEntry
	if err := readTree(bytes.NewReader(first), func(e treeEntry) error {
		if e.SHA256 != "" {
			e.SHA256 = strings.Repeat("0", 64)
		}
		altered = append(altered, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var garbage bytes.Buffer
	enc, _ := zstd.NewWriter(&garbage)
	enc.Write([]byte("not a tree line\n"))
	enc.Close()
	for name, take := range map[string][]byte{"a tree that does not hold the unchanged files": treeOf(t, altered...), "a tree that does not read": garbage.Bytes()} {
		t.Run(name, func(t *testing.T) {
			cw, err := r.NewWriter(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer cw.Close(context.Background())
			feed := prevIterOf(t, first)
			if name == "a tree that does not read" {
				feed = prevIterOf(t, take)
			}
			tw, _ := newTreeWriter(io.Discard)
			pack := func(stdin io.Reader, stdout io.Writer) error { return PackTree(dir, stdin, stdout) }
			// Holding none, every entry is read again: from the altered tree.
			prev := &previous{iter: feed, reopen: func() (*prevIter, error) { return prevIterOf(t, take), nil }}
			_, _, err = packChunks(context.Background(), cw, prev, pack, tw.add, func(snapshot.File) error { return nil })
			if !errors.Is(err, errPreviousTree) {
				t.Fatalf("packChunks: %v, want an error matching errPreviousTree", err)
			}
		})
	}
}

// TestHandoffThatOverflowsReadsTheTreeAgain: a backup that holds fewer of the entries sent than
// the mover is behind the stats by reads those it dropped from the previous tree again, and makes
// the same tree, taking the same files unchanged, as one that holds them all.
func TestHandoffThatOverflowsReadsTheTreeAgain(t *testing.T) {
	dir := t.TempDir()
	const files = 600
	smallFiles(t, dir, files)
	r, _ := testRepo(t)
	ctx := context.Background()
	backup := func(prev []byte, hold int) ([]byte, int) {
		t.Helper()
		cw, err := r.NewWriter(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		n := incrementalHolding(t, cw, dir, prev, &out, func(snapshot.File) error { return nil }, hold)
		if err := cw.Close(ctx); err != nil {
			t.Fatal(err)
		}
		return out.Bytes(), n
	}
	first, _ := backup(nil, heldEntries)
	changed := 0
	for i := 0; i < files; i += 7 {
		p := filepath.Join(dir, fmt.Sprintf("d%03d", i/1000), fmt.Sprintf("f%05d", i))
		if err := os.WriteFile(p, []byte(fmt.Sprintf("changed %d", i)), 0o644); err != nil {
			t.Fatal(err)
		}
		changed++
	}
	whole, unchanged := backup(first, heldEntries)
	if unchanged != files-changed {
		t.Fatalf("holding every entry: %d files unchanged, want %d", unchanged, files-changed)
	}
	for _, hold := range []int{0, 1, 100} {
		tree, n := backup(first, hold)
		if n != unchanged {
			t.Errorf("holding %d entries: %d files unchanged, want %d", hold, n, unchanged)
		}
		if got, want := entriesOf(t, tree), entriesOf(t, whole); !reflect.DeepEqual(got, want) {
			t.Errorf("holding %d entries: the tree differs from the one holding them all", hold)
		}
	}
}
