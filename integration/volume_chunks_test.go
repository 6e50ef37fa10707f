package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/volumes"
	"github.com/ferrykube/ferry/storage"
	"github.com/ferrykube/ferry/storage/repo"
	"k8s.io/utils/ptr"
)

// TestChunkedVolumeBackups backs a claim up twice with --volume-format chunks, 1 % of its files
// changed between: the second backup uploads at most 2 % of the first one's bytes, and each
// backup restores to exactly the tree it was taken of (walked and hashed here, not by ferry). A
// chunk tampered in storage makes restore refuse before anything is applied and ferry check
// report it; prune --keep-last 1 deletes the packs only the removed backup needed. A restore of
// the second backup onto the claim the first one's restore left sends only what changed.
func TestChunkedVolumeBackups(t *testing.T) {
	applyPlatform(t)
	blue, bkc := clients(t, "blue")
	green, gkc := clients(t, "green")
	ctx := context.Background()
	const srcNS, claim = "cv-lab", "notebook-data"
	createClaim(t, bkc, srcNS, claim, nil)
	src := dataDir(t, claim)
	fillVolume(t, src)
	rng := rand.NewChaCha8([32]byte{9})
	for i := range 100 { // 6.4 MB of data that does not compress
		b := make([]byte, 64<<10)
		rng.Read(b)
		os.MkdirAll(filepath.Join(src, "data"), 0o755)
		if err := os.WriteFile(filepath.Join(src, "data", fmt.Sprintf("shard-%03d.bin", i)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Only in the first backup: at least one pack (16 MiB) holds nothing else.
	gone := make([]byte, 40<<20)
	rng.Read(gone)
	if err := os.WriteFile(filepath.Join(src, "old.bin"), gone, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := blue.BindClaim(ctx, srcNS, claim, src); err != nil {
		t.Fatal(err)
	}
	url := backupMinIO(t, "volume-chunks")
	store, err := storage.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	packBytes := func() (int64, int) {
		var n int64
		var packs int
		if err := store.List(ctx, repo.DefaultPrefix+"packs/", func(o storage.ObjectInfo) error {
			n += o.Size
			packs++
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return n, packs
	}
	backup := func(name string) {
		t.Helper()
		code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "--include-namespaces", srcNS, "--name", name, "--volume-format", "chunks")
		if (code != 0 && code != 3) || strings.Contains(out, "volume "+srcNS+"/"+claim) {
			t.Fatalf("ferry backup %s exited %d\nstdout: %s\nstderr: %s", name, code, out, errOut)
		}
	}

	backup("cv-1")
	want1 := walkTree(t, src)
	first, _ := packBytes()
	// 1 % of the files change (5 of about 500), one goes.
	for i := range 5 {
		p := filepath.Join(src, "runs", fmt.Sprintf("%02d", i), fmt.Sprintf("metrics-%03d.json", i))
		if err := os.WriteFile(p, []byte(fmt.Sprintf(`{"run": %d, "loss": 0.5, "rerun": true}`, i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(src, "old.bin")); err != nil {
		t.Fatal(err)
	}
	backup("cv-2")
	want2 := walkTree(t, src)
	second, _ := packBytes()
	// The second backup's upload for the claim: its new packs, its tree and its file list.
	_, m2 := readManifest(t, url, "cv-2")
	var streams int64
	for _, s := range m2.Streams {
		if strings.HasPrefix(s.Key, "volumes/"+srcNS+"/") || strings.HasPrefix(s.Key, "volume-files/"+srcNS+"/") {
			streams += s.Bytes
		}
	}
	// Measured against the first backup without old.bin, which the second does not hold.
	base := first - int64(len(gone))
	t.Logf("first backup stored %d bytes of packs (%d without old.bin); the second %d more, and %d of tree and file list (%.2f %% in all)",
		first, base, second-first, streams, 100*float64(second-first+streams)/float64(base))
	if base < 8<<20 || second-first+streams > base/50 {
		t.Fatalf("packs: %d bytes after the first backup, %d after the second, %d of streams: want the second to upload at most 2 %%", first, second, streams)
	}

	if err := green.Apply(ctx, io.Discard, filepath.Join(repoDir(), "integration", "testdata", "standard-storageclass.yaml")); err != nil {
		t.Fatal(err)
	}
	cfg, err := green.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	open := func(name string) *snapshot.Reader {
		t.Helper()
		r, err := snapshot.Open(ctx, store, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Manifest.Volumes = slices.DeleteFunc(r.Manifest.Volumes, func(v snapshot.Volume) bool { return v.Namespace != srcNS })
		r.Manifest.Skipped = slices.DeleteFunc(r.Manifest.Skipped, func(s snapshot.Skipped) bool { return !strings.HasPrefix(s.Name, srcNS+"/") })
		if len(r.Manifest.Volumes) != 1 || r.Manifest.Volumes[0].Format != snapshot.FormatChunks {
			t.Fatalf("backup %s: volumes of %s: %+v", name, srcNS, r.Manifest.Volumes)
		}
		return r
	}
	// contents restores or verifies the claim of srcNS as dstNS's on green.
	contents := func(dstNS string) volumes.Contents {
		return volumes.Contents{Config: cfg, Client: gkc, Image: "ferry", Mapping: snapshot.Mapping{Namespaces: map[string]string{srcNS: dstNS}}}
	}
	restoreTo := func(name, dstNS string) (*snapshot.Report, string, error) {
		t.Helper()
		createClaim(t, gkc, dstNS, claim, ptr.To("standard"))
		c := contents(dstNS)
		report := &snapshot.Report{}
		err := c.Restore(ctx, open(name), report)
		return report, claimFolder(t, gkc, dstNS, claim), err
	}
	for _, tc := range []struct {
		name, ns string
		want     []string
	}{{"cv-1", "cv-lab-1", want1}, {"cv-2", "cv-lab-2", want2}} {
		report, dst, err := restoreTo(tc.name, tc.ns)
		if err != nil || len(report.Items) != 0 {
			t.Fatalf("restore of %s: %v, items %+v", tc.name, err, report.Items)
		}
		if got := walkTree(t, dst); !slices.Equal(tc.want, got) {
			t.Fatalf("restore of %s differs from the tree backed up:\n%s", tc.name, lineDiff(tc.want, got))
		}
		// Verify reads the file list, as for the tar format.
		r := open(tc.name)
		verifyClean(t, contents(tc.ns), r, int(r.Manifest.Volumes[0].List.Entries))
	}

	// A restore of cv-2 onto the claim cv-1's restore left sends only what changed since (Base, as
	// a warm run's rounds restore); one onto a claim where a file cv-1 left has changed since
	// (its size and time kept) sends everything, and the claim is exact all the same.
	restoreOnto := func(name, dstNS, base string) *snapshot.Report {
		t.Helper()
		c := contents(dstNS)
		c.Exact, c.Base = true, base
		report := &snapshot.Report{}
		err := c.Restore(ctx, open(name), report)
		// Exact: what cv-1 held and cv-2 does not is deleted (and listed), nothing else is listed.
		if err != nil || slices.ContainsFunc(report.Items, func(it snapshot.ReportItem) bool { return it.Status != snapshot.StatusDeleted }) {
			t.Fatalf("restore of %s onto %s over %s: %v, items %+v", name, dstNS, base, err, report.Items)
		}
		if got := walkTree(t, claimFolder(t, gkc, dstNS, claim)); !slices.Equal(want2, got) {
			t.Fatalf("restore of %s onto %s over %s differs from the tree backed up:\n%s", name, dstNS, base, lineDiff(want2, got))
		}
		return report
	}
	whole := open("cv-2").Manifest.Volumes[0].Bytes
	if sent := restoreOnto("cv-2", "cv-lab-1", "cv-1").Sent["volumes"]; sent <= 0 || sent > whole/50 {
		t.Errorf("the restore of cv-2 over cv-1 sent %d bytes of the volume's %d: want only the 5 files that changed", sent, whole)
	} else {
		t.Logf("the restore of cv-2 over cv-1 sent %d bytes of the volume's %d", sent, whole)
	}
	if _, _, err := restoreTo("cv-1", "cv-lab-5"); err != nil {
		t.Fatal(err)
	}
	shard := filepath.Join(claimFolder(t, gkc, "cv-lab-5", claim), "data", "shard-007.bin")
	fi, err := os.Stat(shard)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(shard)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(shard, flipByte(data, 100), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(shard, time.Time{}, fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if sent := restoreOnto("cv-2", "cv-lab-5", "cv-1").Sent["volumes"]; sent < whole/2 {
		t.Errorf("the restore of cv-2 over a changed cv-1 sent %d bytes of the volume's %d: want all of it", sent, whole)
	}

	// A byte of every pack flipped: restore refuses before applying anything, check reports it.
	var packs []string
	store.List(ctx, repo.DefaultPrefix+"packs/", func(o storage.ObjectInfo) error {
		packs = append(packs, o.Key)
		return nil
	})
	originals := map[string][]byte{}
	for _, key := range packs {
		data := getObject(t, store, key)
		originals[key] = data
		if err := store.Put(ctx, key, bytes.NewReader(flipByte(bytes.Clone(data), len(data)/2))); err != nil {
			t.Fatal(err)
		}
	}
	report, dst, err := restoreTo("cv-2", "cv-lab-3")
	if err == nil || report.Counts["volumes"][snapshot.StatusFailed] == 0 && len(report.Items) == 0 {
		t.Fatalf("restore from tampered chunks: %v, %+v; want the volume failed", err, report.Items)
	}
	if got := walkTree(t, dst); len(got) != 0 {
		t.Fatalf("restore from tampered chunks applied files:\n%s", strings.Join(got, "\n"))
	}
	code, out, errOut := runFerry(t, "--storage", url, "check", "--read-data")
	if code != 1 || !strings.Contains(out, "PROBLEM pack") {
		t.Fatalf("ferry check of tampered packs exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	for key, data := range originals {
		if err := store.Put(ctx, key, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	if code, out, errOut := runFerry(t, "--storage", url, "check", "--read-data"); code != 0 {
		t.Fatalf("ferry check exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}

	// prune --keep-last 1 keeps cv-2: the packs only old.bin's chunks are in go, and every pack
	// left holds chunks cv-2 references. (Packs partly used are repacked only once older than
	// the skew margin of 10 minutes, which this test does not wait for.)
	deleted := 0
	for range 2 {
		code, out, errOut := runFerry(t, "--storage", url, "prune", "--keep-last", "1", "-o", "json")
		var rep struct {
			Deleted []string         `json:"deleted"`
			Chunks  repo.PruneResult `json:"chunks"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
			t.Fatalf("ferry prune exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
		t.Logf("prune: deleted %v, chunks %+v", rep.Deleted, rep.Chunks)
		deleted += rep.Chunks.Deleted
	}
	_, referenced, kept := referencedPacks(t, store)
	var left []string
	var after int64
	store.List(ctx, repo.DefaultPrefix+"packs/", func(o storage.ObjectInfo) error {
		left = append(left, filepath.Base(o.Key))
		after += o.Size
		return nil
	})
	t.Logf("after prune: %d packs of %d bytes (%d before); the kept backup references %d bytes in %d packs", len(left), after, second, kept, len(referenced))
	if deleted == 0 || after >= second || len(left) != len(referenced) {
		t.Fatalf("after prune: %d packs deleted, %d left (%d bytes, %d before), %d of them referenced by the kept backup", deleted, len(left), after, second, len(referenced))
	}
	for _, p := range left {
		if !referenced[p] {
			t.Errorf("pack %s is left, and the kept backup references none of its chunks", p)
		}
	}
	if code, out, errOut := runFerry(t, "--storage", url, "check", "--read-data"); code != 0 {
		t.Fatalf("ferry check after prune exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	report, dst, err = restoreTo("cv-2", "cv-lab-4")
	if err != nil || len(report.Items) != 0 {
		t.Fatalf("restore of cv-2 after prune: %v, items %+v", err, report.Items)
	}
	if got := walkTree(t, dst); !slices.Equal(want2, got) {
		t.Fatalf("restore of cv-2 after prune differs:\n%s", lineDiff(want2, got))
	}
}

// referencedPacks opens the chunk repository of store and reads the chunks its complete backups
// reference: the packs they are in (by name) and their bytes. A chunk the index lacks is an error.
func referencedPacks(t *testing.T, store storage.Backend) (*repo.Repo, map[string]bool, int64) {
	t.Helper()
	ctx := context.Background()
	rp, err := repo.Open(ctx, store, repo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var size int64
	referenced := map[string]bool{}
	if err := volumes.ChunkRefs(ctx, store, repo.DefaultPrefix, func(refs []repo.ChunkRef) {
		for _, r := range refs {
			size += int64(r.Size)
			pack, ok := rp.PackOf(r.ID)
			if !ok {
				t.Errorf("chunk %s of a kept backup is not in the index", r.ID)
			}
			referenced[pack] = true
		}
	}); err != nil {
		t.Fatal(err)
	}
	return rp, referenced, size
}
