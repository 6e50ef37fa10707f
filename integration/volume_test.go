package integration

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"filippo.io/age"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/klauspost/compress/zstd"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestBackupReadsVolumes binds a user's workspace claim on blue to a local folder and checks that
// ferry backup reads it through a mover pod: every file with its size, mode and SHA-256, the tree
// stored as a compressed tar, and the mover pod gone afterwards.
func TestBackupReadsVolumes(t *testing.T) {
	fixture := applyPlatform(t)
	blue, kc := clients(t, "blue")
	ctx := context.Background()
	ns, claim := "alice", "workspace-alice-nb"
	if fixture {
		ns, claim = "kubeflow-user-example-com", "test-workspace"
	}
	dir := dataDir(t, claim) // later backups of blue read this claim too
	big := make([]byte, 3<<20+7)
	rand.NewChaCha8([32]byte{2}).Read(big)
	files := map[string][]byte{"model/weights.bin": big, "notes.md": []byte("# experiment 12\n"), "model/config.json": []byte(`{"lr": 0.001}`)}
	for name, data := range files {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(dir, "empty-dir"), 0o700)
	os.Symlink("model/config.json", filepath.Join(dir, "current"))
	if err := blue.BindClaim(ctx, ns, claim, dir); err != nil {
		t.Fatal(err)
	}

	storeDir := t.TempDir()
	code, out, errOut := runFerry(t, "--storage", "file://"+storeDir, "backup", "--from", "blue", "--preset", "kubeflow", "--name", "with-volume")
	if code != 3 || strings.Contains(out, "volume "+ns+"/"+claim) || !strings.Contains(out, "the claim is pending") {
		t.Fatalf("ferry backup exited %d (want 3: unbound claims are skipped, %s/%s is not)\nstdout: %s\nstderr: %s", code, ns, claim, out, errOut)
	}
	store, m := readManifest(t, "file://"+storeDir, "with-volume")
	i := slices.IndexFunc(m.Volumes, func(v snapshot.Volume) bool { return v.Namespace == ns && v.Name == claim })
	if i < 0 {
		t.Fatalf("manifest volumes %+v lack %s/%s", m.Volumes, ns, claim)
	}
	v := m.Volumes[i]
	byPath := map[string]snapshot.File{}
	for _, f := range v.Files {
		byPath[f.Path] = f
	}
	for name, data := range files {
		sum := sha256.Sum256(data)
		f := byPath[name]
		if f.Type != "file" || f.Size != int64(len(data)) || f.SHA256 != hex.EncodeToString(sum[:]) || f.Mode != "0640" {
			t.Errorf("%s in the manifest: %+v", name, f)
		}
	}
	if byPath["empty-dir/"].Type != "dir" || byPath["empty-dir/"].Mode != "0700" || byPath["current"].Link != "model/config.json" {
		t.Errorf("directory or symlink missing or wrong: %+v / %+v", byPath["empty-dir/"], byPath["current"])
	}

	rc, err := store.Get(ctx, snapshot.Prefix("with-volume")+v.Key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	dec, err := zstd.NewReader(rc)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(dec)
	seen := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if want, ok := files[h.Name]; ok {
			got, _ := io.ReadAll(tr)
			if string(got) != string(want) {
				t.Errorf("%s differs in the stored tar", h.Name)
			}
			seen++
		}
	}
	if seen != len(files) {
		t.Fatalf("the stored tar holds %d of %d files", seen, len(files))
	}
	pods, err := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=ferry-mover"})
	if err != nil || len(pods.Items) != 0 {
		t.Fatalf("mover pods left behind: %d (%v)", len(pods.Items), err)
	}
}

// TestBackupMoverDirect: with --mover-direct the mover uploads the volume to S3 itself (here,
// encrypted), and the manifest still lists every file.
func TestBackupMoverDirect(t *testing.T) {
	fixture := applyPlatform(t)
	blue, _ := clients(t, "blue")
	ctx := context.Background()
	ns, claim := "bob", "workspace-bob-nb"
	if fixture {
		ns, claim = "dkim-research", "rstudio-stats-workspace"
	}
	dir := dataDir(t, claim)
	data := []byte(strings.Repeat("rstudio session state\n", 10000))
	if err := os.WriteFile(filepath.Join(dir, "session.rds"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := blue.BindClaim(ctx, ns, claim, dir); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runFerry(t, "--storage", "file://"+t.TempDir(), "backup", "--from", "blue", "--mover-direct"); code != 2 || !strings.Contains(errOut, "--mover-direct needs S3 storage") {
		t.Fatalf("--mover-direct with file storage exited %d: %s", code, errOut)
	}

	url := backupMinIO(t, "direct")
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "--preset", "kubeflow", "--name", "direct",
		"--mover-direct", "--encrypt-to", id.Recipient().String())
	// 3 while other claims of the platform are still unbound (the fixture's are), else 0.
	if (code != 0 && code != 3) || strings.Contains(out, "volume "+ns+"/"+claim) {
		t.Fatalf("ferry backup --mover-direct exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	store, m := readManifest(t, url, "direct")
	i := slices.IndexFunc(m.Volumes, func(v snapshot.Volume) bool { return v.Namespace == ns && v.Name == claim })
	if i < 0 {
		t.Fatalf("manifest volumes %+v lack %s/%s", m.Volumes, ns, claim)
	}
	v := m.Volumes[i]
	sum := sha256.Sum256(data)
	if len(v.Files) != 1 || v.Files[0].SHA256 != hex.EncodeToString(sum[:]) || !strings.HasSuffix(v.Key, ".age") {
		t.Fatalf("volume entry %+v", v)
	}
	info, err := store.Stat(ctx, snapshot.Prefix("direct")+v.Key)
	if err != nil {
		t.Fatal(err)
	}
	if j := slices.IndexFunc(m.Streams, func(s snapshot.Stream) bool { return s.Key == v.Key }); j < 0 || m.Streams[j].Bytes != info.Size {
		t.Fatalf("the manifest does not record the stored stream %s (%d bytes)", v.Key, info.Size)
	}
	rc, err := store.Get(ctx, snapshot.Prefix("direct")+v.Key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	plain, err := age.Decrypt(rc, id)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := zstd.NewReader(plain)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(dec)
	h, err := tr.Next()
	if err != nil || h.Name != "session.rds" {
		t.Fatalf("first entry %v, %v", h, err)
	}
	got, _ := io.ReadAll(tr)
	if string(got) != string(data) {
		t.Fatal("the uploaded volume differs")
	}
}
