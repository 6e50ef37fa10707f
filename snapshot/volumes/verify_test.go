package volumes

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/snapshot"
)

var backupFiles = []snapshot.File{
	{Path: "data/", Type: "dir", Mode: "0755"},
	{Path: "data/a.csv", Type: "file", Mode: "0640", Size: 3, SHA256: "aaa"},
	{Path: "data/b.csv", Type: "file", Mode: "0640", Size: 3, SHA256: "bbb"},
	{Path: "data/c.csv", Type: "file", Mode: "0640", Size: 3, SHA256: "ccc"},
	{Path: "shared/", Type: "dir", Mode: "02770"},
	{Path: "latest", Type: "symlink", Mode: "0777", Link: "data/a.csv"},
	{Path: "gone", Type: "file", Mode: "0600", Size: 1, SHA256: "ggg"},
	{Path: "was-dir/", Type: "dir", Mode: "0755"},
}

func TestCompareFilesNamesEveryDifference(t *testing.T) {
	target := []snapshot.File{
		{Path: "data/", Type: "dir", Mode: "0755", UID: 1000}, // owners are not compared
		{Path: "data/a.csv", Type: "file", Mode: "0640", Size: 3, SHA256: "aaa"},
		{Path: "data/b.csv", Type: "file", Mode: "0640", Size: 3, SHA256: "b0b"},
		{Path: "data/c.csv", Type: "file", Mode: "0600", Size: 4, SHA256: "cccc"},
		{Path: "shared/", Type: "dir", Mode: "0770"},
		{Path: "latest", Type: "symlink", Mode: "0777", Link: "data/b.csv"},
		{Path: "was-dir", Type: "file", Mode: "0755", Size: 0},
		{Path: "new.txt", Type: "file", Mode: "0644"},
		{Path: "lost+found/", Type: "dir", Mode: "0700"},
	}
	diffs, identical := compareInline(backupFiles, target, true)
	want := []fileDiff{ // in walk order
		{"data/b.csv", snapshot.StatusDifferent, "sha256: backup bbb, target b0b"},
		{"data/c.csv", snapshot.StatusDifferent, "size: backup 3, target 4; mode: backup 0640, target 0600; sha256: backup ccc, target cccc"},
		{"gone", snapshot.StatusMissing, "not on the target"},
		{"latest", snapshot.StatusDifferent, "link: backup data/a.csv, target data/b.csv"},
		{"new.txt", snapshot.StatusDifferent, "not in the backup"},
		{"shared/", snapshot.StatusDifferent, "mode: backup 02770, target 0770"},
		{"was-dir/", snapshot.StatusDifferent, "type: backup dir, target file"},
	}
	if !reflect.DeepEqual(diffs, want) || identical != 2 {
		t.Fatalf("got %d identical and\n%+v\nwant 2 and\n%+v", identical, diffs, want)
	}
	if diffs, _ := compareInline(backupFiles, target, false); len(diffs) != len(want)-1 {
		t.Fatalf("without extras: %+v", diffs)
	}
}

func TestCheckRestoredCountsAndFails(t *testing.T) {
	v := snapshot.Volume{Namespace: "alice", Name: "ws", Files: backupFiles[:4]}
	res := UnpackResult{Files: []UnpackedFile{
		{File: backupFiles[0], Action: ActionUnchanged},
		{File: backupFiles[1], Action: ActionWritten},
		{File: snapshot.File{Path: "data/b.csv", Type: "file", Mode: "0640", Size: 3, SHA256: "b0b"}, Action: ActionWritten},
		{File: backupFiles[3], Action: ActionUpdated},
		{File: snapshot.File{Path: "smuggled", Type: "file"}, Action: ActionWritten},
	}, Notes: []string{"owners are not set"}}
	var report snapshot.Report
	if err := checkRestored(&report, "bob/ws", inline(v.Files), res, each(res.Files)); err != nil {
		t.Fatal(err)
	}
	counts := report.Counts["volumes"]
	if counts[snapshot.StatusRestored] != 1 || counts[snapshot.StatusUnchanged] != 1 || counts[snapshot.StatusUpdated] != 1 ||
		counts[snapshot.StatusFailed] != 2 || counts[snapshot.StatusSkipped] != 1 {
		t.Errorf("counts %v", counts)
	}
	want := []snapshot.ReportItem{
		{Kind: "volumes", Status: snapshot.StatusFailed, Name: "bob/ws:data/b.csv", Detail: "restored, but sha256: backup bbb, target b0b"},
		{Kind: "volumes", Status: snapshot.StatusFailed, Name: "bob/ws:smuggled", Detail: "written from the stored archive, but not in the backup's manifest"},
		{Kind: "volumes", Status: snapshot.StatusSkipped, Name: "bob/ws", Detail: "owners are not set"},
	}
	if !reflect.DeepEqual(report.Items, want) {
		t.Errorf("items\n%+v\nwant\n%+v", report.Items, want)
	}
}

// compareInline is compareWalks of lists held in memory, which cannot fail to be read.
func compareInline(backup, target []snapshot.File, extras bool) ([]fileDiff, int) {
	backup = slices.Clone(backup)
	slices.SortFunc(backup, func(a, b snapshot.File) int { return walkBefore(a.Path, b.Path) })
	diffs, identical, err := compareWalks(inline(backup), entries(target), extras)
	if err != nil {
		panic(err)
	}
	return diffs, identical
}

// each hands out a list held in memory as a mover's output is read, an entry at a time.
func each[T any](list []T) func() (T, bool, error) {
	return func() (T, bool, error) {
		var e T
		if len(list) == 0 {
			return e, false, nil
		}
		e, list = list[0], list[1:]
		return e, true, nil
	}
}

// entries is each of a list of files, in walk order.
func entries(list []snapshot.File) func() (snapshot.File, bool, error) {
	list = slices.Clone(list)
	slices.SortFunc(list, func(a, b snapshot.File) int { return walkBefore(a.Path, b.Path) })
	return each(list)
}

// stagedEntries is each of what was staged, as files.
func stagedEntries(t *testing.T, dir string, st Staged) func() (snapshot.File, bool, error) {
	var list []snapshot.File
	for _, f := range listedFiles(t, dir, st) {
		list = append(list, f.File)
	}
	return each(list)
}

// A backup's file list that fails its check, even at its end, voids the comparison: a restore
// then applies nothing and a verify reports no file identical.
func TestBadFileListVoidsTheComparison(t *testing.T) {
	list := []snapshot.File{{Path: "a", Type: "file", Mode: "0644", Size: 1, SHA256: "x"}}
	corrupt := func(fn func(snapshot.File) error) error {
		if err := inline(list)(fn); err != nil {
			return err
		}
		return fmt.Errorf("b/volume-files/ns/c.jsonl.zst: SHA-256 differs: %w", snapshot.ErrCorrupt)
	}
	if _, _, err := compareWalks(corrupt, entries(list), true); !errors.Is(err, snapshot.ErrCorrupt) {
		t.Errorf("compareWalks of a corrupt list: %v", err)
	}
	st := Staged{Files: []StagedFile{{File: list[0]}}}
	if err := checkStaged("b/volumes/ns/c.tar.zst", corrupt, stagedEntries(t, "", st)); !errors.Is(err, snapshot.ErrCorrupt) {
		t.Errorf("checkStaged with a corrupt list: %v, want ErrCorrupt", err)
	}
	if err := checkStaged("b/volumes/ns/c.tar.zst", inline(list), stagedEntries(t, "", st)); err != nil {
		t.Errorf("checkStaged with a good list: %v", err)
	}
	var report snapshot.Report
	if err := checkRestored(&report, "ns/c", corrupt, UnpackResult{}, each([]UnpackedFile{{File: list[0], Action: ActionWritten}})); !errors.Is(err, snapshot.ErrCorrupt) {
		t.Errorf("checkRestored with a corrupt list: %v", err)
	}
}

func TestWalkBefore(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"a", "a.txt", -1},      // by name
		{"a/x", "a.txt", -1},    // a directory's tree right after it, though "/" sorts after "."
		{"a/", "a", 0},          // a directory's slash does not count
		{"a/", "a/x", -1},       // a directory before what it holds
		{"b", "a/x/y", 1},       // by the first name
		{"a/b/c", "a/b/c/", 0},  // deep
		{"\xe9t\xe9", "z", 1},   // bytes, not characters
		{"lost+found/", "a", 1}, // "+" is a byte like any other
	} {
		if got := walkBefore(tc.a, tc.b); got != tc.want {
			t.Errorf("walkBefore(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := walkBefore(tc.b, tc.a); got != -tc.want {
			t.Errorf("walkBefore(%q, %q) = %d, want %d", tc.b, tc.a, got, -tc.want)
		}
	}
}

// walkSorted sorts files as a walk of their tree meets them.
func walkSorted(files []snapshot.File) []snapshot.File {
	out := slices.Clone(files)
	slices.SortFunc(out, func(a, b snapshot.File) int { return walkBefore(a.Path, b.Path) })
	return out
}

func pull(files []snapshot.File) func() (snapshot.File, bool, error) {
	return func() (snapshot.File, bool, error) {
		if len(files) == 0 {
			return snapshot.File{}, false, nil
		}
		f := files[0]
		files = files[1:]
		return f, true, nil
	}
}

// compareWalks, which holds neither list, finds what compareFiles finds of the same lists in walk
// order, and refuses lists out of that order.
func TestCompareWalks(t *testing.T) {
	target := []snapshot.File{
		{Path: "data/", Type: "dir", Mode: "0755"},
		{Path: "data/a.csv", Type: "file", Mode: "0640", Size: 3, SHA256: "aaa"},
		{Path: "data/b.csv", Type: "file", Mode: "0640", Size: 3, SHA256: "b0b"},
		{Path: "a-first.txt", Type: "file", Mode: "0644"},
		{Path: "shared/", Type: "dir", Mode: "0770"},
		{Path: "was-dir", Type: "file", Mode: "0755", Size: 0},
		{Path: "zzz/", Type: "dir", Mode: "0755"},
		{Path: "zzz/new.txt", Type: "file", Mode: "0644"},
		{Path: "lost+found/", Type: "dir", Mode: "0700"},
	}
	byPath := func(d []fileDiff) []fileDiff {
		return slices.SortedFunc(slices.Values(d), func(a, b fileDiff) int { return strings.Compare(a.path, b.path) })
	}
	for _, tc := range []struct {
		name           string
		backup, target []snapshot.File
		extras         bool
	}{
		{"differences, extras", backupFiles, target, true},
		{"differences, no extras", backupFiles, target, false},
		{"identical", backupFiles, backupFiles, true},
		{"empty target", backupFiles, nil, true},
		{"empty backup", nil, target, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, wantSame := compareInline(tc.backup, tc.target, tc.extras)
			got, same, err := compareWalks(inline(walkSorted(tc.backup)), pull(walkSorted(tc.target)), tc.extras)
			if err != nil || same != wantSame || !reflect.DeepEqual(byPath(got), byPath(want)) {
				t.Fatalf("compareWalks: %d identical, %+v, %v\nwant %d, %+v", same, got, err, wantSame, want)
			}
		})
	}
	unsorted := []snapshot.File{{Path: "b"}, {Path: "a"}}
	if _, _, err := compareWalks(inline(unsorted), pull(nil), true); !errors.Is(err, errFileList) {
		t.Errorf("a backup's list out of order: %v", err)
	}
	if _, _, err := compareWalks(inline(nil), pull(unsorted), true); !errors.Is(err, errTargetListing) {
		t.Errorf("a target's listing out of order: %v", err)
	}
	if _, _, err := compareWalks(inline(nil), pull([]snapshot.File{{Path: "a"}, {Path: "a/"}}), true); !errors.Is(err, errTargetListing) {
		t.Errorf("a target's listing with a name twice: %v", err)
	}
}

// WriteList prints what List returns, as one JSON line, an entry at a time; the listing reader
// reads it back an entry at a time, and so does an old-style decoder whole.
func TestWriteListReadsBack(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a/x.txt", "a.txt", "b/c/d", "latin1-\xe9t\xe9"} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteList(dir, &buf); err != nil {
		t.Fatal(err)
	}
	var whole Listing
	err = json.Unmarshal(buf.Bytes(), &whole)
	whole.takeRoot()
	if err != nil || !reflect.DeepEqual(whole, want) || !bytes.HasSuffix(buf.Bytes(), []byte("}\n")) {
		t.Fatalf("WriteList printed %s (%v)", buf.Bytes(), err)
	}
	for _, tc := range []struct {
		name, text string
		files      int
		skipped    int
		bad        bool
	}{
		{"as printed", buf.String(), len(want.Files) + 1, 0, false}, // the root folder first
		{"skipped first, other keys", `{"skipped":[{"path":"x","reason":"r"}],"other":{"a":[1]},"files":[{"path":"a","type":"file","mode":"0644","uid":0,"gid":0,"modTime":"2026-01-01T00:00:00Z"}]}`, 1, 1, false},
		{"empty", `{"files":[]}`, 0, 0, false},
		{"cut", `{"files":[{"path":"a"},`, 0, 0, true},
		{"not an object", `[]`, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := newListingReader(strings.NewReader(tc.text))
			n := 0
			for err == nil {
				var ok bool
				if _, ok, err = l.next(); !ok {
					break
				}
				n++
			}
			if tc.bad != (err != nil) || !tc.bad && (n != tc.files || len(l.skipped) != tc.skipped) {
				t.Fatalf("read %d entries, %d skipped, %v", n, len(l.skipped), err)
			}
		})
	}
}
