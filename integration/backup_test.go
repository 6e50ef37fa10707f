package integration

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/resources"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestBackupObjectsToMinIO backs blue's platform up into the backup MinIO with the ferry command and
// checks what a user (or Velero) would find there.
func TestBackupObjectsToMinIO(t *testing.T) {
	applyPlatform(t)
	ctx := context.Background()
	url := backupMinIO(t, "ferry")
	code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "--preset", "kubeflow", "--name", "objects-1")
	if !strings.Contains(out, "Backup objects-1 is complete") {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	store, m := wantBackupExit(t, url, "objects-1", code, out, errOut)
	if m.Totals.Objects == 0 || m.Totals.Objects != len(m.Objects) || !m.VeleroCompatible {
		t.Fatalf("manifest totals %+v with %d objects", m.Totals, len(m.Objects))
	}
	digests, schemes := map[string]string{}, map[string]string{}
	for _, o := range m.Objects {
		key := path.Join(strings.TrimSuffix(o.Resource+"."+o.Group, "."), o.Namespace, o.Name)
		digests[key], schemes[key] = o.SHA256, o.Digest
	}
	// Secrets' digests are keyed with the backup's own key, stored beside the manifest, not in it.
	digestKey, err := hex.DecodeString(strings.TrimSpace(string(readStored(t, store, "objects-1", m.DigestKey, nil))))
	if err != nil || len(digestKey) != 32 {
		t.Fatalf("the backup's digest key %q: %d bytes, %v", m.DigestKey, len(digestKey), err)
	}

	// The archive is Velero's layout: metadata/version, every object twice, mode 0755, with kind.
	rc, err := store.Get(ctx, snapshot.Prefix("objects-1")+"objects-1.tar.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	gz, err := gzip.NewReader(rc)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	plain, preferred := 0, 0
	sawVersion := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Mode != 0o755 || h.Typeflag != tar.TypeReg {
			t.Fatalf("%s: mode %o type %c, want a regular file with mode 0755", h.Name, h.Mode, h.Typeflag)
		}
		data, _ := io.ReadAll(tr)
		if h.Name == "metadata/version" {
			sawVersion = string(data) == "1.1.0\n"
			continue
		}
		parts := strings.Split(h.Name, "/") // resources/GR[/VER-preferredversion]/(cluster|namespaces/NS)/NAME.json
		var obj unstructured.Unstructured
		if err := json.Unmarshal(data, &obj.Object); err != nil || obj.GetKind() == "" || obj.GetAPIVersion() == "" {
			t.Fatalf("%s: not an object with kind and apiVersion: %v", h.Name, err)
		}
		if strings.TrimSuffix(parts[len(parts)-1], ".json") != obj.GetName() {
			t.Fatalf("%s holds %s", h.Name, obj.GetName())
		}
		gr := parts[1]
		key := path.Join(gr, obj.GetNamespace(), obj.GetName())
		if strings.HasSuffix(parts[2], velerov1.PreferredVersionDir) {
			preferred++
			continue
		}
		plain++
		digest, scheme, err := resources.FileDigest(gr, data, digestKey)
		if err != nil || digest != digests[key] || scheme != schemes[key] {
			t.Fatalf("%s: digest %s (%q), manifest %q (%q)", h.Name, digest, scheme, digests[key], schemes[key])
		}
		if plainDigest := sha256.Sum256(data); gr == "secrets" && (schemes[key] != snapshot.DigestFileHMAC || hex.EncodeToString(plainDigest[:]) == digests[key]) {
			t.Errorf("%s: the manifest holds the Secret's plain SHA-256 (scheme %q): a guessing oracle", h.Name, schemes[key])
		}
	}
	if !sawVersion || plain != len(m.Objects) || preferred != plain {
		t.Fatalf("archive: version file %v, %d version-less and %d preferred-version items for %d objects", sawVersion, plain, preferred, len(m.Objects))
	}

	vrc, err := store.Get(ctx, snapshot.Prefix("objects-1")+snapshot.VeleroFile)
	if err != nil {
		t.Fatal(err)
	}
	defer vrc.Close()
	var vb velerov1.Backup
	if err := json.NewDecoder(vrc).Decode(&vb); err != nil {
		t.Fatal(err)
	}
	if vb.Kind != "Backup" || vb.Name != "objects-1" || vb.Status.Phase != velerov1.BackupPhaseCompleted || vb.Status.FormatVersion != "1.1.0" || vb.Status.Expiration != nil {
		t.Fatalf("velero-backup.json: %+v", vb)
	}

	// Names never collide, listing tells complete from incomplete, delete removes everything.
	if code, _, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "--name", "objects-1"); code != 2 || !strings.Contains(errOut, "already exists") {
		t.Fatalf("second backup with the same name exited %d: %s", code, errOut)
	}
	if err := store.Put(ctx, snapshot.Prefix("half-done")+"half-done.tar.gz", strings.NewReader("partial")); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runFerry(t, "--storage", url, "backups", "list")
	if code != 0 || !regexpLine(out, `objects-1\s+complete`) || !regexpLine(out, `half-done\s+incomplete`) {
		t.Fatalf("backups list exited %d:\n%s", code, out)
	}
	for _, name := range []string{"objects-1", "half-done"} {
		if code, out, errOut := runFerry(t, "--storage", url, "backups", "delete", name); code != 0 {
			t.Fatalf("delete %s exited %d: %s %s", name, code, out, errOut)
		}
	}
	infos, err := snapshot.List(ctx, store)
	if err != nil || len(infos) != 0 {
		t.Fatalf("after deleting, storage still lists %+v (%v)", infos, err)
	}
}

// TestEncryptedBackup: with --encrypt-to, no file of the backup but the manifest holds clear data,
// Velero's copy is not written, and the archive decrypts with the identity.
func TestEncryptedBackup(t *testing.T) {
	applyPlatform(t)
	_, kc := clients(t, "blue")
	ctx := context.Background()
	const canary = "ferry-canary-5f3a9c"
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "canary", Namespace: "kubeflow"}, StringData: map[string]string{"token": canary}}
	if _, err := kc.CoreV1().Secrets("kubeflow").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	code, out, errOut := runFerry(t, "--storage", "file://"+dir, "backup", "--from", "blue", "--preset", "kubeflow", "--name", "sealed",
		"--encrypt-to", id.Recipient().String())
	if !strings.Contains(out, "the Velero-compatible copy was not written") {
		t.Fatalf("ferry backup --encrypt-to exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	wantBackupExit(t, "file://"+dir, "sealed", code, out, errOut)
	files := 0
	err = filepath.WalkDir(filepath.Join(dir, "backups", "sealed"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files++
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		name := filepath.Base(p)
		switch {
		case name == snapshot.VeleroFile:
			t.Errorf("an encrypted backup holds %s", name)
		case name == snapshot.ManifestFile || name == snapshot.ClaimFile:
		case !strings.HasSuffix(name, ".age"):
			t.Errorf("%s is not encrypted", p)
		}
		if bytes.Contains(data, []byte(canary)) || bytes.Contains(data, []byte(base64.StdEncoding.EncodeToString([]byte(canary)))) {
			t.Errorf("%s holds the secret's value in clear", p)
		}
		return nil
	})
	if err != nil || files < 3 {
		t.Fatalf("walked %d files: %v", files, err)
	}
	f, err := os.Open(filepath.Join(dir, "backups", "sealed", "sealed.tar.gz.age"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec, err := age.Decrypt(f, id)
	if err != nil {
		t.Fatal(err)
	}
	gz, err := gzip.NewReader(dec)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "resources/secrets/namespaces/kubeflow/canary.json" {
			data, _ := io.ReadAll(tr)
			found = bytes.Contains(data, []byte(base64.StdEncoding.EncodeToString([]byte(canary))))
		}
	}
	if !found {
		t.Fatal("the decrypted archive lacks the canary secret")
	}
}
