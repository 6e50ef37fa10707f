package migrate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/snapshot"
)

// warmOn is the options of a warm run whose round k reports deltas[k-1] uploaded (the last again
// for later rounds): the fakes have no volumes, so the test sets what a round would measure.
func warmOn(o Options, rounds int, delta int64, deltas ...int64) Options {
	o.Warm = &Warm{Rounds: rounds, DeltaBytes: delta}
	o.roundDone = func(rd *Round) {
		rd.UploadedBytes = deltas[min(rd.Round, len(deltas))-1]
	}
	return o
}

// TestWarmRounds: a warm run pre-copies in rounds before the quiesce, each a journaled step with
// its own backup, pinned by the run and deleted once no later step reads it; the rounds end at
// the first whose delta is at most the threshold, or when they run out; green holds the
// pre-copied namespace before blue is quiesced; the run then goes on as a cold one and shifts.
func TestWarmRounds(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name   string
		rounds int
		deltas []int64
		want   int
	}{
		{"stops at the delta", 5, []int64{900 * mib, 200 * mib, 10 * mib, 1 * mib}, 3},
		{"stops at the round limit", 3, []int64{900 * mib}, 3},
		{"one round when the first is small", 3, []int64{64 * mib}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			store, blue, green := fileStore(t), shopBlue(t), newFakeCluster(t, "green")
			o := warmOn(runOn(t, store, blue, green, &fakeSwitcher{}), tc.rounds, 64*mib, tc.deltas...)
			var sawShopBeforeQuiesce bool
			// While round k runs, round k-1's backup (its base) is there, and none before it.
			setDelta := o.roundDone
			o.roundDone = func(rd *Round) {
				setDelta(rd)
				run := strings.TrimSuffix(rd.Backup, "-stage-"+itoa(rd.Round))
				for k := 1; k < rd.Round; k++ {
					_, err := snapshot.ReadManifest(ctx, store, StageName(run, k))
					if got, want := err == nil, k == rd.Round-1; got != want {
						t.Errorf("during round %d, round %d's backup is there: %v, want %v", rd.Round, k, got, want)
					}
				}
			}
			o.Crash = func(e Event) {
				if e.State == Quiesced && e.Phase == Begin {
					sawShopBeforeQuiesce = green.get(t, namespacesGVR, "", "shop") != nil
				}
			}
			r := start(t, o)
			if err := r.Drive(ctx); err != nil {
				t.Fatalf("drive: %v\njournal: %q", err, states(r.Journal))
			}
			var want []string
			want = append(want, "planned:begin", "planned:done", "preflighted:begin", "preflighted:done")
			for k := 1; k <= tc.want; k++ {
				want = append(want, "staged@"+itoa(k)+":begin", "staged@"+itoa(k)+":done")
			}
			want = append(want, "staged:begin", "staged:done", "quiesced:begin")
			if got := states(r.Journal); strings.Join(got[:len(want)], " ") != strings.Join(want, " ") {
				t.Errorf("journal:\n got %q\nwant %q...", got, want)
			}
			if r.Journal.Current() != Shifted {
				t.Errorf("state %q, want shifted", r.Journal.Current())
			}
			if !sawShopBeforeQuiesce {
				t.Error("green lacked blue's namespace when blue was quiesced: the rounds restored nothing")
			}
			if green.get(t, configMapsGVR, "shop", "settings") == nil {
				t.Error("green lacks blue's ConfigMap after the final restore")
			}
			// The rounds' backups are deleted once the restore after the quiesce is done (each
			// holds a whole copy of the buckets); the run's own is complete and pinned.
			entries, err := snapshot.History(ctx, store, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			pinned := map[string]bool{}
			for _, e := range entries {
				if strings.Contains(e.Name, "-stage-") {
					t.Errorf("round backup %s (%s) is left after the run", e.Name, e.State)
				}
				if e.State == snapshot.Complete && slices.Equal(e.Runs, []string{r.Journal.Run.ID}) {
					pinned[e.Name] = true
				}
			}
			if !pinned[r.Journal.Run.Backup] {
				t.Errorf("the run's backup %s is not complete and pinned", r.Journal.Run.Backup)
			}
			rep := BuildReport(r.Journal)
			if len(rep.Rounds) != tc.want || rep.Rounds[0].Backup != StageName(r.Journal.Run.Backup, 1) || rep.Rounds[0].UploadedBytes != tc.deltas[0] {
				t.Errorf("report's rounds %+v, want %d from %s-stage-1 with the first delta", rep.Rounds, tc.want, r.Journal.Run.Backup)
			}
			if rep.DowntimeSeconds <= 0 || rep.DowntimeSeconds > rep.VerifiedCutoverSeconds {
				t.Errorf("downtime %v, total %v: want 0 < downtime <= total", rep.DowntimeSeconds, rep.VerifiedCutoverSeconds)
			}
			var out bytes.Buffer
			if err := rep.Print(&out); err != nil {
				t.Fatal(err)
			}
			for _, s := range []string{"Pre-copy rounds", "DELTA (UPLOADED)", "round " + itoa(tc.want), "Downtime: ", "(quiesce to green serving); total "} {
				if !strings.Contains(out.String(), s) {
					t.Errorf("report lacks %q:\n%s", s, out.String())
				}
			}
			raw, err := json.Marshal(rep)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range []string{`"rounds":[{"round":1,`, `"uploadedBytes":`, `"downtimeSeconds":`, `"warm":{"rounds":`} {
				if !bytes.Contains(raw, []byte(s)) {
					t.Errorf("JSON report lacks %s: %s", s, raw)
				}
			}
		})
	}
}

// TestWarmResumeAfterEachEvent: a warm run killed right after any event of its journal, the
// rounds' included, resumes from the journal alone (warm still: the run record keeps it) and
// shifts; each round finishes once, and a round cut short is made again and finishes.
func TestWarmResumeAfterEachEvent(t *testing.T) {
	const mib = 1 << 20
	const events = 22 + 6 // a cold run's, and two rounds and the staged step's begin and done
	for n := 1; n <= events; n++ {
		t.Run(itoa(n), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			store, blue, green, sw := fileStore(t), shopBlue(t), newFakeCluster(t, "green"), &fakeSwitcher{}
			warm := func() Options { return warmOn(runOn(t, store, blue, green, sw), 3, 64*mib, 500*mib, 1*mib) }
			first, crashed := driveUntilCrash(t, warm(), n)
			if !crashed {
				t.Fatalf("the run was not killed after event %d", n)
			}
			killedAt := first.Journal.Events()[n-1]
			if killedAt.State == Staged && killedAt.Phase == Begin && killedAt.Step > 0 {
				// Killed while the round's backup was being written: an incomplete backup is left.
				name := StageName(first.Journal.Run.Backup, killedAt.Step)
				if err := store.Put(ctx, snapshot.Prefix(name)+"volumes/shop/data.tree.jsonl.zst", strings.NewReader("cut short")); err != nil {
					t.Fatal(err)
				}
			}
			o := warm()
			o.Warm = nil // the journal's run record says warm
			roundDone := o.roundDone
			o.roundDone = nil
			r, err := Resume(ctx, o, first.Journal.Run.ID)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close(ctx)
			if r.o.Warm == nil {
				t.Fatal("the resumed run is not warm")
			}
			r.o.roundDone = roundDone
			if err := r.Drive(ctx); err != nil {
				t.Fatalf("resumed after %s@%d %s: %v", killedAt.State, killedAt.Step, killedAt.Phase, err)
			}
			if r.Journal.Current() != Shifted {
				t.Fatalf("state %q", r.Journal.Current())
			}
			dones := map[string]int{}
			for _, e := range r.Journal.Events() {
				if e.Phase == Done {
					dones[string(e.State)+"@"+itoa(e.Step)]++
				}
			}
			for _, key := range []string{"staged@1", "staged@2", "staged@0", "quiesced@0", "backed-up@0", "restored@0", "verified@0", "shifted@0"} {
				if dones[key] != 1 {
					t.Errorf("killed after %s@%d %s: %s finished %d times, want once", killedAt.State, killedAt.Step, killedAt.Phase, key, dones[key])
				}
			}
			if dones["staged@3"] != 0 {
				t.Error("a third round ran after a round under the delta")
			}
			for k := 1; k <= 2; k++ {
				if _, err := snapshot.ReadManifest(ctx, store, StageName(r.Journal.Run.Backup, k)); err == nil {
					t.Errorf("round %d's backup is left after the run", k)
				}
			}
		})
	}
}

// TestWarmRefuses: a warm run that cannot work is refused as bad input before anything is
// written: with an upgrade, encrypted, or without a round.
func TestWarmRefuses(t *testing.T) {
	ctx := context.Background()
	for name, change := range map[string]func(*Options){
		"upgrade":   func(o *Options) { o.Upgrade = &plans.UpgradeOptions{} },
		"encrypted": func(o *Options) { o.EncryptTo = []string{"age1xyz"} },
		"no round":  func(o *Options) { o.Warm.Rounds = 0 },
	} {
		t.Run(name, func(t *testing.T) {
			store := fileStore(t)
			o := runOn(t, store, shopBlue(t), newFakeCluster(t, "green"), nil)
			o.Warm = &Warm{Rounds: DefaultWarmRounds, DeltaBytes: DefaultWarmDeltaBytes}
			change(&o)
			if _, err := Start(ctx, o); !badinput.Is(err) {
				t.Fatalf("start: %v, want bad input", err)
			}
			if ids, _ := ListRuns(ctx, store); len(ids) != 0 {
				t.Errorf("runs %v written", ids)
			}
		})
	}
}

// TestSameTrees: a claim is left alone only when its chunked tree stream has the same digest as
// the same claim's in the round before, in the same repository; withoutVolumes then drops it and
// its streams from what the restore reads, and countUnchanged reports its entries.
func TestSameTrees(t *testing.T) {
	vol := func(name, format, repo string) snapshot.Volume {
		return snapshot.Volume{Namespace: "lab", Name: name, Key: "volumes/lab/" + name + ".tree.jsonl.zst", Format: format, Repo: repo,
			List: &snapshot.FileList{Key: "volume-files/lab/" + name + ".jsonl.zst", Entries: 7}}
	}
	man := func(digests map[string]string, vols ...snapshot.Volume) *snapshot.Manifest {
		m := &snapshot.Manifest{Volumes: vols}
		for _, v := range vols {
			m.Streams = append(m.Streams, snapshot.Stream{Key: v.Key, SHA256: digests[v.Name]}, snapshot.Stream{Key: v.List.Key, SHA256: "list"})
		}
		return m
	}
	chunks := snapshot.FormatChunks
	prev := man(map[string]string{"same": "a", "changed": "b", "other-repo": "c", "tar": "d"},
		vol("same", chunks, "r"), vol("changed", chunks, "r"), vol("other-repo", chunks, "r"), vol("tar", "", ""))
	cur := man(map[string]string{"same": "a", "changed": "B", "other-repo": "c", "tar": "d", "new": "e"},
		vol("same", chunks, "r"), vol("changed", chunks, "r"), vol("other-repo", chunks, "r2"), vol("tar", "", ""), vol("new", chunks, "r"))
	got := sameTrees(cur, prev)
	if len(got) != 1 || !got["lab/same"] {
		t.Fatalf("sameTrees: %v, want lab/same alone", got)
	}
	if sameTrees(cur, nil) != nil {
		t.Error("without a round before, nothing is the same")
	}
	r := withoutVolumes(&snapshot.Reader{Manifest: cur}, got)
	if len(r.Manifest.Volumes) != 4 || slices.ContainsFunc(r.Manifest.Volumes, func(v snapshot.Volume) bool { return v.Name == "same" }) {
		t.Errorf("volumes left: %+v", r.Manifest.Volumes)
	}
	if len(r.Manifest.Streams) != 8 || len(cur.Streams) != 10 {
		t.Errorf("streams: %d left of %d, want the two of lab/same dropped, the original untouched", len(r.Manifest.Streams), len(cur.Streams))
	}
	rep := &snapshot.Report{}
	countUnchanged(rep, cur, got)
	if rep.Counts["volumes"][snapshot.StatusUnchanged] != 7 {
		t.Errorf("counts %v, want lab/same's 7 entries unchanged", rep.Counts)
	}
}

// TestRoundRestoresNoBucket: a round's backup holds the buckets' objects, its restore none of them
// (green's store is not running yet), and the backup itself is left as it is.
func TestRoundRestoresNoBucket(t *testing.T) {
	m := &snapshot.Manifest{
		Buckets: []snapshot.Bucket{{Name: "mlpipeline", Prefix: "buckets/mlpipeline/", Metadata: "bucket-metadata/mlpipeline.json"}},
		Volumes: []snapshot.Volume{{Namespace: "lab", Name: "data", Key: "volumes/lab/data.tree.jsonl.zst"}},
		Streams: []snapshot.Stream{{Key: "buckets/mlpipeline/a"}, {Key: "buckets/mlpipeline/b/c"}, {Key: "bucket-metadata/mlpipeline.json"}, {Key: "volumes/lab/data.tree.jsonl.zst"}},
	}
	r := withoutBuckets(&snapshot.Reader{Manifest: m})
	if len(r.Manifest.Buckets) != 0 || len(r.Manifest.Volumes) != 1 {
		t.Errorf("left: buckets %+v, volumes %+v", r.Manifest.Buckets, r.Manifest.Volumes)
	}
	if len(r.Manifest.Streams) != 1 || r.Manifest.Streams[0].Key != "volumes/lab/data.tree.jsonl.zst" || len(m.Streams) != 4 || len(m.Buckets) != 1 {
		t.Errorf("streams left %+v; the backup's own: %d streams, %d buckets", r.Manifest.Streams, len(m.Streams), len(m.Buckets))
	}
	rd := Round{UploadedBytes: 10, BucketBytes: 100, BucketReadBytes: 7}
	if rd.Delta() != 17 {
		t.Errorf("delta %d, want the new packs and the bucket bytes read (17)", rd.Delta())
	}
}

// TestColdRunReportsDowntime: a run that is not warm has no rounds, and its report shows the
// downtime (quiesce to shifted) beside the total all the same.
func TestColdRunReportsDowntime(t *testing.T) {
	store, blue, green := fileStore(t), shopBlue(t), newFakeCluster(t, "green")
	r := start(t, runOn(t, store, blue, green, &fakeSwitcher{}))
	if err := r.Drive(context.Background()); err != nil {
		t.Fatal(err)
	}
	rep := BuildReport(r.Journal)
	if len(rep.Rounds) != 0 || rep.Warm != nil || rep.DowntimeSeconds <= 0 || rep.DowntimeSeconds > rep.VerifiedCutoverSeconds {
		t.Errorf("rounds %v, warm %v, downtime %v of %v: want no rounds and 0 < downtime <= total", rep.Rounds, rep.Warm, rep.DowntimeSeconds, rep.VerifiedCutoverSeconds)
	}
	var out bytes.Buffer
	if err := rep.Print(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Downtime: ") || strings.Contains(out.String(), "Pre-copy rounds") {
		t.Errorf("report:\n%s", out.String())
	}
}

// TestWarmRollbackBeforeQuiesce: a warm run stopped in its pre-copy has nothing to roll back on
// blue, and the refusal says that green holds the pre-copied claims.
func TestWarmRollbackBeforeQuiesce(t *testing.T) {
	ctx := context.Background()
	store, blue, green := fileStore(t), shopBlue(t), newFakeCluster(t, "green")
	// Killed once round 1 is done: planned and preflighted begin and done, round 1 begin and done.
	first, crashed := driveUntilCrash(t, warmOn(runOn(t, store, blue, green, nil), 3, 0, 1<<30), 6)
	if !crashed {
		t.Fatal("the run was not killed")
	}
	r, err := Resume(ctx, runOn(t, store, blue, green, nil), first.Journal.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	err = r.Rollback(ctx, RollbackOptions{})
	if !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "never quiesced") || !strings.Contains(err.Error(), "pre-copy") {
		t.Errorf("rollback in the pre-copy: %v, want it refused, saying green holds the pre-copied claims", err)
	}
}
