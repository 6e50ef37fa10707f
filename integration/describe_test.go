package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// TestBackupsDescribe backs blue up with a claim of known files and a claim that stays pending, then
// checks that ferry backups describe (text, JSON and YAML) counts what the manifest holds, names
// the pending claim as having nothing to copy, and describes an incomplete backup, one Velero
// wrote and a name that does not exist.
func TestBackupsDescribe(t *testing.T) {
	applyPlatform(t)
	blue, kc := clients(t, "blue")
	ctx := context.Background()
	const ns = "describe-demo"
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	removeAfter(t, ns, kc)
	for _, claim := range []string{"notes", "pending"} {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
		if _, err := kc.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("settings-%d", i)}, Data: map[string]string{"k": "v"}}
		if _, err := kc.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dir := dataDir(t, "describe-notes")
	blob := make([]byte, 1000)
	rand.NewChaCha8([32]byte{7}).Read(blob)
	files := map[string][]byte{"a.txt": []byte("hello"), "sub/b.bin": blob, "sub/c": {}}
	var fileBytes int64
	for name, data := range files {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		fileBytes += int64(len(data))
	}
	os.Symlink("a.txt", filepath.Join(dir, "link")) // not a regular file: not counted
	if err := blue.BindClaim(ctx, ns, "notes", dir); err != nil {
		t.Fatal(err)
	}

	url := backupMinIO(t, "describe")
	code, out, errOut := runFerry(t, "--storage", url, "--log-format", "json", "backup", "--from", "blue", "--preset", "kubeflow", "--name", "described")
	if !strings.Contains(out, "Backup described is complete") {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	store, m := wantBackupExit(t, url, "described", code, out, errOut)

	// Without a terminal, progress comes as log lines; the last one holds the backup's totals.
	var last map[string]any
	sc := bufio.NewScanner(strings.NewReader(errOut))
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == "progress done" {
			last = rec
		}
	}
	if last == nil || last["bytes"] != float64(m.Totals.StoredBytes) || last["objects"] != float64(len(m.Objects)) {
		t.Errorf("last progress line %v; the manifest: %d bytes stored, %d objects\nstderr: %s", last, m.Totals.StoredBytes, len(m.Objects), errOut)
	}

	// What describe should say, counted here from the manifest.
	kinds := map[string]int{}
	for _, o := range m.Objects {
		kinds[o.Group+"/"+o.Kind]++
	}
	storedFiles := 0
	if err := store.List(ctx, snapshot.Prefix("described"), func(storage.ObjectInfo) error { storedFiles++; return nil }); err != nil {
		t.Fatal(err)
	}

	code, out, errOut = runFerry(t, "--storage", url, "backups", "describe", "described", "-o", "json")
	if code != 0 {
		t.Fatalf("describe -o json exited %d: %s", code, errOut)
	}
	var d snapshot.Description
	if err := json.Unmarshal([]byte(out), &d); err != nil || d.Summary == nil {
		t.Fatalf("describe -o json: %v\n%s", err, out)
	}
	if d.Name != "described" || d.State != snapshot.Complete || d.Objects != len(m.Objects) || d.StoredBytes != m.Totals.StoredBytes ||
		d.Files != storedFiles || !d.VeleroCompatible || d.Encryption != nil || d.Source.Context != "blue" || d.DurationSeconds <= 0 ||
		d.Tool.Version == "" || d.Skipped == nil || len(d.Skipped) != len(m.Skipped) || !slices.Equal(d.NoData, m.NoData) {
		t.Errorf("describe -o json: %+v\nmanifest totals %+v, %d files stored, %d skipped", d, m.Totals, storedFiles, len(m.Skipped))
	}
	if len(d.Kinds) != len(kinds) {
		t.Errorf("describe counts %d kinds, the manifest holds %d: %v", len(d.Kinds), len(kinds), d.Kinds)
	}
	for _, k := range d.Kinds {
		if kinds[k.Group+"/"+k.Kind] != k.Count {
			t.Errorf("kind %s/%s: describe says %d, the manifest holds %d", k.Group, k.Kind, k.Count, kinds[k.Group+"/"+k.Kind])
		}
	}
	if kinds["/ConfigMap"] < 3 || kinds["/PersistentVolumeClaim"] < 2 {
		t.Errorf("the manifest lacks the test's objects: %v", kinds)
	}
	notes := -1
	for i, v := range d.Volumes {
		if v.Namespace == ns && v.Name == "notes" {
			notes = i
		}
	}
	if notes < 0 || d.Volumes[notes].Files != len(files) || d.Volumes[notes].Bytes != fileBytes || d.Volumes[notes].StoredBytes <= 0 {
		t.Errorf("volumes %+v: want %s/notes with %d files of %d bytes", d.Volumes, ns, len(files), fileBytes)
	}
	if len(d.Volumes) != len(m.Volumes) || len(d.Databases) != len(m.Databases) || len(d.Buckets) != len(m.Buckets) {
		t.Errorf("describe lists %d volumes, %d databases, %d buckets; the manifest %d, %d, %d",
			len(d.Volumes), len(d.Databases), len(d.Buckets), len(m.Volumes), len(m.Databases), len(m.Buckets))
	}
	for i, db := range m.Databases {
		var rows int64
		for _, tbl := range db.Tables {
			rows += tbl.Rows
		}
		if got := d.Databases[i]; got.Name != db.Name || got.Tables != len(db.Tables) || got.Rows != rows || got.DumpBytes != db.Bytes {
			t.Errorf("database %s: describe %+v; the manifest %d tables, %d rows, %d bytes", db.Name, got, len(db.Tables), rows, db.Bytes)
		}
	}
	for i, b := range m.Buckets {
		if got := d.Buckets[i]; got.Name != b.Name || got.Objects != len(b.Objects) || got.Bytes != b.Bytes {
			t.Errorf("bucket %s: describe %+v; the manifest %d objects, %d bytes", b.Name, got, len(b.Objects), b.Bytes)
		}
	}
	if !slices.ContainsFunc(m.NoData, func(s snapshot.Skipped) bool { return s.Name == ns+"/pending" }) ||
		slices.ContainsFunc(m.Skipped, func(s snapshot.Skipped) bool { return s.Name == ns+"/pending" }) {
		t.Errorf("the manifest does not list %s/pending as having no data (skipped %+v, no data %+v)", ns, m.Skipped, m.NoData)
	}
	skippedLine := `NOT IN THIS BACKUP\s+nothing: every item the plan named was backed up$`
	if len(m.Skipped) > 0 {
		skippedLine = fmt.Sprintf(`NOT IN THIS BACKUP\s+%d$`, len(m.Skipped))
	}

	code, out, errOut = runFerry(t, "--storage", url, "backups", "describe", "described")
	if code != 0 {
		t.Fatalf("describe exited %d: %s", code, errOut)
	}
	for _, want := range []string{
		`Name:\s+described$`, `State:\s+complete$`, `Source cluster:\s+blue \(https://127\.0\.0\.1:\d+\), Kubernetes v`, `Duration:\s+\S+`,
		`Encryption:\s+none$`, `Velero-compatible:\s+yes`, fmt.Sprintf(`Stored:\s+.* in %d files$`, storedFiles),
		fmt.Sprintf(`OBJECTS\s+%d `, len(m.Objects)), fmt.Sprintf(`  \(core\)\s+ConfigMap\s+%d$`, kinds["/ConfigMap"]),
		fmt.Sprintf(`  %s/notes\s+%d\s+1005 B\s+`, ns, len(files)), fmt.Sprintf(`VOLUMES\s+%d$`, len(m.Volumes)),
		fmt.Sprintf(`DATABASES\s+%d$`, len(m.Databases)), fmt.Sprintf(`BUCKETS\s+%d$`, len(m.Buckets)),
		skippedLine, fmt.Sprintf(`NOTHING TO COPY\s+%d \(no data, not a loss\)$`, len(m.NoData)), `  volume ` + ns + `/pending: the claim has no volume yet \(pending\)`,
	} {
		if !regexpLine(out, want) {
			t.Errorf("describe's report lacks a line matching %q:\n%s", want, out)
		}
	}
	code, out, errOut = runFerry(t, "--storage", url, "backups", "describe", "described", "-o", "yaml")
	var fromYAML snapshot.Description
	if err := yaml.Unmarshal([]byte(out), &fromYAML); code != 0 || err != nil || fromYAML.Summary == nil || fromYAML.Objects != len(m.Objects) {
		t.Errorf("describe -o yaml exited %d (%v): %s %s", code, err, out, errOut)
	}

	// An incomplete backup (no manifest), one Velero wrote, and names that are not there.
	local := t.TempDir()
	os.MkdirAll(filepath.Join(local, "backups", "half-done"), 0o755)
	if err := os.WriteFile(filepath.Join(local, "backups", "half-done", "half-done.tar.gz"), []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runFerry(t, "--storage", "file://"+local, "backups", "describe", "half-done")
	if code != 0 || !regexpLine(out, `State:\s+incomplete$`) || !regexpLine(out, `Stored:\s+7 B in 1 file$`) ||
		!strings.Contains(out, "has no ferry-manifest.json") || !strings.Contains(out, "`ferry backups delete half-done` removes it") {
		t.Errorf("describe of an incomplete backup exited %d:\n%s%s", code, out, errOut)
	}
	code, out, _ = runFerry(t, "--storage", "file://"+local, "backups", "describe", "half-done", "-o", "json")
	var half snapshot.Description
	if err := json.Unmarshal([]byte(out), &half); code != 0 || err != nil || half.State != snapshot.Incomplete || half.Files != 1 || half.Bytes != 7 || half.Summary != nil {
		t.Errorf("describe -o json of an incomplete backup exited %d (%v): %s", code, err, out)
	}
	os.MkdirAll(filepath.Join(local, "backups", "nightly"), 0o755)
	velero := `{"apiVersion":"velero.io/v1","kind":"Backup","metadata":{"name":"nightly","namespace":"velero"},"spec":{"includedNamespaces":["team-a"],"storageLocation":"default"},
"status":{"phase":"PartiallyFailed","formatVersion":"1.1.0","startTimestamp":"2026-05-01T01:00:00Z","completionTimestamp":"2026-05-01T01:02:00Z","progress":{"totalItems":40,"itemsBackedUp":38},"errors":2}}`
	if err := os.WriteFile(filepath.Join(local, "backups", "nightly", snapshot.VeleroFile), []byte(velero), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runFerry(t, "--storage", "file://"+local, "backups", "describe", "nightly")
	if code != 0 || !regexpLine(out, `State:\s+velero$`) || !regexpLine(out, `Phase:\s+PartiallyFailed$`) || !regexpLine(out, `Items:\s+38 of 40 backed up$`) ||
		!regexpLine(out, `Errors, warnings:\s+2, 0$`) || !regexpLine(out, `Duration:\s+2m0s$`) || !regexpLine(out, `Namespaces:\s+team-a$`) {
		t.Errorf("describe of a Velero backup exited %d:\n%s%s", code, out, errOut)
	}
	for _, name := range []string{"no-such-backup", "Not_A_Name"} {
		code, out, errOut = runFerry(t, "--storage", "file://"+local, "backups", "describe", name)
		if code != 2 || out != "" || !strings.Contains(errOut, name) {
			t.Errorf("describe %s exited %d, want 2 with a message naming it:\n%s%s", name, code, out, errOut)
		}
	}
	if code, _, errOut := runFerry(t, "--storage", "file://"+local, "backups", "describe"); code != 2 {
		t.Errorf("describe without a name exited %d: %s", code, errOut)
	}
}
