package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"filippo.io/age"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/volumes"
	"github.com/ferrykube/ferry/storage"
	"k8s.io/utils/ptr"
)

// TestVolumeFileListIsAStream: a volume's files are a stream of their own (format 4), encrypted
// when the backup is. The manifest holds the stream's name and the volume's totals, never a
// file's name or digest; in an encrypted backup no object that is not encrypted does either. The
// encrypted backup then restores onto green exactly, and verifies clean, from that stream.
func TestVolumeFileListIsAStream(t *testing.T) {
	blue, bkc := clients(t, "blue")
	green, gkc := clients(t, "green")
	ctx := context.Background()
	const srcNS, dstNS, claim = "fl-lab", "fl-lab-restored", "data"
	removeAfter(t, srcNS, bkc)
	removeAfter(t, dstNS, gkc)
	createClaim(t, bkc, srcNS, claim, nil)
	src := dataDir(t, "fl-data")
	fillVolume(t, src)
	// Names and contents to look for in storage: neither is common enough to appear by chance.
	const marker = "quarterly-salaries-fl7c2e"
	secret := []byte("the contents of " + marker + "\n")
	must(t, os.MkdirAll(filepath.Join(src, "private"), 0o700))
	must(t, os.WriteFile(filepath.Join(src, "private", marker+".csv"), secret, 0o600))
	must(t, os.Link(filepath.Join(src, "private", marker+".csv"), filepath.Join(src, "private", marker+"-again.csv")))
	sum := sha256.Sum256(secret)
	digest := hex.EncodeToString(sum[:])
	if err := blue.BindClaim(ctx, srcNS, claim, src); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(t.TempDir(), "ferry.yaml")
	must(t, os.WriteFile(config, []byte("include: {namespaces: ["+srcNS+"]}\n"), 0o644))
	entries := len(walkTree(t, src))

	url := backupMinIO(t, "filelist")
	store, err := storage.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		ids  []age.Identity
	}{
		{"fl-plain", nil, nil},
		{"fl-encrypted", []string{"--encrypt-to", id.Recipient().String()}, []age.Identity{id}},
	} {
		code, out, errOut := runFerry(t, append([]string{"--storage", url, "backup", "--from", "blue", "-f", config, "--name", tc.name}, tc.args...)...)
		if code != 0 {
			t.Fatalf("ferry backup %s exited %d\nstdout: %s\nstderr: %s", tc.name, code, out, errOut)
		}
		m, err := snapshot.ReadManifest(ctx, store, tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if m.FormatVersion != snapshot.FormatVersion || len(m.Volumes) != 1 {
			t.Fatalf("%s: format %s, %d volumes", tc.name, m.FormatVersion, len(m.Volumes))
		}
		v := m.Volumes[0]
		wantKey := snapshot.FileListFile(srcNS, claim)
		if tc.ids != nil {
			wantKey += snapshot.EncryptedSuffix
		}
		if v.Files != nil || v.List == nil || v.List.Key != wantKey || v.List.Entries != int64(entries) {
			t.Fatalf("%s: volume %+v with list %+v; want %s of %d entries and no files inline", tc.name, v, v.List, wantKey, entries)
		}
		listed := volumeFiles(t, store, tc.name, v, tc.ids...)
		// The walk meets "-again" first: the other name is the hard link to it.
		first := slices.IndexFunc(listed, func(f snapshot.File) bool { return f.Path == "private/"+marker+"-again.csv" })
		link := slices.IndexFunc(listed, func(f snapshot.File) bool { return f.Path == "private/"+marker+".csv" })
		if len(listed) != entries || first < 0 || link < 0 || listed[first].SHA256 != digest || listed[first].Hardlink != "" ||
			listed[link].SHA256 != digest || listed[link].Size != int64(len(secret)) || listed[link].Hardlink != listed[first].Path {
			t.Fatalf("%s: the file list holds %d entries (want %d), the names of one file at %d and %d", tc.name, len(listed), entries, first, link)
		}

		// What storage holds in plaintext: the manifest always; in an encrypted backup, nothing else
		// but the claim.
		var plaintext []string
		must(t, store.List(ctx, snapshot.Prefix(tc.name), func(o storage.ObjectInfo) error {
			file := strings.TrimPrefix(o.Key, snapshot.Prefix(tc.name))
			if file == snapshot.ManifestFile || tc.ids != nil && !strings.HasSuffix(file, snapshot.EncryptedSuffix) {
				plaintext = append(plaintext, file)
			}
			return nil
		}))
		if tc.ids != nil && !slices.Equal(plaintext, []string{snapshot.ClaimFile, snapshot.ManifestFile}) {
			t.Errorf("%s: the files not encrypted are %q, want only the claim and the manifest", tc.name, plaintext)
		}
		for _, file := range plaintext {
			data := readAll(t, store, snapshot.Prefix(tc.name)+file)
			for _, leak := range []string{marker, "metrics-107.json", "weights.bin", digest} {
				if bytes.Contains(data, []byte(leak)) {
					t.Errorf("%s: %s holds %q in plaintext", tc.name, file, leak)
				}
			}
		}
	}

	// The encrypted backup onto green: every entry of the list restored, the tree as blue's.
	must(t, green.Apply(ctx, io.Discard, filepath.Join(repoDir(), "integration", "testdata", "standard-storageclass.yaml")))
	createClaim(t, gkc, dstNS, claim, ptr.To("standard"))
	r, err := snapshot.Open(ctx, store, "fl-encrypted", []age.Identity{id})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := green.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	contents := volumes.Contents{Config: cfg, Client: gkc, Image: "ferry", Mapping: snapshot.Mapping{Namespaces: map[string]string{srcNS: dstNS}}}
	report := restoreVolumes(t, contents, r)
	if got := report.Counts["volumes"][snapshot.StatusRestored]; got != entries || len(report.Items) != 0 {
		t.Fatalf("restore: %v, items %+v; want %d restored", report.Counts, report.Items, entries)
	}
	if want, got := walkTree(t, src), walkTree(t, claimFolder(t, gkc, dstNS, claim)); !slices.Equal(want, got) {
		t.Fatalf("green's folder differs from blue's:\n%s", lineDiff(want, got))
	}
	verifyClean(t, contents, r, entries)
	noMovers(t, gkc, dstNS)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func readAll(t *testing.T, store storage.Backend, key string) []byte {
	t.Helper()
	rc, err := store.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
