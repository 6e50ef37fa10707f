package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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
	// Tar, whose stored stream this test reads (chunked volumes: TestChunkedVolumeBackups).
	code, out, errOut := runFerry(t, "--storage", "file://"+storeDir, "backup", "--from", "blue", "--preset", "kubeflow", "--name", "with-volume", "--volume-format", "tar")
	if strings.Contains(out, "volume "+ns+"/"+claim) {
		t.Fatalf("ferry backup exited %d, naming %s/%s\nstdout: %s\nstderr: %s", code, ns, claim, out, errOut)
	}
	store, m := wantBackupExit(t, "file://"+storeDir, "with-volume", code, out, errOut)
	i := slices.IndexFunc(m.Volumes, func(v snapshot.Volume) bool { return v.Namespace == ns && v.Name == claim })
	if i < 0 {
		t.Fatalf("manifest volumes %+v lack %s/%s", m.Volumes, ns, claim)
	}
	v := m.Volumes[i]
	byPath := map[string]snapshot.File{}
	for _, f := range volumeFiles(t, store, "with-volume", v) {
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

	tr := tar.NewReader(bytes.NewReader(readStored(t, store, "with-volume", v.Key, nil)))
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
// encrypted) through part URLs ferry presigns, ferry completes the upload, and the manifest still
// lists every file.
func TestBackupMoverDirect(t *testing.T) {
	fixture := applyPlatform(t)
	blue, kc := clients(t, "blue")
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
	code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "--include-namespaces", ns, "--name", "direct",
		"--mover-direct", "--encrypt-to", id.Recipient().String())
	// Its namespace only; the claim must not be among what is skipped.
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
	if listed := volumeFiles(t, store, "direct", v, id); len(listed) != 1 || listed[0].SHA256 != hex.EncodeToString(sum[:]) || !strings.HasSuffix(v.Key, ".age") ||
		v.List == nil || !strings.HasSuffix(v.List.Key, ".age") || v.Files != nil {
		t.Fatalf("volume entry %+v, list %+v, files %+v", v, v.List, listed)
	}
	info, err := store.Stat(ctx, snapshot.Prefix("direct")+v.Key)
	if err != nil {
		t.Fatal(err)
	}
	if j := slices.IndexFunc(m.Streams, func(s snapshot.Stream) bool { return s.Key == v.Key }); j < 0 || m.Streams[j].Bytes != info.Size {
		t.Fatalf("the manifest does not record the stored stream %s (%d bytes)", v.Key, info.Size)
	}
	// ferry completed the mover's upload: none is left unfinished.
	uploads, err := tb.MinIO["backup"].S3Client().ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("backups")})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range uploads.Uploads {
		if strings.HasPrefix(aws.ToString(u.Key), "direct/") {
			t.Errorf("unfinished upload of %s left behind", aws.ToString(u.Key))
		}
	}
	tr := tar.NewReader(bytes.NewReader(readStored(t, store, "direct", v.Key, id)))
	root, err := tr.Next() // the claim's root folder, then its file
	if err != nil || root.Name != "./" || v.Root == nil {
		t.Fatalf("first entry %v, %v; the manifest's root folder %v", root, err, v.Root)
	}
	h, err := tr.Next()
	if err != nil || h.Name != "session.rds" {
		t.Fatalf("second entry %v, %v", h, err)
	}
	got, _ := io.ReadAll(tr)
	if string(got) != string(data) {
		t.Fatal("the uploaded volume differs")
	}

	// Nothing in clear: no Secret value of blue and no content of a file, row or bucket object
	// appears in any stored byte (the manifest holds names and digests only).
	needles := [][]byte{data[:64], []byte("run-499"), []byte(`{"accuracy": 0.93}`)}
	secrets, err := kc.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		for _, v := range s.Data {
			// Long enough not to occur by chance among names (a user called "postgres" does).
			if len(v) >= 10 {
				needles = append(needles, v, []byte(base64.StdEncoding.EncodeToString(v)))
			}
		}
	}
	scanned := 0
	err = store.List(ctx, snapshot.Prefix("direct"), func(o storage.ObjectInfo) error {
		rc, err := store.Get(ctx, o.Key)
		if err != nil {
			return err
		}
		stored, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return err
		}
		scanned++
		for _, n := range needles {
			if bytes.Contains(stored, n) {
				t.Errorf("%s holds %q in clear", o.Key, n[:min(len(n), 20)])
			}
		}
		return nil
	})
	if err != nil || scanned < 5 {
		t.Fatalf("scanned %d stored files: %v", scanned, err)
	}
}

// TestBackupOfRealData backs up blue with real-sized data: a claim holding a 1 GiB file, 10,000
// small files, symlinks, empty directories, unusual modes and non-ASCII names; MariaDB schemas with
// BLOBs and unicode; nested bucket keys. Every file, table and bucket object in the manifest is
// checked against what blue holds, counted independently.
func TestBackupOfRealData(t *testing.T) {
	if testing.Short() {
		t.Skip("moves a gigabyte")
	}
	// The platform with its MySQL and MinIO pods running (run alone, no other test started them).
	blueMySQL(t)
	blueMinIO(t)
	blue, kc := clients(t, "blue")
	ctx := context.Background()

	// The claim's contents.
	const ns, claim = "big-data", "archive"
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}}}}
	if _, err := kc.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := dataDir(t, claim)
	big, err := os.Create(filepath.Join(dir, "dataset-1GiB.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(big, io.LimitReader(rand.NewChaCha8([32]byte{3}), 1<<30)); err != nil {
		t.Fatal(err)
	}
	big.Close()
	for i := range 10000 {
		sub := filepath.Join(dir, "small", fmt.Sprintf("%02d", i%100))
		os.MkdirAll(sub, 0o755)
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%05d.txt", i)), []byte(fmt.Sprintf("file %d\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, mode := range map[string]os.FileMode{"données-été.csv": 0o400, "日本語のノート.md": 0o754, "setgid-dir/x": 0o2770} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name), 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(dir, name), mode)
	}
	os.MkdirAll(filepath.Join(dir, "empty", "deeper"), 0o711)
	os.Symlink("dataset-1GiB.bin", filepath.Join(dir, "latest"))
	os.Symlink("../nowhere", filepath.Join(dir, "dangling"))
	if err := blue.BindClaim(ctx, ns, claim, dir); err != nil {
		t.Fatal(err)
	}

	// The databases and the bucket.
	db := tb.MariaDB["blue"]
	if _, err := db.SQL(ctx, tb.Bins, `DROP DATABASE IF EXISTS katib; CREATE DATABASE katib CHARACTER SET utf8mb4;
CREATE TABLE katib.observation_logs (id INT PRIMARY KEY, trial VARCHAR(64), payload LONGBLOB);
INSERT INTO katib.observation_logs VALUES (1, 'trial-α', RANDOM_BYTES(1024)), (2, 'испытание', UNHEX(REPEAT('00FF', 4096))), (3, '試行', NULL);
DROP DATABASE IF EXISTS metadb; CREATE DATABASE metadb; CREATE TABLE metadb.artifacts (uri TEXT, props JSON);
INSERT INTO metadb.artifacts VALUES ('minio://mlpipeline/v2/a', '{"k": "välue"}');`); err != nil {
		t.Fatal(err)
	}
	s3c := tb.MinIO["blue"].S3Client()
	if err := tb.MinIO["blue"].CreateBucket(ctx, "mlpipeline"); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		key := fmt.Sprintf("v2/artifacts/pipeline-%d/run-%d/step/output-%d.tgz", i%3, i%7, i)
		if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("mlpipeline"), Key: aws.String(key), Body: strings.NewReader(key)}); err != nil {
			t.Fatal(err)
		}
	}

	url := backupMinIO(t, "realdata")
	start := time.Now()
	code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "--preset", "kubeflow", "--name", "real-data")
	t.Logf("backup took %s", time.Since(start).Round(time.Millisecond))
	if (code != 0 && code != 3) || strings.Contains(out, "volume "+ns+"/"+claim) {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	store, m := readManifest(t, url, "real-data")

	// Files: walk the folder ourselves.
	i := slices.IndexFunc(m.Volumes, func(v snapshot.Volume) bool { return v.Namespace == ns && v.Name == claim })
	if i < 0 {
		t.Fatalf("no volume %s/%s in the manifest", ns, claim)
	}
	inManifest := map[string]snapshot.File{}
	for _, f := range volumeFiles(t, store, "real-data", m.Volumes[i]) {
		inManifest[strings.TrimSuffix(f.Path, "/")] = f
	}
	walked := 0
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		walked++
		f, ok := inManifest[filepath.ToSlash(rel)]
		info, _ := d.Info()
		switch {
		case !ok:
			t.Errorf("%s is not in the manifest", rel)
		case d.Type().IsRegular() && (f.Size != info.Size() || f.Mode != fmt.Sprintf("%#o", info.Mode().Perm()|setgid(info))):
			t.Errorf("%s: manifest size %d mode %s, the folder %d %o", rel, f.Size, f.Mode, info.Size(), info.Mode())
		}
		return nil
	})
	if err != nil || walked != len(inManifest) {
		t.Fatalf("the folder holds %d entries, the manifest %d (%v)", walked, len(inManifest), err)
	}
	sum := sha256.New()
	bf, _ := os.Open(filepath.Join(dir, "dataset-1GiB.bin"))
	io.Copy(sum, bf)
	bf.Close()
	if got := inManifest["dataset-1GiB.bin"].SHA256; got != hex.EncodeToString(sum.Sum(nil)) {
		t.Errorf("the 1 GiB file's digest in the manifest is %s", got)
	}

	// Tables: ask the server.
	rows, err := db.SQL(ctx, tb.Bins, "SELECT table_schema, table_name, table_rows FROM information_schema.tables WHERE table_schema NOT IN ('mysql','information_schema','performance_schema','sys') AND table_type='BASE TABLE'")
	if err != nil {
		t.Fatal(err)
	}
	dump := m.Databases[slices.IndexFunc(m.Databases, func(d snapshot.Database) bool { return d.Name == "kfp-mysql" })]
	tables := strings.Count(strings.TrimSpace(rows), "\n") + 1
	if len(dump.Tables) != tables {
		t.Errorf("the server has %d tables, the manifest %d", tables, len(dump.Tables))
	}
	for _, tbl := range dump.Tables {
		n, err := db.SQL(ctx, tb.Bins, fmt.Sprintf("SELECT COUNT(*) FROM `%s`.`%s`", tbl.Schema, tbl.Name))
		if err != nil || strings.TrimSpace(n) != fmt.Sprint(tbl.Rows) {
			t.Errorf("%s.%s: the server counts %s rows, the manifest %d (%v)", tbl.Schema, tbl.Name, strings.TrimSpace(n), tbl.Rows, err)
		}
	}

	// Bucket objects: list the store.
	listed, err := s3c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("mlpipeline")})
	if err != nil {
		t.Fatal(err)
	}
	b := m.Buckets[slices.IndexFunc(m.Buckets, func(b snapshot.Bucket) bool { return b.Name == "mlpipeline" })]
	if len(listed.Contents) != len(b.Objects) {
		t.Errorf("the store holds %d objects, the manifest %d", len(listed.Contents), len(b.Objects))
	}
}

func setgid(info fs.FileInfo) fs.FileMode {
	if info.Mode()&fs.ModeSetgid != 0 {
		return 0o2000
	}
	return 0
}
