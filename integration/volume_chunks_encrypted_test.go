package integration

import (
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"filippo.io/age"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/volumes"
	"github.com/ferrykube/ferry/storage"
	"github.com/ferrykube/ferry/storage/repo"
	"k8s.io/utils/ptr"
)

// TestChunkedEncryptedPrune backs a claim up twice with --volume-format chunks encrypted to a
// recipient, a large file removed between. The second backup says why it reads every file (the
// previous tree is encrypted, and ferry writes without the identity). prune without --identity
// exits 2 before it removes anything; with it, prune --keep-last 1 removes the first backup and
// the packs only it used, every pack left holds a chunk the kept backup uses, and the kept backup
// restores exactly.
func TestChunkedEncryptedPrune(t *testing.T) {
	applyPlatform(t)
	blue, bkc := clients(t, "blue")
	green, gkc := clients(t, "green")
	ctx := context.Background()
	const srcNS, claim = "cve-lab", "encrypted-data"
	createClaim(t, bkc, srcNS, claim, nil)
	src := dataDir(t, claim)
	fillVolume(t, src)
	rng := rand.NewChaCha8([32]byte{11})
	gone := make([]byte, 40<<20) // only in the first backup: packs of nothing else
	rng.Read(gone)
	if err := os.WriteFile(filepath.Join(src, "old.bin"), gone, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := blue.BindClaim(ctx, srcNS, claim, src); err != nil {
		t.Fatal(err)
	}
	id, idFile := newIdentity(t)
	url := backupMinIO(t, "volume-chunks-encrypted")
	store, err := storage.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	prefix := volumes.RepoPrefix([]string{id.Recipient().String()})
	packs := func() (map[string]bool, int64) {
		t.Helper()
		out := map[string]bool{}
		var n int64
		if err := store.List(ctx, prefix+"packs/", func(o storage.ObjectInfo) error {
			out[filepath.Base(o.Key)] = true
			n += o.Size
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out, n
	}
	backup := func(name string) string {
		t.Helper()
		code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "--include-namespaces", srcNS, "--name", name,
			"--volume-format", "chunks", "--encrypt-to", id.Recipient().String())
		if (code != 0 && code != 3) || strings.Contains(out, "volume "+srcNS+"/"+claim) {
			t.Fatalf("ferry backup %s exited %d\nstdout: %s\nstderr: %s", name, code, out, errOut)
		}
		return errOut
	}
	backup("cve-1")
	if err := os.Remove(filepath.Join(src, "old.bin")); err != nil {
		t.Fatal(err)
	}
	if log := backup("cve-2"); !strings.Contains(log, "an encrypted backup reads every file") || !strings.Contains(log, srcNS+"/"+claim) {
		t.Errorf("the second encrypted backup does not say why it read every file of %s/%s:\n%s", srcNS, claim, log)
	}
	want := walkTree(t, src)
	before, beforeBytes := packs()
	if len(before) == 0 {
		t.Fatalf("no packs under %s", prefix)
	}

	// Without the identity: exit 2, naming --identity, and nothing removed.
	code, out, errOut := runFerry(t, "--storage", url, "prune", "--keep-last", "1")
	if code != 2 || !strings.Contains(errOut, "--identity") {
		t.Fatalf("ferry prune without --identity exited %d, want 2\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if _, err := snapshot.ReadManifest(ctx, store, "cve-1"); err != nil {
		t.Fatalf("prune without --identity removed cve-1: %v", err)
	}
	if after, _ := packs(); len(after) != len(before) {
		t.Fatalf("prune without --identity changed the packs: %d, %d before", len(after), len(before))
	}

	// With it: the first backup goes, and the packs only it used.
	deleted := 0
	for range 2 {
		code, out, errOut := runFerry(t, "--storage", url, "prune", "--keep-last", "1", "--identity", idFile, "-o", "json")
		var rep struct {
			Deleted []string         `json:"deleted"`
			Chunks  repo.PruneResult `json:"chunks"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
			t.Fatalf("ferry prune --identity exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
		t.Logf("prune: deleted %v, chunks %+v", rep.Deleted, rep.Chunks)
		deleted += rep.Chunks.Deleted
	}
	if _, err := snapshot.ReadManifest(ctx, store, "cve-1"); err == nil {
		t.Error("cve-1 is still there after prune --keep-last 1")
	}
	rp, err := repo.Open(ctx, store, repo.Options{Prefix: prefix, Identities: []age.Identity{id}})
	if err != nil {
		t.Fatal(err)
	}
	referenced := map[string]bool{}
	if err := volumes.EncryptedChunkRefs(ctx, store, prefix, []age.Identity{id}, func(refs []repo.ChunkRef) {
		for _, r := range refs {
			pack, ok := rp.PackOf(r.ID)
			if !ok {
				t.Errorf("chunk %s of the kept backup is not in the index", r.ID)
			}
			referenced[pack] = true
		}
	}); err != nil {
		t.Fatal(err)
	}
	left, leftBytes := packs()
	t.Logf("packs: %d of %d bytes before prune, %d of %d after; the kept backup uses %d", len(before), beforeBytes, len(left), leftBytes, len(referenced))
	if deleted == 0 || leftBytes >= beforeBytes-int64(len(gone))/2 {
		t.Fatalf("prune deleted %d packs: %d bytes left of %d; want old.bin's %d bytes gone", deleted, leftBytes, beforeBytes, len(gone))
	}
	for p := range left {
		if !referenced[p] {
			t.Errorf("pack %s is left, and the kept backup uses none of its chunks", p)
		}
	}

	// The kept backup restores exactly.
	if err := green.Apply(ctx, io.Discard, filepath.Join(repoDir(), "integration", "testdata", "standard-storageclass.yaml")); err != nil {
		t.Fatal(err)
	}
	cfg, err := green.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	const dstNS = "cve-lab-restored"
	createClaim(t, gkc, dstNS, claim, ptr.To("standard"))
	r, err := snapshot.Open(ctx, store, "cve-2", []age.Identity{id})
	if err != nil {
		t.Fatal(err)
	}
	r.Manifest.Volumes = slices.DeleteFunc(r.Manifest.Volumes, func(v snapshot.Volume) bool { return v.Namespace != srcNS })
	r.Manifest.Skipped = slices.DeleteFunc(r.Manifest.Skipped, func(s snapshot.Skipped) bool { return !strings.HasPrefix(s.Name, srcNS+"/") })
	if len(r.Manifest.Volumes) != 1 || r.Manifest.Volumes[0].Format != snapshot.FormatChunks || r.Manifest.Volumes[0].Repo != prefix {
		t.Fatalf("cve-2: volumes of %s: %+v", srcNS, r.Manifest.Volumes)
	}
	c := volumes.Contents{Config: cfg, Client: gkc, Image: "ferry", Mapping: snapshot.Mapping{Namespaces: map[string]string{srcNS: dstNS}}}
	report := restoreVolumes(t, c, r)
	if len(report.Items) != 0 {
		t.Fatalf("restore of cve-2: %+v", report.Items)
	}
	if got := walkTree(t, claimFolder(t, gkc, dstNS, claim)); !slices.Equal(want, got) {
		t.Fatalf("restore of cve-2 after prune differs:\n%s", lineDiff(want, got))
	}
}
