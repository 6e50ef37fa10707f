package volumes

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRestoreAfterRestoreSendsWhatChanged: a chunked volume restored onto a claim that a restore
// of an earlier backup left as that backup holds it (a warm run's round before) is sent only the
// files that changed since: the others go as kept entries, which the mover checks on the claim by
// their SHA-256. The claim then holds the source's tree, by an independent walk. A kept file that
// differs on the claim (same size and time, other bytes) fails the stage before anything is
// applied, and the claim is as it was.
func TestRestoreAfterRestoreSendsWhatChanged(t *testing.T) {
	ctx := context.Background()
	src := treeDir(t)
	r, _ := testRepo(t)
	first, _ := chunkBackup(t, r, src, nil)
	target := t.TempDir()
	opts := UnpackOptions{Owners: os.Geteuid() == 0, Delete: true}
	// restore sends tree (the files base has as tree has them as kept entries) to the mover on
	// target, which stages it, has it checked against the backup's list, and applies it.
	restore := func(tree, base []byte) (int64, error) {
		t.Helper()
		var whole bytes.Buffer
		_, err := untree(ctx, bytes.NewReader(tree), r, &whole, func() error { return nil }, nil)
		must(t, err)
		backup, err := Index(&whole)
		must(t, err)
		var iter *prevIter
		if base != nil {
			iter = prevIterOf(t, base)
		}
		var archive bytes.Buffer
		sent, err := untree(ctx, bytes.NewReader(tree), r, &archive, func() error { return nil }, iter)
		must(t, err)
		st, err := Stage(ctx, target, &archive)
		if err != nil {
			return sent, err
		}
		appliedOverMover(t, target, overMover(t, target, st, inline(backup.Files)), opts)
		return sent, nil
	}
	if _, err := restore(first, nil); err != nil {
		t.Fatal(err)
	}
	sameState(t, src, target)

	// Blue changes: a file rewritten, one made, one deleted, one's mode changed.
	changed := filepath.Join(src, "data", "fxxx")
	must(t, os.WriteFile(changed, []byte("rewritten"), 0o640))
	must(t, os.WriteFile(filepath.Join(src, "data", "new.txt"), []byte("made since"), 0o644))
	must(t, os.Remove(filepath.Join(src, "data", "fxxxxx")))
	must(t, os.Chmod(filepath.Join(src, "data", "fx"), 0o600))
	second, _ := chunkBackup(t, r, src, first)
	entries := entriesOf(t, second)
	var total, want int64
	for p, e := range entries {
		total += e.DataBytes
		// Sent in full: what changed, and the sparse file (a kept entry does not stand for one).
		if slices.Contains([]string{"data/fxxx", "data/new.txt", "data/fx", "sparse.bin"}, p) {
			want += e.DataBytes
		}
	}
	sent, err := restore(second, first)
	if err != nil {
		t.Fatal(err)
	}
	if sent != want {
		t.Errorf("the restore after a restore sent %d bytes of contents, want %d (of %d)", sent, want, total)
	}
	t.Logf("the restore after a restore sent %d bytes of the tree's %d", sent, total)
	sameState(t, src, target)

	// A kept file that is not as the restore left it, its size and time kept.
	big := filepath.Join(target, "big.bin")
	fi, err := os.Stat(big)
	must(t, err)
	data, err := os.ReadFile(big)
	must(t, err)
	data[100] ^= 0xff
	must(t, os.WriteFile(big, data, 0o600))
	must(t, os.Chtimes(big, time.Time{}, fi.ModTime()))
	before := treeState(t, target)
	third, _ := chunkBackup(t, r, src, second)
	if _, err := restore(third, second); !errors.Is(err, ErrKeptChanged) {
		t.Fatalf("the stage over a kept file that changed on the target: %v, want ErrKeptChanged", err)
	}
	if after := treeState(t, target); !slices.Equal(before, after) {
		t.Errorf("the failed stage changed the target:\n%s\nwant\n%s", strings.Join(after, "\n"), strings.Join(before, "\n"))
	}
	// Sent in full, the claim is made right.
	if _, err := restore(third, nil); err != nil {
		t.Fatal(err)
	}
	sameState(t, src, target)
}

// sameState fails t unless dir holds what src does, by treeState (its root's own line left out).
func sameState(t *testing.T, src, dir string) {
	t.Helper()
	rel := func(root string) []string {
		var out []string
		for _, line := range treeState(t, root) {
			if rest, ok := strings.CutPrefix(line, root+"/"); ok {
				out = append(out, rest)
			}
		}
		return out
	}
	if want, got := rel(src), rel(dir); !slices.Equal(want, got) {
		t.Fatalf("the target holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
