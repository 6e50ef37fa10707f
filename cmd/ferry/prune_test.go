package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/migrate"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// TestPruneFileStorage runs ferry prune over a folder of synthetic backups: forty nightly ones, one
// a migration run pinned, one a run recorded before runs pinned their backups uses, one made by
// hand, a stale and a young incomplete one.
func TestPruneFileStorage(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	store, err := storage.NewFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	put := func(key string, v any) {
		t.Helper()
		data, _ := json.Marshal(v)
		if err := store.Put(ctx, key, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	// age sets every file of a backup to have been written at t.
	age := func(name string, at time.Time) {
		t.Helper()
		err := filepath.Walk(filepath.Join(dir, "backups", name), func(path string, info os.FileInfo, err error) error {
			if err == nil && !info.IsDir() {
				err = os.Chtimes(path, at, at)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC()
	var nightly []string // newest first
	for i := range 40 {
		started := now.Add(-time.Duration(i)*24*time.Hour - time.Hour)
		name := snapshot.ScheduledName("nightly", started)
		nightly = append(nightly, name)
		put(snapshot.Prefix(name)+"resource.tar.gz", "objects")
		put(snapshot.Prefix(name)+snapshot.ManifestFile, snapshot.Manifest{FormatVersion: snapshot.FormatVersion, Name: name, Schedule: "nightly", StartedAt: started, CompletedAt: started.Add(time.Minute)})
		age(name, started.Add(time.Minute))
	}
	put(snapshot.Prefix("by-hand")+snapshot.ManifestFile, snapshot.Manifest{FormatVersion: snapshot.FormatVersion, Name: "by-hand", StartedAt: now.Add(-100 * 24 * time.Hour)})
	referenced, older := nightly[30], nightly[25]
	if err := snapshot.PinBackup(ctx, store, referenced, "r-1", now); err != nil {
		t.Fatal(err)
	}
	// A run of an older ferry: its record names its backup; it pinned none.
	put(migrate.RunsPrefix+"r-0/run.json", migrate.Run{ID: "r-0", Backup: older})
	// A run that pins its backups and has not pinned this one does not keep it.
	put(migrate.RunsPrefix+"r-2/run.json", migrate.Run{ID: "r-2", Backup: nightly[20], Pins: true})
	stale := snapshot.ScheduledName("nightly", now.Add(-50*time.Hour))
	put(snapshot.Prefix(stale)+snapshot.ClaimFile, map[string]any{"name": stale})
	age(stale, now.Add(-49*time.Hour))
	young := snapshot.ScheduledName("nightly", now.Add(-2*time.Hour))
	put(snapshot.Prefix(young)+snapshot.ClaimFile, map[string]any{"name": young})

	prune := func(args ...string) (int, pruneReport, string) {
		t.Helper()
		var out, errOut strings.Builder
		code := run(ctx, append([]string{"--storage", "file://" + dir, "prune"}, args...), genericiooptions.IOStreams{Out: &out, ErrOut: &errOut})
		var rep pruneReport
		if slices.Contains(args, "json") {
			if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
				t.Fatalf("exit %d, no JSON report: %v\n%s%s", code, err, out.String(), errOut.String())
			}
		}
		return code, rep, out.String() + errOut.String()
	}
	namesOf := func(ds []snapshot.Decision) []string {
		var out []string
		for _, d := range ds {
			out = append(out, d.Name)
		}
		slices.Sort(out)
		return out
	}
	wantKeep := append(slices.Clone(nightly[:7]), referenced, older, young)
	slices.Sort(wantKeep)
	wantRemove := append(slices.Clone(nightly[7:25]), nightly[26:30]...)
	wantRemove = append(wantRemove, nightly[31:]...)
	wantRemove = append(wantRemove, stale)
	slices.Sort(wantRemove)

	code, rep, out := prune("--keep-last", "2", "--keep-daily", "7", "--schedule", "nightly", "--dry-run", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	if got := namesOf(rep.Keep); !slices.Equal(got, wantKeep) {
		t.Errorf("kept\n  %v\nwant\n  %v", got, wantKeep)
	}
	if got := namesOf(rep.Remove); !slices.Equal(got, wantRemove) {
		t.Errorf("removed\n  %v\nwant\n  %v", got, wantRemove)
	}
	for _, d := range rep.Keep {
		want := map[string][]string{nightly[0]: {snapshot.KeepNewest, snapshot.KeepLast, snapshot.KeepDaily}, nightly[2]: {snapshot.KeepDaily},
			referenced: {snapshot.KeepReferencedPrefix + "r-1"}, older: {snapshot.KeepReferencedPrefix + "r-0"}, young: {snapshot.KeepGrace}}[d.Name]
		if want != nil && !slices.Equal(d.Reasons, want) {
			t.Errorf("%s kept for %v, want %v", d.Name, d.Reasons, want)
		}
	}
	if entries, _ := snapshot.History(ctx, store, now); len(entries) != 43 || len(rep.Deleted) != 0 {
		t.Fatalf("a dry run deleted something: %d backups left, %v", len(entries), rep.Deleted)
	}

	// The table for people names each backup with its action and reasons.
	code, _, out = prune("--keep-last", "2", "--keep-daily", "7", "--schedule", "nightly", "--dry-run")
	if code != 0 || !strings.Contains(out, "would remove  "+stale) || !strings.Contains(out, "keep          "+referenced) ||
		!strings.Contains(out, "referenced by run r-1") || !strings.Contains(out, "Dry run: 10 kept, 32 would be removed; nothing was deleted.") {
		t.Errorf("exit %d:\n%s", code, out)
	}

	code, rep, out = prune("--keep-last", "2", "--keep-daily", "7", "--schedule", "nightly", "-o", "json")
	if code != 0 || len(rep.Deleted) != len(wantRemove) {
		t.Fatalf("exit %d, deleted %d: %s", code, len(rep.Deleted), out)
	}
	entries, err := snapshot.History(ctx, store, now)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		if e.Name != "by-hand" {
			left = append(left, e.Name)
		}
	}
	slices.Sort(left)
	if !slices.Equal(left, wantKeep) || len(entries) != len(wantKeep)+1 {
		t.Errorf("left in storage: %v, want %v and by-hand", left, wantKeep)
	}

	for _, bad := range [][]string{{"--keep-daily", "-3"}, {"--schedule", "nightly"}, {"--keep-last", "1", "--schedule", "Nightly"},
		{"--keep-last", "1", "-o", "yaml"}, {"--keep-last", "1", "--grace", "-1h"}, {"--keep-lots", "1"}} {
		if code, _, out := prune(bad...); code != 2 {
			t.Errorf("prune %v: exit %d, want 2: %s", bad, code, out)
		}
	}
}
