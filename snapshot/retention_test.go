package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/storage"
)

func at(s string) time.Time {
	t, err := time.Parse("2006-01-02T15:04", s)
	if err != nil {
		panic(err)
	}
	return t
}

// every makes complete backups of a schedule from first to last, step apart.
func every(schedule string, first, last time.Time, step time.Duration) []Entry {
	var out []Entry
	for t := first; !t.After(last); t = t.Add(step) {
		out = append(out, Entry{Name: ScheduledName(schedule, t), State: Complete, Schedule: schedule, Time: t, LastWrite: t.Add(time.Minute)})
	}
	return out
}

func names(schedule string, times ...string) []string {
	var out []string
	for _, t := range times {
		out = append(out, ScheduledName(schedule, at(t)))
	}
	return out
}

func kept(ds []Decision) []string {
	var out []string
	for _, d := range ds {
		if d.Keep {
			out = append(out, d.Name)
		}
	}
	return out
}

func reasonsOf(ds []Decision, name string) []string {
	for _, d := range ds {
		if d.Name == name {
			return d.Reasons
		}
	}
	return nil
}

// Two-hourly backups over three and a half days, and daily ones over ten weeks across a new
// year: each policy keeps exactly the newest backup of each of its last N buckets.
func TestPolicyKeepsTheNewestOfEachBucket(t *testing.T) {
	twoHourly := every("s", at("2026-03-07T00:00"), at("2026-03-10T12:00"), 2*time.Hour) // 43 backups
	daily := every("s", at("2025-12-30T02:00"), at("2026-03-10T02:00"), 24*time.Hour)    // 71 backups
	if len(twoHourly) != 43 || len(daily) != 71 {
		t.Fatalf("histories: %d and %d backups", len(twoHourly), len(daily))
	}
	tests := []struct {
		name    string
		history []Entry
		policy  Policy
		want    []string // kept, newest first
	}{
		{"last 5", twoHourly, Policy{Last: 5},
			names("s", "2026-03-10T12:00", "2026-03-10T10:00", "2026-03-10T08:00", "2026-03-10T06:00", "2026-03-10T04:00")},
		{"hourly 4: every backup is its own hour", twoHourly, Policy{Hourly: 4},
			names("s", "2026-03-10T12:00", "2026-03-10T10:00", "2026-03-10T08:00", "2026-03-10T06:00")},
		{"daily 3: the newest of today and of the two days before", twoHourly, Policy{Daily: 3},
			names("s", "2026-03-10T12:00", "2026-03-09T22:00", "2026-03-08T22:00")},
		{"weekly 2: ISO weeks start on Monday the 9th and the 2nd", twoHourly, Policy{Weekly: 2},
			names("s", "2026-03-10T12:00", "2026-03-08T22:00")},
		{"monthly 6: one month holds them all", twoHourly, Policy{Monthly: 6},
			names("s", "2026-03-10T12:00")},
		{"last 2 and daily 3 together", twoHourly, Policy{Last: 2, Daily: 3},
			names("s", "2026-03-10T12:00", "2026-03-10T10:00", "2026-03-09T22:00", "2026-03-08T22:00")},
		{"daily 100 keeps one a day, as many days as there are", twoHourly, Policy{Daily: 100},
			names("s", "2026-03-10T12:00", "2026-03-09T22:00", "2026-03-08T22:00", "2026-03-07T22:00")},
		{"last -1 keeps all", twoHourly, Policy{Last: -1}, func() []string {
			var all []string
			for i := len(twoHourly) - 1; i >= 0; i-- {
				all = append(all, twoHourly[i].Name)
			}
			return all
		}()},
		{"daily 7, weekly 3, monthly 3, yearly 2", daily, Policy{Daily: 7, Weekly: 3, Monthly: 3, Yearly: 2},
			names("s", "2026-03-10T02:00", "2026-03-09T02:00", "2026-03-08T02:00", "2026-03-07T02:00", "2026-03-06T02:00",
				"2026-03-05T02:00", "2026-03-04T02:00", "2026-03-01T02:00", "2026-02-28T02:00", "2026-01-31T02:00", "2025-12-31T02:00")},
		{"weekly 12 across the new year: Dec 29 to Jan 4 is one week, 2026-W01", daily, Policy{Weekly: 12},
			names("s", "2026-03-10T02:00", "2026-03-08T02:00", "2026-03-01T02:00", "2026-02-22T02:00", "2026-02-15T02:00",
				"2026-02-08T02:00", "2026-02-01T02:00", "2026-01-25T02:00", "2026-01-18T02:00", "2026-01-11T02:00", "2026-01-04T02:00")},
		{"an empty policy keeps only the newest complete backup", daily, Policy{}, names("s", "2026-03-10T02:00")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The order the history comes in does not matter.
			history := slices.Clone(tt.history)
			slices.Reverse(history[len(history)/2:])
			ds := tt.policy.Apply(history, at("2026-03-10T13:00"))
			if len(ds) != len(tt.history) {
				t.Fatalf("%d decisions for %d backups", len(ds), len(tt.history))
			}
			if got := kept(ds); !slices.Equal(got, tt.want) {
				t.Errorf("kept\n  %v\nwant\n  %v", got, tt.want)
			}
			for _, d := range ds {
				if !d.Keep && !slices.Equal(d.Reasons, []string{RemoveUnkept}) {
					t.Errorf("%s removed for %v", d.Name, d.Reasons)
				}
			}
		})
	}
}

func TestPolicyReasons(t *testing.T) {
	history := every("s", at("2026-03-07T00:00"), at("2026-03-10T12:00"), 2*time.Hour)
	ds := Policy{Last: 2, Daily: 3, Weekly: 1}.Apply(history, at("2026-03-10T13:00"))
	for name, want := range map[string][]string{
		ScheduledName("s", at("2026-03-10T12:00")): {KeepNewest, KeepLast, KeepDaily, KeepWeekly},
		ScheduledName("s", at("2026-03-10T10:00")): {KeepLast},
		ScheduledName("s", at("2026-03-09T22:00")): {KeepDaily},
		ScheduledName("s", at("2026-03-09T20:00")): {RemoveUnkept},
	} {
		if got := reasonsOf(ds, name); !slices.Equal(got, want) {
			t.Errorf("%s: reasons %v, want %v", name, got, want)
		}
	}
}

// TestPolicyKeepsEachClustersOwn: a schedule whose objects came with a restore to a second cluster
// (a drill of the disaster recovery, a staging copy) runs there too, into the same storage and
// under the same name. Each cluster's backups are kept by the rules on their own, as restic groups
// snapshots by host: production's are not removed because the drill's are newer.
func TestPolicyKeepsEachClustersOwn(t *testing.T) {
	prod := every("nightly", at("2026-03-01T02:00"), at("2026-03-10T02:00"), 24*time.Hour)
	drill := every("nightly", at("2026-03-08T02:30"), at("2026-03-12T02:30"), 24*time.Hour)
	var history []Entry
	for _, e := range prod {
		e.Cluster = "prod-uid"
		history = append(history, e)
	}
	for _, e := range drill {
		e.Cluster = "drill-uid"
		history = append(history, e)
	}
	ds := Policy{Last: 2, Schedule: "nightly"}.Apply(history, at("2026-03-12T03:00"))
	want := []string{ScheduledName("nightly", at("2026-03-12T02:30")), ScheduledName("nightly", at("2026-03-11T02:30")),
		ScheduledName("nightly", at("2026-03-10T02:00")), ScheduledName("nightly", at("2026-03-09T02:00"))}
	if got := kept(ds); !slices.Equal(got, want) {
		t.Errorf("kept %v, want each cluster's two newest %v", got, want)
	}
	if got := reasonsOf(ds, ScheduledName("nightly", at("2026-03-10T02:00"))); !slices.Contains(got, KeepNewest) {
		t.Errorf("production's newest: reasons %v, want it kept as its cluster's newest", got)
	}
}

// The rules that hold whatever the policy says.
func TestPolicyNeverDeletes(t *testing.T) {
	now := at("2026-03-10T13:00")
	hourly := every("nightly", at("2026-03-08T00:00"), at("2026-03-10T00:00"), time.Hour) // 49 complete
	old := ScheduledName("nightly", at("2026-03-08T05:00"))
	older := ScheduledName("nightly", at("2026-03-08T03:00"))
	history := slices.Clone(hourly)
	for i := range history {
		switch history[i].Name {
		case old:
			history[i].Runs = []string{"run-b", "run-a"}
		case older:
			history[i].Runs = []string{"run-c"}
		}
	}
	incomplete := func(name string, started, lastWrite time.Time, running bool, runs ...string) Entry {
		return Entry{Name: name, State: Incomplete, Schedule: "nightly", Time: started, LastWrite: lastWrite, Running: running, Runs: runs}
	}
	history = append(history,
		// Newer than every complete one: the newest complete backup stays the newest complete one.
		incomplete("nightly-20260310-120000", at("2026-03-10T12:00"), at("2026-03-10T12:59"), true),
		incomplete("nightly-20260310-020000", at("2026-03-10T02:00"), at("2026-03-10T02:30"), false), // 10.5 h ago, within 24 h
		incomplete("nightly-20260309-021500", at("2026-03-09T02:15"), at("2026-03-09T02:30"), false), // 34.5 h ago
		incomplete("nightly-20260308-233000", at("2026-03-08T23:30"), at("2026-03-09T12:59"), false), // started long ago, written 24 h + 1 min ago
		incomplete("nightly-20260301-020000", at("2026-03-01T02:00"), at("2026-03-01T03:00"), true),  // a stale time but a fresh heartbeat
		incomplete("nightly-20260302-020000", at("2026-03-02T02:00"), at("2026-03-02T03:00"), false, "run-d"),
		Entry{Name: "velero-daily-20260101", State: Velero, Time: at("2026-01-01T00:00"), LastWrite: at("2026-01-01T00:10")},
		Entry{Name: "weekly-20260309-020000", State: Complete, Schedule: "weekly", Time: at("2026-03-09T02:00")},
		Entry{Name: "by-hand", State: Complete, Time: at("2026-03-10T12:30")},
	)
	tests := []struct {
		name   string
		policy Policy
		keep   []string
		remove map[string]string
	}{
		{"last 1 of the schedule", Policy{Last: 1, Grace: 24 * time.Hour, Schedule: "nightly"},
			[]string{"nightly-20260310-120000", "nightly-20260310-020000", "nightly-20260310-000000", old, older,
				"nightly-20260301-020000"},
			// A run's reference keeps complete backups only: resumed, the run makes its backup again.
			map[string]string{"nightly-20260309-021500": RemoveIncomplete, "nightly-20260308-233000": RemoveIncomplete, "nightly-20260302-020000": RemoveIncomplete,
				"nightly-20260309-230000": RemoveUnkept, "nightly-20260308-000000": RemoveUnkept}},
		{"hourly 3, every schedule: the newest is the one made by hand", Policy{Hourly: 3, Grace: 24 * time.Hour},
			[]string{"by-hand", "nightly-20260310-120000", "nightly-20260310-020000", "nightly-20260310-000000", "nightly-20260309-230000", old, older, "nightly-20260301-020000", "velero-daily-20260101"},
			map[string]string{"nightly-20260309-220000": RemoveUnkept, "nightly-20260309-021500": RemoveIncomplete,
				"weekly-20260309-020000": RemoveUnkept}},
		{"no grace: only running incomplete ones stay", Policy{Last: 1, Schedule: "nightly"},
			[]string{"nightly-20260310-120000", "nightly-20260310-000000", old, older, "nightly-20260301-020000"},
			map[string]string{"nightly-20260310-020000": RemoveIncomplete}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := tt.policy.Apply(history, now)
			got := kept(ds)
			want := slices.Clone(tt.keep)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("kept\n  %v\nwant\n  %v", got, want)
			}
			for name, reason := range tt.remove {
				if r := reasonsOf(ds, name); !slices.Equal(r, []string{reason}) {
					t.Errorf("%s: %v, want removed for %q", name, r, reason)
				}
			}
			for _, d := range ds {
				if !tt.policy.InScope(d.Entry) {
					t.Errorf("%s of schedule %q is out of scope", d.Name, d.Schedule)
				}
			}
		})
	}
	ds := Policy{Last: 1, Grace: 24 * time.Hour, Schedule: "nightly"}.Apply(history, now)
	for name, want := range map[string][]string{
		old:                       {KeepReferencedPrefix + "run-b", KeepReferencedPrefix + "run-a"},
		"nightly-20260310-120000": {KeepRunning},
		"nightly-20260310-020000": {KeepGrace},
		"nightly-20260302-020000": {RemoveIncomplete},
		"nightly-20260310-000000": {KeepNewest, KeepLast},
	} {
		if got := reasonsOf(ds, name); !slices.Equal(got, want) {
			t.Errorf("%s: reasons %v, want %v", name, got, want)
		}
	}
}

func TestPolicyCheck(t *testing.T) {
	for _, p := range []Policy{{Last: -2}, {Monthly: -5}, {Daily: 1, Grace: -time.Second}} {
		if err := p.Check(); !badinput.Is(err) {
			t.Errorf("%+v: %v, want bad input", p, err)
		}
	}
	if err := (Policy{Last: -1, Daily: 3}).Check(); err != nil {
		t.Error(err)
	}
	if !(Policy{Grace: time.Hour}).Empty() || (Policy{Yearly: 1}).Empty() {
		t.Error("Empty")
	}
}

// History, Latest, Resolve and the runs' pins read a folder of synthetic backups.
func TestHistoryAndLatest(t *testing.T) {
	ctx := context.Background()
	store, err := storage.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	put := func(key string, v any) { putJSON(t, store, key, v) }
	manifest := func(name, schedule string, started time.Time) {
		putManifest(t, store, name, schedule, "prod-uid", started)
	}
	manifest("nightly-20260308-020000", "nightly", at("2026-03-08T02:00"))
	manifest("nightly-20260309-020000", "nightly", at("2026-03-09T02:00"))
	manifest("hourly-20260309-050000", "hourly", at("2026-03-09T05:00"))
	manifest("by-hand", "", at("2026-03-09T04:00"))
	put(Prefix("nightly-20260310-020000")+ClaimFile, map[string]any{"name": "nightly-20260310-020000"})
	put(Prefix("old-velero")+VeleroFile, map[string]any{"kind": "Backup"})
	for _, p := range []struct{ backup, run string }{{"nightly-20260308-020000", "run-1"}, {"by-hand", "run-2"}, {"by-hand", "run-1"}, {"by-hand", "run-2"}} {
		if err := PinBackup(ctx, store, p.backup, p.run, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if err := PinBackup(ctx, store, "by-hand", "../run-3", time.Now()); err == nil {
		t.Error("a pin for a run named ../run-3 was written")
	}

	entries, err := History(ctx, store, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Entry{}
	for _, e := range entries {
		got[e.Name] = e
	}
	if len(got) != 6 {
		t.Fatalf("history: %+v", entries)
	}
	if e := got["nightly-20260309-020000"]; e.State != Complete || e.Schedule != "nightly" || !e.Time.Equal(at("2026-03-09T02:00")) || e.Cluster != "prod-uid" {
		t.Errorf("complete backup: %+v", e)
	}
	if e := got["nightly-20260310-020000"]; e.State != Incomplete || e.Schedule != "nightly" || e.Running || e.LastWrite.IsZero() {
		t.Errorf("a claim without a heartbeat is a dead incomplete backup of its schedule by name: %+v", e)
	}
	if e := got["old-velero"]; e.State != Velero {
		t.Errorf("velero: %+v", e)
	}
	beat, err := StartHeartbeat(ctx, store, "nightly-20260310-020000", time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	if entries, err = History(ctx, store, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name == "nightly-20260310-020000" && !e.Running {
			t.Errorf("a fresh heartbeat means running: %+v", e)
		}
	}
	beat.Stop(ctx)

	for ref, want := range map[string]string{
		"latest":          "hourly-20260309-050000",
		"latest:nightly":  "nightly-20260309-020000",
		"latest:hourly":   "hourly-20260309-050000",
		"by-hand":         "by-hand",
		"not-checked-yet": "not-checked-yet",
	} {
		if name, err := Resolve(ctx, store, ref); err != nil || name != want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", ref, name, err, want)
		}
	}
	for _, ref := range []string{"latest:weekly", "latest:", "Not_A_Name"} {
		if _, err := Resolve(ctx, store, ref); !badinput.Is(err) {
			t.Errorf("Resolve(%q): %v, want bad input", ref, err)
		}
	}

	entries, err = History(ctx, store, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"nightly-20260308-020000": {"run-1"}, "by-hand": {"run-1", "run-2"}}
	for _, e := range entries {
		if !slices.Equal(e.Runs, want[e.Name]) {
			t.Errorf("%s pinned by %v, want %v", e.Name, e.Runs, want[e.Name])
		}
	}
	// A pin is no file of the backup: describe counts none.
	st, err := Inspect(ctx, store, "by-hand", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 2 || !slices.Equal(st.Pins, []string{"run-1", "run-2"}) {
		t.Errorf("by-hand: %d files, pins %v; want its 2 files, pins of run-1 and run-2", st.Files, st.Pins)
	}
}

func putJSON(t *testing.T, store storage.Backend, key string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(context.Background(), key, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
}

// putManifest writes a complete backup of cluster (its kube-system UID) started at started.
func putManifest(t *testing.T, store storage.Backend, name, schedule, cluster string, started time.Time) {
	t.Helper()
	putJSON(t, store, Prefix(name)+"resource.tar.gz", "x")
	putJSON(t, store, Prefix(name)+ManifestFile, Manifest{FormatVersion: FormatVersion, Name: name, Schedule: schedule, StartedAt: started, CompletedAt: started.Add(time.Minute),
		Source: plans.Cluster{Server: "https://" + cluster, UID: cluster}, Objects: []Object{{Kind: "ConfigMap", Name: strings.Repeat("x", 1000)}}})
}

// TestLatestOfAScheduleTwoClustersRun: latest:SCHEDULE is the newest backup of the cluster that
// runs the schedule. When its two newest backups are of two clusters (a drill's copy of the
// schedule beside production's, from its first night; a schedule that has just moved), the
// newest may be the copy's: it names each cluster's newest and asks for a backup by name. Once
// the cluster that took it over made two, it is that cluster's newest.
func TestLatestOfAScheduleTwoClustersRun(t *testing.T) {
	ctx := context.Background()
	store, err := storage.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []struct {
		name, cluster string
		at            string
	}{
		{"nightly-20260308-020000", "prod-uid", "2026-03-08T02:00"},
		{"nightly-20260309-020000", "prod-uid", "2026-03-09T02:00"},
		{"nightly-20260309-023000", "drill-uid", "2026-03-09T02:30"}, // the drill's first night
		{"weekly-20260301-030000", "old-uid", "2026-03-01T03:00"},
		{"weekly-20260308-030000", "new-uid", "2026-03-08T03:00"},
		{"weekly-20260315-030000", "new-uid", "2026-03-15T03:00"},
		{"daily-20260301-030000", "blue-uid", "2026-03-01T03:00"},
		{"daily-20260302-030000", "green-uid", "2026-03-02T03:00"}, // moved the day before
	} {
		putManifest(t, store, b.name, strings.Split(b.name, "-")[0], b.cluster, at(b.at))
	}
	for ref, want := range map[string][]string{
		"latest:nightly": {"nightly-20260309-020000 (cluster prod-uid)", "nightly-20260309-023000 (cluster drill-uid)"},
		"latest:daily":   {"daily-20260301-030000 (cluster blue-uid)", "daily-20260302-030000 (cluster green-uid)"},
	} {
		_, err := Resolve(ctx, store, ref)
		if !badinput.Is(err) || !strings.Contains(err.Error(), "of 2 clusters") || !strings.Contains(err.Error(), want[0]) || !strings.Contains(err.Error(), want[1]) {
			t.Errorf("%s, its two newest of two clusters: %v; want bad input naming %v", ref, err, want)
		}
	}
	if name, err := Resolve(ctx, store, "latest:weekly"); err != nil || name != "weekly-20260315-030000" {
		t.Errorf("latest:weekly, taken over by another cluster: %q, %v; want the new cluster's newest", name, err)
	}
}
