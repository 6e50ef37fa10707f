package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/migrate"
	"github.com/ferrykube/ferry/snapshot"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Where TestRollbackCarriesGreensWritesBack keeps its data, on blue and on green alike: a
// namespace of its own (ConfigMaps, a Secret, a claim), a table in the platform's mlpipeline schema
// and a prefix in the platform's mlpipeline bucket. Blue and the testbed's servers are shared by
// every test of the package, so the test removes them when it ends.
const (
	carryNS     = "carry-back"
	carryClaim  = "notes"
	carryTable  = "mlpipeline.carry_back_rows"
	carryPrefix = "carry-back/"
)

// TestRollbackCarriesGreensWritesBack migrates blue to green with a client sending requests all
// along, lets green take writes of every kind (rows, files of a claim, bucket objects, Kubernetes
// objects created, changed and deleted), and rolls back: a plain rollback refuses, naming what it
// would lose; rollback --carry-back, killed (SIGKILL) twice and resumed, brings green's writes to
// blue, verifies blue and puts traffic and the writers back on blue. The user then finds on blue
// exactly what green held, no step ran twice, and no request failed.
func TestRollbackCarriesGreensWritesBack(t *testing.T) {
	blueMySQL(t)
	blueMinIO(t)
	_, greenKC := cutover(t)
	blue, blueKC := clients(t, "blue")
	ctx := context.Background()
	blueDB, greenDB := tb.MariaDB["blue"], tb.MariaDB["green"]
	blueS3, greenS3 := tb.MinIO["blue"], tb.MinIO["green"]
	removeCarryBack(t, blueKC, greenKC) // what an interrupted earlier run may have left
	t.Cleanup(func() { removeCarryBack(t, blueKC, greenKC) })

	// 1. Blue's data, before the run.
	if _, err := blueKC.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: carryNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	keptData := map[string]string{"k": "v"}
	for name, data := range map[string]map[string]string{"kept": keptData, "edited": {"a": "1", "b": "2"}, "trimmed": {"a": "1", "b": "2"}, "doomed": {"x": "y"}} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}
		if _, err := blueKC.CoreV1().ConfigMaps(carryNS).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// gp3 is a class of the platform's claims, which the run's ferry.yaml maps to green's standard.
	createClaim(t, blueKC, carryNS, carryClaim, ptr.To("gp3"))
	blueDir := dataDir(t, carryNS+"-"+carryClaim)
	writeClaimFiles(t, blueDir, map[string][]byte{
		"keep.txt":       []byte("kept as it is\n"),
		"change.txt":     []byte("written on blue\n"),
		"gone.txt":       []byte("deleted on green\n"),
		"dir/nested.txt": []byte("nested, kept\n"),
	})
	if err := blue.BindClaim(ctx, carryNS, carryClaim, blueDir); err != nil {
		t.Fatal(err)
	}
	if _, err := blueDB.SQL(ctx, tb.Bins, `DROP TABLE IF EXISTS `+carryTable+`;
CREATE TABLE `+carryTable+` (id INT PRIMARY KEY, note VARCHAR(64));
INSERT INTO `+carryTable+` VALUES (1, 'one'), (2, 'two, deleted on green'), (3, 'three');`); err != nil {
		t.Fatal(err)
	}
	putObjects(t, blueS3, map[string][]byte{
		carryPrefix + "keep.txt":   []byte("kept as it is"),
		carryPrefix + "change.txt": []byte("written on blue"),
		carryPrefix + "doomed.txt": []byte("deleted on green"),
	})

	// 2. The migration to green, behind HAProxy, with a client sending requests all along.
	blueSrv, greenSrv := colorServer(t, "blue", nil), colorServer(t, "green", nil)
	h, err := tb.StartHAProxy(ctx, "carry-back", blueSrv.Listener.Addr().String(), greenSrv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Stop() }) // after later cleanups, which may roll back through it
	weight := func(t *testing.T, server string) string {
		t.Helper()
		out, err := h.Command(ctx, "get weight "+h.Backend+"/"+server)
		if err != nil {
			t.Fatalf("HAProxy's weight of %s: %v", server, err)
		}
		return strings.TrimSpace(out)
	}
	blueWeight, _, _ := strings.Cut(weight(t, h.BlueServer), " ")
	client := startTrafficClient(t, h.URL)
	writers, _ := replicasOf(t, blueKC, "kubeflow", "ml-pipeline")
	url := backupMinIO(t, "rollback-carry-back")
	config := migrateConfig(t, h, greenSrv.URL)

	// What the steps pass on to the next ones.
	var (
		id, greenDir  string
		added, newBin []byte
		secret        *corev1.Secret
		took          time.Duration
		j             *migrate.Journal
		cb            *migrate.CarryBackSummary
	)
	runSteps(t, step{"migrate to green", func(t *testing.T) {
		client.phase.Store("migrate")
		code, out, errOut := runFerry(t, "--storage", url, "migrate", "--from", "blue", "--to", "cutover", "-f", config,
			"--allow-skipped", "--lease-ttl", testLeaseTTL.String())
		id = runID(t, errOut)
		wantEnded(t, url, id, "ferry migrate", code, out, errOut)
		if !strings.Contains(out, "shifted") {
			t.Fatalf("ferry migrate did not shift\nstdout: %s\nstderr: %s", out, errOut)
		}
		client.phase.Store("shifted")
		if share := client.share(t, "shifted", 100); share != 100 {
			t.Fatalf("after the migration green took %.1f%% of the requests, want all", share)
		}
		greenDir = claimFolder(t, greenKC, carryNS, carryClaim)
		if want, got := claimFiles(t, blueDir), claimFiles(t, greenDir); !maps.Equal(want, got) {
			t.Fatalf("the migration did not bring %s/%s to green as blue had it:\n%s", carryNS, carryClaim, lineDiff(fileLines(want), fileLines(got)))
		}
	}}, step{"green takes writes", func(t *testing.T) {
		// 3. Green takes writes: rows, files, bucket objects, Kubernetes objects.
		client.phase.Store("green-writes")
		if _, err := greenDB.SQL(ctx, tb.Bins, `INSERT INTO `+carryTable+` VALUES (4, 'four, written on green'), (5, 'five, written on green');
DELETE FROM `+carryTable+` WHERE id = 2;`); err != nil {
			t.Fatal(err)
		}
		added = make([]byte, 48<<10+5)
		rand.NewChaCha8([32]byte{'c', 'a', 'r', 'r', 'y'}).Read(added)
		writeClaimFiles(t, greenDir, map[string][]byte{"change.txt": []byte("changed on green\n"), "new/added.bin": added})
		if err := os.Remove(filepath.Join(greenDir, "gone.txt")); err != nil {
			t.Fatal(err)
		}
		newBin = make([]byte, 70<<10+1)
		rand.NewChaCha8([32]byte{'b', 'i', 'n'}).Read(newBin)
		putObjects(t, greenS3, map[string][]byte{carryPrefix + "change.txt": []byte("changed on green"), carryPrefix + "new.bin": newBin})
		if _, err := greenS3.S3Client().DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(testbed.PlatformBucket), Key: aws.String(carryPrefix + "doomed.txt")}); err != nil {
			t.Fatal(err)
		}
		greenCMs := greenKC.CoreV1().ConfigMaps(carryNS)
		edited, err := greenCMs.Get(ctx, "edited", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the migration did not bring ConfigMap edited to green: %v", err)
		}
		edited.Data = map[string]string{"a": "10"}
		if edited.Labels == nil {
			edited.Labels = map[string]string{}
		}
		edited.Labels["edited-on"] = "green"
		if _, err := greenCMs.Update(ctx, edited, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Only a key removed: blue's copy holds all of green's and more, which must go too.
		trimmed, err := greenCMs.Get(ctx, "trimmed", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		delete(trimmed.Data, "b")
		if _, err := greenCMs.Update(ctx, trimmed, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := greenCMs.Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := greenCMs.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "created"}, Data: map[string]string{"made-on": "green"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "created-secret"}, Data: map[string][]byte{"token": []byte("made on green")}}
		if _, err := greenKC.CoreV1().Secrets(carryNS).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}

	}}, step{"a plain rollback refuses, naming the writes", func(t *testing.T) {
		// 4. A plain rollback would lose those writes: it refuses and names them.
		atRisk := []string{"database kfp-mysql", "volume " + carryNS + "/" + carryClaim, "bucket " + testbed.PlatformBucket,
			"v1 ConfigMap " + carryNS + "/created", "v1 Secret " + carryNS + "/created-secret",
			"v1 ConfigMap " + carryNS + "/edited", "v1 ConfigMap " + carryNS + "/trimmed", "v1 ConfigMap " + carryNS + "/doomed", "--carry-back", "--discard-green-writes"}
		code, out, errOut := runFerry(t, "--storage", url, "rollback", "--run", id)
		if code != 4 {
			t.Fatalf("rollback without a flag after green took writes exited %d, want 4 (a refusal to lose data)\nstdout: %s\nstderr: %s", code, out, errOut)
		}
		for _, want := range atRisk {
			if !strings.Contains(errOut, want) {
				t.Errorf("the refused rollback does not name %q:\n%s", want, errOut)
			}
		}
		t.Logf("the refused rollback: %s", strings.TrimSpace(errOut))
		if strings.Contains(errOut, "v1 ConfigMap "+carryNS+"/kept") {
			t.Errorf("the refused rollback names ConfigMap kept, which green never changed:\n%s", errOut)
		}
		if w := weight(t, h.BlueServer); !strings.HasPrefix(w, "0 ") {
			t.Errorf("blue's weight after a refused rollback: %q, want 0 (traffic stays on green)", w)
		}

	}}, step{"the carry-back, killed three times and resumed", func(t *testing.T) {
		// 5. The carry-back, killed right after green's backup, as the restore onto blue begins and
		// as it begins writing into blue (every stream checked), then resumed by the same command.
		client.phase.Store("carry-back")
		carryBack := []string{"--storage", url, "rollback", "--run", id, "--carry-back", "--lease-ttl", testLeaseTTL.String()}
		start := time.Now()
		for _, at := range []string{"green-backed-up:done", "carried-back:begin", "carried-back:note"} {
			code, out, errOut := runFerry(t, append(slices.Clone(carryBack), "--crash-at", at)...)
			if code != -1 { // killed by its signal
				t.Fatalf("rollback --carry-back should have been killed at %s, exited %d\nstdout: %s\nstderr: %s", at, code, out, errOut)
			}
			if w := weight(t, h.BlueServer); !strings.HasPrefix(w, "0 ") {
				t.Errorf("blue's weight after the carry-back was killed at %s: %q, want 0 (traffic moves once blue is verified)", at, w)
			}
			time.Sleep(testLeaseTTL + 100*time.Millisecond) // the killed run's lease expires
		}
		// Blue may now hold part of green's data: discarding green's writes is refused.
		code, out, errOut := runFerry(t, "--storage", url, "rollback", "--run", id, "--discard-green-writes", "--lease-ttl", testLeaseTTL.String())
		if code != 4 || !strings.Contains(errOut, "began writing green's data into blue and did not finish") || !strings.Contains(errOut, "--despite-partial-carry-back") {
			t.Errorf("rollback --discard-green-writes after the carry-back began writing into blue exited %d, want 4 naming it\nstdout: %s\nstderr: %s", code, out, errOut)
		}
		code, out, errOut = runFerry(t, carryBack...)
		if code != 0 {
			t.Fatalf("the resumed rollback --carry-back exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
		took = time.Since(start)
		client.phase.Store("rolled-back")

	}}, step{"blue holds green's writes", func(t *testing.T) {
		// 6. What a user checks on blue: the rows, the files, the objects of the bucket and of
		// Kubernetes are green's.
		wantRows := "1\tone\n3\tthree\n4\tfour, written on green\n5\tfive, written on green\n"
		if b, g := tableRows(t, blueDB), tableRows(t, greenDB); b != g || b != wantRows {
			t.Errorf("%s on blue:\n%s\non green:\n%s\nwant both:\n%s", carryTable, b, g, wantRows)
		}
		blueFiles, greenFiles := claimFiles(t, claimFolder(t, blueKC, carryNS, carryClaim)), claimFiles(t, greenDir)
		if !maps.Equal(blueFiles, greenFiles) {
			t.Errorf("blue's %s/%s differs from green's:\n%s", carryNS, carryClaim, lineDiff(fileLines(greenFiles), fileLines(blueFiles)))
		}
		if _, ok := blueFiles["gone.txt"]; ok {
			t.Error("gone.txt, deleted on green, is still on blue")
		}
		if got, want := blueFiles["new/added.bin"], fileDigest(added); got != want {
			t.Errorf("new/added.bin on blue: %q, want green's %q", got, want)
		}
		blueObjects, greenObjects := bucketContents(t, blueS3, testbed.PlatformBucket, carryPrefix), bucketContents(t, greenS3, testbed.PlatformBucket, carryPrefix)
		if keys := slices.Sorted(maps.Keys(blueObjects)); !maps.EqualFunc(blueObjects, greenObjects, bytes.Equal) ||
			!slices.Equal(keys, []string{carryPrefix + "change.txt", carryPrefix + "keep.txt", carryPrefix + "new.bin"}) {
			t.Errorf("blue's bucket holds %v under %s, green's %v; want green's: change.txt, keep.txt and new.bin",
				keys, carryPrefix, slices.Sorted(maps.Keys(greenObjects)))
		}
		blueCMs := blueKC.CoreV1().ConfigMaps(carryNS)
		if cm, err := blueCMs.Get(ctx, "edited", metav1.GetOptions{}); err != nil || !maps.Equal(cm.Data, map[string]string{"a": "10"}) || cm.Labels["edited-on"] != "green" {
			t.Errorf("ConfigMap edited on blue: %+v (%v), want data a=10 only and the label edited-on=green", cm, err)
		}
		if cm, err := blueCMs.Get(ctx, "trimmed", metav1.GetOptions{}); err != nil || !maps.Equal(cm.Data, map[string]string{"a": "1"}) {
			t.Errorf("ConfigMap trimmed on blue: %+v (%v), want key b removed as on green", cm, err)
		}
		if _, err := blueCMs.Get(ctx, "doomed", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("ConfigMap doomed, deleted on green, on blue: %v; want not found", err)
		}
		if cm, err := blueCMs.Get(ctx, "created", metav1.GetOptions{}); err != nil || !maps.Equal(cm.Data, map[string]string{"made-on": "green"}) {
			t.Errorf("ConfigMap created on blue: %+v (%v), want green's data", cm, err)
		}
		if s, err := blueKC.CoreV1().Secrets(carryNS).Get(ctx, "created-secret", metav1.GetOptions{}); err != nil || !maps.EqualFunc(s.Data, secret.Data, bytes.Equal) {
			t.Errorf("Secret created-secret on blue: %v (%v), want green's data", s, err)
		}
		if cm, err := blueCMs.Get(ctx, "kept", metav1.GetOptions{}); err != nil || !maps.Equal(cm.Data, keptData) {
			t.Errorf("ConfigMap kept on blue: %+v (%v), want it unchanged", cm, err)
		}

	}}, step{"traffic and writers are blue's", func(t *testing.T) {
		// Traffic and writers are blue's again, green's writers stopped.
		if w := weight(t, h.GreenServer); !strings.HasPrefix(w, "0 ") {
			t.Errorf("green's weight after the rollback: %q, want 0", w)
		}
		if w := weight(t, h.BlueServer); !strings.HasPrefix(w, blueWeight+" ") {
			t.Errorf("blue's weight after the rollback: %q, want its saved %s", w, blueWeight)
		}
		if got, quiesced := replicasOf(t, blueKC, "kubeflow", "ml-pipeline"); got != writers || quiesced {
			t.Errorf("blue's ml-pipeline after the rollback: %d replicas (quiesce record %v), want %d running", got, quiesced, writers)
		}
		if got, quiesced := replicasOf(t, greenKC, "kubeflow", "ml-pipeline"); got != 0 || !quiesced {
			t.Errorf("green's ml-pipeline after the rollback: %d replicas (quiesce record %v), want stopped", got, quiesced)
		}

	}}, step{"the journal", func(t *testing.T) {
		// The journal: each step of the carry-back done once, in order; carried-back begun again after
		// the kill at its begin; nothing failed.
		j = journal(t, url, id)
		steps := []migrate.State{migrate.GreenQuiesced, migrate.GreenBackedUp, migrate.CarriedBack, migrate.BlueVerified, migrate.RolledBack}
		begins, dones := map[migrate.State]int{}, map[migrate.State]int{}
		var doneOrder []migrate.State
		for _, e := range j.Events() {
			switch e.Phase {
			case migrate.Begin:
				begins[e.State]++
			case migrate.Done:
				dones[e.State]++
				if slices.Contains(steps, e.State) {
					doneOrder = append(doneOrder, e.State)
				}
			case migrate.Failed:
				t.Errorf("event %d: %s failed: %s", e.Seq, e.State, e.Detail)
			}
		}
		for _, s := range steps {
			want := 1
			if s == migrate.CarriedBack {
				want = 3 // killed after it began and as it wrote: begun again twice, finished once
			}
			if begins[s] != want || dones[s] != 1 {
				t.Errorf("%s began %d times and finished %d times, want %d and 1", s, begins[s], dones[s], want)
			}
		}
		if !slices.Equal(doneOrder, steps) {
			t.Errorf("the carry-back's steps finished in the order %v, want %v", doneOrder, steps)
		}

	}}, step{"the report", func(t *testing.T) {
		// The report, and the backup of green it names.
		rep := migrate.BuildReport(j)
		cb = rep.CarryBack
		if rep.State != migrate.RolledBack || cb == nil {
			t.Fatalf("the report should say rolled back with a carry-back: state %s, carry-back %+v", rep.State, cb)
		}
		if cb.Backup != id+"-carry-back" || cb.RequestedAt.IsZero() {
			t.Errorf("the carry-back's backup %q requested at %s; want %s-carry-back and a time", cb.Backup, cb.RequestedAt, id)
		}
		if v := cb.Verification; v == nil || len(v.Items) > 0 || len(v.Counts) == 0 {
			t.Errorf("blue's verification against green's backup should be clean and count what it checked: %+v", v)
		}
		if o := cb.Objects; o == nil {
			t.Error("the report does not name the objects carried back")
		} else {
			for _, c := range []struct {
				what   string
				got    []string
				want   []string
				absent string
			}{
				{"created", o.Created, []string{"v1 ConfigMap " + carryNS + "/created", "v1 Secret " + carryNS + "/created-secret"}, "v1 ConfigMap " + carryNS + "/kept"},
				{"changed", o.Changed, []string{"v1 ConfigMap " + carryNS + "/edited", "v1 ConfigMap " + carryNS + "/trimmed"}, "v1 ConfigMap " + carryNS + "/kept"},
				{"deleted", o.Deleted, []string{"v1 ConfigMap " + carryNS + "/doomed"}, "v1 ConfigMap " + carryNS + "/kept"},
			} {
				for _, w := range c.want {
					if !slices.Contains(c.got, w) {
						t.Errorf("the report's objects %s on green %v lack %q", c.what, c.got, w)
					}
				}
				if slices.Contains(c.got, c.absent) {
					t.Errorf("the report's objects %s on green name %q, which green never changed", c.what, c.absent)
				}
			}
		}
		if cb.Seconds <= 0 || cb.ToBlueSeconds <= 0 {
			t.Errorf("the report's carry-back took %.1fs and traffic went back to blue after %.1fs; want both measured", cb.Seconds, cb.ToBlueSeconds)
		}
		code, out, errOut := runFerry(t, "--storage", url, "migrate", "status", id, "-o", "json")
		var status struct {
			CarryBack *migrate.CarryBackSummary `json:"carryBack"`
		}
		if err := json.Unmarshal([]byte(out), &status); code != 0 || err != nil || status.CarryBack == nil || status.CarryBack.Backup != cb.Backup {
			t.Errorf("ferry migrate status -o json exited %d (%v), want its carryBack naming %s\nstdout: %s\nstderr: %s", code, err, cb.Backup, out, errOut)
		}
		_, m := readManifest(t, url, id+"-carry-back")
		if !slices.ContainsFunc(m.Volumes, func(v snapshot.Volume) bool { return v.Namespace == carryNS && v.Name == carryClaim }) {
			t.Errorf("the backup of green %s-carry-back lacks the volume %s/%s", id, carryNS, carryClaim)
		}

	}}, step{"the client", func(t *testing.T) {
		// The client: blue takes all the traffic again, and no request failed the whole time.
		if share := client.share(t, "rolled-back", 100); share != 0 {
			t.Errorf("after the rollback green took %.1f%% of the requests, want none", share)
		}
		client.mu.Lock()
		defer client.mu.Unlock()
		if len(client.failed) > 0 {
			t.Errorf("the client saw %d failed requests, e.g. %s", len(client.failed), client.failed[0])
		}
		t.Logf("run %s: carry-back %.1fs from green's quiesce to blue verified, traffic and writers back on blue %.1fs after the request; "+
			"the three rollback --carry-back commands took %s; requests %v", id, cb.Seconds, cb.ToBlueSeconds, took.Round(time.Millisecond), client.counts)
	}})
}

// writeClaimFiles writes files (paths with slashes) into a claim's folder, making their folders.
func writeClaimFiles(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for name, data := range files {
		file := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// claimFiles lists a claim's folder: each entry's path to "dir", a symlink's target, or a file's
// size and SHA-256 (fileDigest) — the file set and bytes, not times or owners.
func claimFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	out, err := claimFilesOf(dir)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// claimFilesOf lists a claim's folder as claimFiles does, and what it could list when it fails.
// It reads through the folder's root, each path from its directory: a tree deeper than PATH_MAX
// is listed too.
func claimFilesOf(dir string) (map[string]string, error) {
	out := map[string]string{}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return out, err
	}
	defer root.Close()
	var walk func(rel string) error
	walk = func(rel string) error {
		d, err := root.Open(rel)
		if err != nil {
			return err
		}
		entries, err := d.ReadDir(-1)
		d.Close()
		if err != nil {
			return err
		}
		for _, e := range entries {
			p := path.Join(rel, e.Name())
			switch {
			case e.IsDir():
				out[p] = "dir"
				if err := walk(p); err != nil {
					return err
				}
			case e.Type()&fs.ModeSymlink != 0:
				target, err := root.Readlink(p)
				if err != nil {
					return err
				}
				out[p] = "-> " + target
			default:
				data, err := root.ReadFile(p)
				if err != nil {
					return err
				}
				out[p] = fileDigest(data)
			}
		}
		return nil
	}
	return out, walk(".")
}

func fileDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return fmt.Sprintf("%d bytes %s", len(data), hex.EncodeToString(sum[:]))
}

// fileLines are claimFiles' entries as sorted lines, for lineDiff.
func fileLines(files map[string]string) []string {
	var out []string
	for _, p := range slices.Sorted(maps.Keys(files)) {
		out = append(out, p+" "+files[p])
	}
	return out
}

// putObjects writes objects into the platform's bucket of a testbed MinIO.
func putObjects(t *testing.T, m *testbed.MinIO, objects map[string][]byte) {
	t.Helper()
	for key, data := range objects {
		if _, err := m.S3Client().PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(testbed.PlatformBucket), Key: aws.String(key),
			Body: bytes.NewReader(data)}); err != nil {
			t.Fatalf("put %s into %s's MinIO: %v", key, m.Name, err)
		}
	}
}

// tableRows reads carryTable of a testbed MariaDB, one tab-separated line per row, by id.
func tableRows(t *testing.T, db *testbed.MariaDB) string {
	t.Helper()
	out, err := db.SQL(context.Background(), tb.Bins, "SELECT id, note FROM "+carryTable+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// removeCarryBack removes, best effort, what TestRollbackCarriesGreensWritesBack made on blue and on
// green: its namespace and the volumes its claim was bound to, its table and its bucket objects.
func removeCarryBack(t *testing.T, kcs ...kubernetes.Interface) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, name := range []string{"blue", "green"} {
		if _, err := tb.MariaDB[name].SQL(ctx, tb.Bins, "DROP TABLE IF EXISTS "+carryTable); err != nil {
			t.Logf("clean up %s's MariaDB: %v", name, err)
		}
		s3c := tb.MinIO[name].S3Client()
		list, err := s3c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(testbed.PlatformBucket), Prefix: aws.String(carryPrefix)})
		var noBucket *types.NoSuchBucket
		if errors.As(err, &noBucket) {
			continue // nothing seeded there yet
		}
		if err != nil {
			t.Logf("clean up %s's MinIO: %v", name, err)
			continue
		}
		for _, o := range list.Contents {
			if _, err := s3c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(testbed.PlatformBucket), Key: o.Key}); err != nil {
				t.Logf("clean up %s's MinIO: %v", name, err)
			}
		}
	}
	removeNamespace(t, carryNS, kcs...)
}

// TestCarryBackLeavesBlueServersClaim: blue's bucket lives in a MinIO whose files are on a claim;
// green keeps it in SeaweedFS (a target section). ferry migrate makes blue's MinIO and its claim on
// green too (they are objects of the moved namespace), empty. After green's writes, rollback
// --carry-back brings green's objects into blue's MinIO and leaves the files of blue's MinIO
// claim as they were: green's empty copy of the claim is not carried back over them. Neither
// the migration nor the carry-back touches the volume of a namespace beside it.
func TestCarryBackLeavesBlueServersClaim(t *testing.T) {
	green, greenKC := cutover(t)
	blue, blueKC := clients(t, "blue")
	weed, blueS3 := tb.SeaweedFS["green"], tb.MinIO["blue"]
	if weed == nil {
		t.Fatal("the testbed runs no SeaweedFS named green")
	}
	ctx := context.Background()
	const ns, bucket, claim = "store-carry", "store-carry", "minio-data"
	const neighbour = ns + "-neighbour" // a namespace the migration leaves, with a volume of its own
	cleanup := func() {
		removeNamespace(t, ns, blueKC, greenKC)
		removeNamespace(t, neighbour, blueKC, greenKC)
		for _, s3c := range []*s3.Client{blueS3.S3Client(), weed.S3Client()} {
			if err := testbed.RemoveBucket(ctx, s3c, bucket); err != nil {
				t.Logf("remove bucket %s: %v", bucket, err)
			}
		}
	}
	cleanup()
	t.Cleanup(cleanup)

	// Blue: MinIO with its files on a claim (what a user's MinIO keeps there), and a bucket.
	createClaim(t, blueKC, ns, claim, ptr.To("gp3"))
	serverFiles := map[string][]byte{"xl.meta": []byte("blue's MinIO keeps its objects here\n"), ".minio.sys/format.json": []byte(`{"format":"xl"}`)}
	blueDir := dataDir(t, ns+"-"+claim)
	writeClaimFiles(t, blueDir, serverFiles)
	blueFiles := claimFiles(t, blueDir)
	if err := blue.BindClaim(ctx, ns, claim, blueDir); err != nil {
		t.Fatal(err)
	}
	if _, err := blueKC.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "artifact-keys"},
		StringData: map[string]string{"accesskey": blueS3.AccessKey, "secretkey": blueS3.SecretKey}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createDeployment(t, blueKC, ns, "minio", corev1.PodSpec{Containers: []corev1.Container{{Name: "minio", Image: "minio",
		VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
		Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}})
	if err := blue.MapPortForward(ctx, ns, runningPod(t, blueKC, ns, "app=minio"), 9000, "127.0.0.1", blueS3.Port); err != nil {
		t.Fatal(err)
	}
	if err := blueS3.CreateBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	put := func(s3c *s3.Client, key, body string) {
		t.Helper()
		if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body)}); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
	}
	put(blueS3.S3Client(), "runs/1.json", `{"run": 1}`)
	createClaim(t, blueKC, neighbour, "data", ptr.To("gp3"))
	if err := blue.BindClaim(ctx, neighbour, "data", dataDir(t, neighbour+"-data")); err != nil {
		t.Fatal(err)
	}
	// Green: SeaweedFS, as its release runs it.
	pod := serveWorkload(t, greenKC, ns, "seaweedfs", "weed-keys", map[string]string{"accesskey": weed.AccessKey, "secretkey": weed.SecretKey})
	if err := green.MapPortForward(ctx, ns, pod, 8333, "127.0.0.1", weed.Port); err != nil {
		t.Fatal(err)
	}

	config := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(config, []byte(`include: {namespaces: [`+ns+`]}
storageClassMap: {gp3: standard}
buckets:
- name: `+bucket+`
  namespace: `+ns+`
  workload: deployment/minio
  port: 9000
  secret: {name: artifact-keys, accessKeyKey: accesskey, secretKeyKey: secretkey}
  target:
    workload: deployment/seaweedfs
    port: 8333
    secret: {name: weed-keys, accessKeyKey: accesskey, secretKeyKey: secretkey}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	url := backupMinIO(t, "carry-back-servers-claim")
	code, out, errOut := runFerry(t, "--storage", url, "migrate", "--from", "blue", "--to", "cutover", "-f", config, "--lease-ttl", testLeaseTTL.String())
	if code != 0 || !strings.Contains(out, "shifted") {
		t.Fatalf("ferry migrate exited %d, want 0 and shifted\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	id := runID(t, errOut)
	t.Cleanup(func() { runFerry(t, "--storage", url, "rollback", "--run", id, "--discard-green-writes") })
	if got := storeContents(t, weed.S3Client(), bucket); len(got) != 1 {
		t.Fatalf("green's SeaweedFS holds %v after the migration, want blue's runs/1.json", got)
	}

	// A migration of one namespace makes no volume of another on green: it would point at
	// blue's storage, for a claim green does not have.
	for name := range volumesOfOtherNamespaces(t, greenKC, ns) {
		if strings.Contains(name, neighbour) {
			t.Errorf("the migration of %s made volume %s, of namespace %s, on green", ns, name, neighbour)
		}
	}

	put(weed.S3Client(), "runs/2.json", `{"run": 2, "on": "green"}`)
	othersBefore := volumesOfOtherNamespaces(t, blueKC, ns)
	code, out, errOut = runFerry(t, "--storage", url, "rollback", "--run", id, "--carry-back", "--lease-ttl", testLeaseTTL.String())
	if code != 0 {
		t.Fatalf("ferry rollback --carry-back exited %d, want 0\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if got, want := storeContents(t, blueS3.S3Client(), bucket), storeContents(t, weed.S3Client(), bucket); !maps.Equal(got, want) {
		t.Errorf("after the carry-back blue's MinIO holds\n%v\nwant green's\n%v", got, want)
	}
	if got := claimFiles(t, blueDir); !maps.Equal(got, blueFiles) {
		t.Errorf("after the carry-back the files of blue's MinIO claim are\n%v\nwant them as they were\n%v", got, blueFiles)
	}
	// The carry-back moves what the migration selected and no more: the volumes of other
	// namespaces' claims (other tests' here) stay as blue had them.
	if got := volumesOfOtherNamespaces(t, blueKC, ns); !maps.Equal(got, othersBefore) {
		t.Errorf("after the carry-back blue's volumes of other namespaces (name: resource version) are\n%v\nwant them untouched\n%v", got, othersBefore)
	}
}

// volumesOfOtherNamespaces are the PersistentVolumes bound to claims outside namespace ns, by
// name, with their resource versions (which any write changes).
func volumesOfOtherNamespaces(t *testing.T, kc kubernetes.Interface, ns string) map[string]string {
	t.Helper()
	list, err := kc.CoreV1().PersistentVolumes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, pv := range list.Items {
		if ref := pv.Spec.ClaimRef; ref != nil && ref.Namespace != ns {
			out[pv.Name] = pv.ResourceVersion
		}
	}
	return out
}
