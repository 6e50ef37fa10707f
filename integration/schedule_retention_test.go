package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/volumes"
	"github.com/ferrykube/ferry/storage"
	"github.com/ferrykube/ferry/storage/repo"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TestScheduledBackupsKeepLast runs a schedule's job 12 times (FERRY_KEEP_RUNS, 30 for the issue's
// figure) over a claim that changes between runs (chunked volumes), each run followed by ferry
// prune --keep-last 5, as an operator's retention would: in the end the storage lists the 5 kept
// backups and only packs they reference, each kept backup restores to exactly the tree it was taken
// of (walked and hashed here), and ferry check --read-data passes. A tampered pack is then reported
// by check and refused by the restore of the backup that needs it, with nothing applied, while an
// older kept backup that does not need it still restores exactly.
func TestScheduledBackupsKeepLast(t *testing.T) {
	_, bkc := clients(t, "blue")
	green, gkc := clients(t, "green")
	ctx := context.Background()
	const srcNS, claim, name, schedNS, secret, keep = "keep-lab", "notebook-data", "hourly", "ferry-keep", "ferry-storage", 5
	runs := envCount(t, "FERRY_KEEP_RUNS", 12)
	blue := testbed.Require(t, tb).Clusters["blue"]
	createClaim(t, bkc, srcNS, claim, nil)
	src := dataDir(t, claim+"-keep")
	fillVolume(t, src)
	if err := blue.BindClaim(ctx, srcNS, claim, src); err != nil {
		t.Fatal(err)
	}
	url := backupMinIO(t, "keep-last")
	store, err := storage.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}

	// The schedule backs up only the lab's namespace, its volumes in chunks.
	config := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(config, []byte("include:\n  namespaces: ["+srcNS+"]\n"+testbed.FerryConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	// Gone, and waited for, before the next test backs blue up: a namespace still terminating
	// refuses what a later schedule makes in it.
	removeAfter(t, srcNS, bkc)
	removeAfter(t, schedNS, bkc)
	t.Cleanup(func() { runFerry(t, "schedule", "delete", name, "--from", "blue", "-n", schedNS) })
	if code, out, errOut := runFerry(t, "--storage", url, "schedule", "create", name, "--cron", "@hourly", "--from", "blue", "-n", schedNS,
		"--storage-secret", secret, "-f", config, "--volume-format", "chunks"); code != 0 {
		t.Fatalf("schedule create: exit %d\n%s%s", code, out, errOut)
	}
	creds := map[string][]byte{}
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		creds[k] = []byte(os.Getenv(k))
	}
	if _, err := bkc.CoreV1().Secrets(schedNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret}, Data: creds}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cj, err := bkc.BatchV1().CronJobs(schedNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Each run changes 3 files in place, adds a file of new data and deletes the one added 3
	// runs before: the packs of a run hold only chunks that later runs no longer reference.
	rng := rand.NewChaCha8([32]byte{30})
	rounds := filepath.Join(src, "rounds")
	if err := os.MkdirAll(rounds, 0o755); err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`Backup (` + name + `-[0-9]{8}-[0-9]{6}) is complete`)
	var backups []string
	var lastData []byte // the last run's new file: only the last backup references its chunk
	trees := map[string][]string{}
	started := time.Now()
	for run := range runs {
		if run > 0 {
			for i := range 3 {
				p := filepath.Join(src, "runs", fmt.Sprintf("%02d", i), fmt.Sprintf("metrics-%03d.json", i))
				if err := os.WriteFile(p, []byte(fmt.Sprintf(`{"run": %d, "loss": 0.%03d, "round": %d}`, i, i, run)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			os.Remove(filepath.Join(rounds, fmt.Sprintf("round-%02d.bin", run-3)))
		}
		data := make([]byte, 96<<10)
		rng.Read(data)
		lastData = data
		if err := os.WriteFile(filepath.Join(rounds, fmt.Sprintf("round-%02d.bin", run)), data, 0o644); err != nil {
			t.Fatal(err)
		}
		// Backups are named to the second.
		if len(backups) > 0 {
			time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
		}
		code, out, errOut := runJob(t, bkc, cj, "blue")
		m := named.FindStringSubmatch(out)
		if code != 0 || m == nil {
			t.Fatalf("run %d of the job: exit %d\nstdout: %s\nstderr: %s", run, code, out, errOut)
		}
		backups = append(backups, m[1])
		trees[m[1]] = walkTree(t, src)
		code, out, errOut = runFerry(t, "--storage", url, "prune", "--schedule", name, "--keep-last", fmt.Sprint(keep), "-o", "json")
		if code != 0 {
			t.Fatalf("prune after run %d: exit %d\nstdout: %s\nstderr: %s", run, code, out, errOut)
		}
	}
	t.Logf("%d runs of the job, each followed by prune, in %s", runs, time.Since(started).Round(time.Second))
	// A pack is deleted by a later prune than the one that found it unused (a backup recorded
	// while that one ran may use it): the next prune deletes what the last one condemned.
	if code, out, errOut := runFerry(t, "--storage", url, "prune", "--schedule", name, "--keep-last", fmt.Sprint(keep), "-o", "json"); code != 0 {
		t.Fatalf("the last prune: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	kept := backups[runs-keep:]
	_, m := readManifest(t, url, kept[keep-1])
	if len(m.Volumes) != 1 || m.Volumes[0].Format != snapshot.FormatChunks {
		t.Fatalf("the schedule's backup holds volumes %+v: want %s/%s in chunks", m.Volumes, srcNS, claim)
	}

	// The storage lists the kept backups and only packs they reference.
	var listed []string
	if err := store.List(ctx, "", func(o storage.ObjectInfo) error {
		listed = append(listed, o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	backupsListed := map[string]bool{}
	var packs []string
	for _, key := range listed {
		switch {
		case strings.HasPrefix(key, repo.DefaultPrefix+"packs/"):
			packs = append(packs, path.Base(key))
		case strings.HasPrefix(key, repo.DefaultPrefix):
		case strings.HasPrefix(key, "backups/"):
			backupsListed[strings.SplitN(strings.TrimPrefix(key, "backups/"), "/", 2)[0]] = true
		default:
			t.Errorf("the storage holds %s, neither a backup's nor the chunk repository's", key)
		}
	}
	if got := slices.Sorted(func(yield func(string) bool) {
		for b := range backupsListed {
			if !yield(b) {
				return
			}
		}
	}); !slices.Equal(got, kept) {
		t.Errorf("the storage holds backups %v, want the %d kept: %v", got, keep, kept)
	}
	rp, referenced, _ := referencedPacks(t, store)
	t.Logf("storage: %d keys, %d packs, %d of them referenced by the kept backups", len(listed), len(packs), len(referenced))
	for _, p := range packs {
		if !referenced[p] {
			t.Errorf("pack %s is stored, and no kept backup references it", p)
		}
	}
	if len(packs) != len(referenced) {
		t.Errorf("%d packs stored, %d referenced", len(packs), len(referenced))
	}
	if code, out, errOut := runFerry(t, "--storage", url, "check", "--read-data"); code != 0 {
		t.Fatalf("ferry check exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}

	// Every kept backup restores exactly.
	if err := green.Apply(ctx, io.Discard, filepath.Join(repoDir(), "integration", "testdata", "standard-storageclass.yaml")); err != nil {
		t.Fatal(err)
	}
	cfg, err := green.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	restoreTo := func(backup, dstNS string) ([]string, *snapshot.Report, error) {
		t.Helper()
		createClaim(t, gkc, dstNS, claim, ptr.To("standard"))
		removeAfter(t, dstNS, gkc)
		r, err := snapshot.Open(ctx, store, backup, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := volumes.Contents{Config: cfg, Client: gkc, Image: "ferry", Mapping: snapshot.Mapping{Namespaces: map[string]string{srcNS: dstNS}}}
		report := &snapshot.Report{}
		err = c.Restore(ctx, r, report)
		return walkTree(t, claimFolder(t, gkc, dstNS, claim)), report, err
	}
	for i, b := range kept {
		got, report, err := restoreTo(b, fmt.Sprintf("%s-%d", srcNS, i))
		if err != nil || len(report.Items) != 0 {
			t.Fatalf("restore of %s: %v, items %+v", b, err, report.Items)
		}
		if !slices.Equal(trees[b], got) {
			t.Fatalf("restore of %s differs from the tree backed up:\n%s", b, lineDiff(trees[b], got))
		}
	}

	// One byte of the pack holding the last run's new file flipped (a file under the chunks'
	// minimum size is one chunk, named by its SHA-256 when unencrypted): check names the pack, the
	// last backup's restore fails with nothing applied, and the oldest kept backup, which does not
	// need the pack, still restores exactly.
	tampered, ok := rp.PackOf(repo.ID(sha256.Sum256(lastData)))
	if !ok {
		t.Fatal("the last run's new file is in no pack")
	}
	var newest storage.ObjectInfo
	if err := store.List(ctx, repo.DefaultPrefix+"packs/", func(o storage.ObjectInfo) error {
		if path.Base(o.Key) == tampered {
			newest = o
		}
		return nil
	}); err != nil || newest.Key == "" {
		t.Fatalf("pack %s is not listed: %v", tampered, err)
	}
	original := getObject(t, store, newest.Key)
	if err := store.Put(ctx, newest.Key, bytes.NewReader(flipByte(original, len(original)/2))); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runFerry(t, "--storage", url, "check", "--read-data", "-o", "json")
	if code != 1 || !strings.Contains(out, path.Base(newest.Key)) {
		t.Errorf("ferry check of a tampered pack exited %d, want 1 naming %s\nstdout: %s\nstderr: %s", code, path.Base(newest.Key), out, errOut)
	}
	var checked any
	if json.Unmarshal([]byte(out), &checked) != nil {
		t.Errorf("ferry check -o json printed no JSON:\n%s", out)
	}
	got, report, err := restoreTo(kept[keep-1], srcNS+"-tampered")
	if err == nil || report.Counts["volumes"][snapshot.StatusFailed] == 0 {
		t.Errorf("restore of %s from a tampered pack: %v, %+v; want the volume failed", kept[keep-1], err, report.Items)
	}
	if len(got) != 0 {
		t.Errorf("restore from a tampered pack applied files:\n%s", strings.Join(got, "\n"))
	}
	got, report, err = restoreTo(kept[0], srcNS+"-older")
	if err != nil || len(report.Items) != 0 || !slices.Equal(trees[kept[0]], got) {
		t.Errorf("restore of %s, which does not need the tampered pack: %v, %+v\n%s", kept[0], err, report.Items, lineDiff(trees[kept[0]], got))
	}
	if err := store.Put(ctx, newest.Key, bytes.NewReader(original)); err != nil {
		t.Fatal(err)
	}
}

// TestAScheduleOfTwoClusters: a schedule's objects in ferry-system moved with a restore of
// everything to a second cluster (a drill of the disaster recovery, a staging copy), where its
// CronJob runs too: two clusters write one schedule into one storage. Retention kept the newest
// of both together, so production's backups were removed as the copy's came in (prune
// --keep-last 2 kept one of each), and latest:SCHEDULE restored the copy's data. Each
// cluster's backups are now kept on their own, and latest:SCHEDULE names both clusters' newest
// and asks which (exit 2) while both run the schedule.
func TestAScheduleOfTwoClusters(t *testing.T) {
	_, blueKC := clients(t, "blue")
	_, greenKC := clients(t, "green")
	ctx := context.Background()
	const ns, schedule = "two-clusters-schedule", "twice"
	removeAfter(t, ns, blueKC, greenKC)
	for _, kc := range []kubernetes.Interface{blueKC, greenKC} {
		createNamespace(t, kc, ns, nil)
		if _, err := kc.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"mode": "live"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	store, config := "file://"+filepath.Join(t.TempDir(), "store"), namespacesConfig(t, ns)
	var made []string // in order: blue's, green's, blue's, ...
	for _, cluster := range []string{"blue", "green", "blue", "green", "blue", "green"} {
		code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", cluster, "-f", config, "--schedule", schedule)
		if code != 0 {
			t.Fatalf("ferry backup --from %s --schedule %s exited %d\nstdout: %s\nstderr: %s", cluster, schedule, code, out, errOut)
		}
		names := regexp.MustCompile(schedule+`-[0-9]{8}-[0-9]{6}`).FindAllString(out+errOut, 1)
		if len(names) == 0 {
			t.Fatalf("ferry backup did not name its backup\nstdout: %s\nstderr: %s", out, errOut)
		}
		made = append(made, names[0])
		time.Sleep(1100 * time.Millisecond) // names are to the second
	}

	code, out, errOut := runFerry(t, "--storage", store, "prune", "--schedule", schedule, "--keep-last", "2", "-o", "json")
	if code != 0 {
		t.Fatalf("ferry prune exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	var rep struct{ Keep, Remove []snapshot.Decision }
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("prune's report: %v\n%s", err, out)
	}
	var keep, remove []string
	for _, d := range rep.Keep {
		keep = append(keep, d.Name)
	}
	for _, d := range rep.Remove {
		remove = append(remove, d.Name)
	}
	slices.Sort(keep)
	slices.Sort(remove)
	if want := made[2:]; !slices.Equal(keep, want) || !slices.Equal(remove, made[:2]) {
		t.Errorf("prune --keep-last 2 kept %v and removed %v; want each cluster's two newest %v kept", keep, remove, want)
	}

	code, out, errOut = runFerry(t, "--storage", store, "restore", "--to", "green", "--backup", "latest:"+schedule)
	if code != 2 || !strings.Contains(errOut, "are of 2 clusters") || !strings.Contains(errOut, made[4]) || !strings.Contains(errOut, made[5]) {
		t.Errorf("ferry restore --backup latest:%s exited %d, want 2 naming both clusters' newest %s and %s\nstdout: %s\nstderr: %s", schedule, code, made[4], made[5], out, errOut)
	}
}
