package integration

import (
	"bytes"
	"context"
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestVolumeRestoreOfAFlippedStreamLeavesTheClaim backs a claim of blue up with ferry, in each
// volume format, changes one byte of the stored volume stream, and restores the backup with ferry
// onto green, whose claim holds older versions of the files and one of its own: through ferry and
// with --mover-direct, the restore exits non-zero naming the volume, and green's folder, read here
// file by file, is byte for byte as it was, times too. With the stream put back, the same
// restore (--mover-direct) succeeds.
func TestVolumeRestoreOfAFlippedStreamLeavesTheClaim(t *testing.T) {
	blue, bkc := clients(t, "blue")
	green, gkc := clients(t, "green")
	ctx := context.Background()
	const ns, claim, backup = "vi-lab", "notebook-data", "vi-flipped"

	// Blue: small files first in the tree's order, then one large file the flipped byte lands in.
	createClaim(t, bkc, ns, claim, nil)
	src := dataDir(t, "vi-"+claim)
	big := make([]byte, 1<<20)
	rand.NewChaCha8([32]byte{7}).Read(big)
	for name, data := range map[string][]byte{
		"a-notes.txt": []byte("version 2 of the notes\n"), "b-params.json": []byte(`{"lr": 0.02}`),
		"model/weights.bin": big, "model/z-readme.md": []byte("version 2\n"),
	} {
		if err := os.MkdirAll(filepath.Join(src, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := blue.BindClaim(ctx, ns, claim, src); err != nil {
		t.Fatal(err)
	}
	url := backupMinIO(t, "volume-integrity")
	config := namespacesConfig(t, ns)

	// Green: the claim, bound to a folder of its own, holding older versions and a file of its own.
	if err := green.Apply(ctx, io.Discard, filepath.Join(repoDir(), "integration", "testdata", "standard-storageclass.yaml")); err != nil {
		t.Fatal(err)
	}
	createClaim(t, gkc, ns, claim, ptr.To("standard"))
	waitUntil(t, "green's claim bound", time.Minute, func(ctx context.Context) (bool, error) {
		pvc, err := gkc.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		return err == nil && pvc.Spec.VolumeName != "" && pvc.Status.Phase == "Bound", nil
	})
	dst := claimFolder(t, gkc, ns, claim)
	old := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	fillGreen := func(t *testing.T) {
		for name, data := range map[string]string{
			"a-notes.txt": "version 1 of the notes\n", "b-params.json": `{"lr": 0.01}`,
			"model/weights.bin": "old weights", "model/z-readme.md": "version 1\n", "only-on-green.txt": "green's own",
		} {
			if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(name)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dst, name), []byte(data), 0o640); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(filepath.Join(dst, name), old, old); err != nil {
				t.Fatal(err)
			}
		}
		for _, dir := range []string{filepath.Join(dst, "model"), dst} {
			if err := os.Chtimes(dir, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Each format's stream: the tar stream (which direct movers download themselves) and the chunk
	// repository's tree stream (restored through exec, also with --mover-direct).
	for _, format := range []string{"tar", "chunks"} {
		t.Run(format, func(t *testing.T) {
			backup := backup + "-" + format
			if code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "-f", config, "--name", backup, "--volume-format", format); code != 0 {
				t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
			}
			store, manifest := readManifest(t, url, backup)
			if len(manifest.Volumes) != 1 {
				t.Fatalf("the backup holds %d volumes", len(manifest.Volumes))
			}
			fillGreen(t)
			before := folderState(t, dst)

			// One byte of the stored stream: in the tar stream, inside the large file's data (the
			// small files come before it).
			key := snapshot.Prefix(backup) + manifest.Volumes[0].Key
			stored := getObject(t, store, key)
			if err := store.Put(ctx, key, bytes.NewReader(flipByte(stored, len(stored)/2))); err != nil {
				t.Fatal(err)
			}
			name := ns + "/" + claim
			for _, mode := range [][]string{nil, {"--mover-direct"}} {
				code, rep, errOut := runReportCommand(t, append([]string{"--storage", url, "restore", "--to", "green", "--backup", backup}, mode...)...)
				failed := slices.DeleteFunc(slices.Clone(rep.Items), func(it snapshot.ReportItem) bool {
					return it.Kind != "volumes" || it.Status != snapshot.StatusFailed
				})
				t.Logf("restore %v of a flipped stream: exit %d, %s, error %q, volumes failed %+v", mode, code, rep.Result, rep.Error, failed)
				// A corrupt backup is bad input (exit 2), as for every kind.
				if code == 0 || code == 3 || len(failed) != 1 || failed[0].Name != name || !strings.Contains(failed[0].Detail, snapshot.ErrCorrupt.Error()) ||
					!strings.Contains(rep.Error, "volume "+name) {
					t.Fatalf("restore %v of a flipped stream exited %d without failing volume %s as corrupt: %+v\nstderr: %s", mode, code, name, rep, errOut)
				}
				if after := folderState(t, dst); !slices.Equal(before, after) {
					t.Fatalf("restore %v of a flipped stream changed green's folder:\n%s", mode, lineDiff(before, after))
				}
				noMovers(t, gkc, ns)
			}

			// The stream as written: the same restore puts blue's files in place.
			if err := store.Put(ctx, key, bytes.NewReader(stored)); err != nil {
				t.Fatal(err)
			}
			code, rep, errOut := runReportCommand(t, "--storage", url, "restore", "--to", "green", "--backup", backup, "--mover-direct")
			if (code != 0 && code != 3) || rep.Counts["volumes"][snapshot.StatusRestored] != 4 || rep.Counts["volumes"][snapshot.StatusFailed] != 0 {
				t.Fatalf("restore of the stream as written exited %d: %+v\nstderr: %s", code, rep, errOut)
			}
			// A chunked volume goes through exec, and the log says so.
			if through := strings.Contains(errOut, "restoring through exec: direct movers read tar streams"); through != (format == "chunks") {
				t.Fatalf("restore --mover-direct of a %s backup says it restored through exec: %v\nstderr: %s", format, through, errOut)
			}
			want, got := walkTree(t, src), walkTree(t, dst)
			got = slices.DeleteFunc(got, func(l string) bool { return strings.HasPrefix(l, "only-on-green.txt ") })
			if !slices.Equal(want, got) {
				t.Fatalf("after the restore green's folder differs from blue's:\n%s", lineDiff(want, got))
			}
			if entries, _ := filepath.Glob(filepath.Join(dst, volumes.StagingPrefix+"*")); len(entries) > 0 {
				t.Fatalf("staging folders left: %v", entries)
			}
		})
	}
}
