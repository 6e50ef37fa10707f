package volumes

import (
	"errors"
	"fmt"
	"reflect"
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
	want := []fileDiff{
		{"data/b.csv", snapshot.StatusDifferent, "sha256: backup bbb, target b0b"},
		{"data/c.csv", snapshot.StatusDifferent, "size: backup 3, target 4; mode: backup 0640, target 0600; sha256: backup ccc, target cccc"},
		{"shared/", snapshot.StatusDifferent, "mode: backup 02770, target 0770"},
		{"latest", snapshot.StatusDifferent, "link: backup data/a.csv, target data/b.csv"},
		{"gone", snapshot.StatusMissing, "not on the target"},
		{"was-dir/", snapshot.StatusDifferent, "type: backup dir, target file"},
		{"new.txt", snapshot.StatusDifferent, "not in the backup"},
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
	Contents{}.checkRestored(&report, "bob/ws", inline(v.Files), res)
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

// compareInline is compareFiles of a list held in memory, which cannot fail to be read.
func compareInline(backup, target []snapshot.File, extras bool) ([]fileDiff, int) {
	diffs, identical, err := compareFiles(inline(backup), target, extras)
	if err != nil {
		panic(err)
	}
	return diffs, identical
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
	if _, _, err := compareFiles(corrupt, list, true); !errors.Is(err, snapshot.ErrCorrupt) {
		t.Errorf("compareFiles of a corrupt list: %v", err)
	}
	st := Staged{Files: []StagedFile{{File: list[0]}}}
	if err := checkStaged("b/volumes/ns/c.tar.zst", corrupt, st); !errors.Is(err, snapshot.ErrCorrupt) {
		t.Errorf("checkStaged with a corrupt list: %v, want ErrCorrupt", err)
	}
	if err := checkStaged("b/volumes/ns/c.tar.zst", inline(list), st); err != nil {
		t.Errorf("checkStaged with a good list: %v", err)
	}
	var report snapshot.Report
	if err := (Contents{}).checkRestored(&report, "ns/c", corrupt, UnpackResult{Files: []UnpackedFile{{File: list[0], Action: ActionWritten}}}); !errors.Is(err, snapshot.ErrCorrupt) {
		t.Errorf("checkRestored with a corrupt list: %v", err)
	}
}
