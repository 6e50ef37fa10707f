package volumes

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/snapshot"
)

// What ferry reads of `ferry mover unpack --stage`: a good output is checked line by line
// against the backup's files; an archive whose entries differ from the manifest, or come out of
// the order a backup writes them in, is a bad backup; output that breaks off, or of a mover of
// another version, is the mover's fault, never the backup's.
func TestReadStaged(t *testing.T) {
	src := sourceTree(t)
	stream, files := packed(t, src)
	dst := changedTree(t, src)
	st, err := StageCompressed(context.Background(), dst, bytes.NewReader(stream))
	must(t, err)
	must(t, SaveStaged(dst, &st))
	var good bytes.Buffer
	must(t, PrintStaged(&good, dst, &st, st))
	head, body, _ := strings.Cut(good.String(), "\n")
	lines := strings.SplitAfter(body, "\n")
	lines = lines[:len(lines)-1] // after the last line's end
	if len(lines) != st.Count || st.Count != len(files) {
		t.Fatalf("%d lines for %d entries of %d files", len(lines), st.Count, len(files))
	}
	swapped := append([]string{}, lines...)
	swapped[1], swapped[2] = swapped[2], swapped[1]
	changed := append([]string{}, lines...)
	for i, l := range changed {
		if strings.Contains(l, `"sha256":"`) {
			changed[i] = strings.Replace(l, `"sha256":"`, `"sha256":"0`, 1)
			break
		}
	}
	for _, tc := range []struct {
		name, output string
		corrupt      bool // else the mover's output
		detail       string
	}{
		{"good", good.String(), false, ""},
		{"out of order", head + "\n" + strings.Join(swapped, ""), true, "not in the order of a walk"},
		{"a file changed", head + "\n" + strings.Join(changed, ""), true, "differ from the manifest"},
		{"broken off", head + "\n" + strings.Join(lines[:len(lines)-2], ""), false, "unexpected EOF"},
		{"a garbled line", head + "\n" + strings.Join(lines[:4], "") + "{\"path\":\n", false, "entry 5 of"},
		{"an older mover's", `{"id":"ab","files":[]}` + "\n", false, "of this version"},
		{"nothing", "", false, "EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got Staged
			err := readStaged(strings.NewReader(tc.output), &got, &got, "b/volumes/ns/c.tar.zst", inline(files))
			switch {
			case tc.detail == "":
				if err != nil || got.ListSHA256 != st.ListSHA256 || got.ID != st.ID {
					t.Fatalf("%v; read %q of %s, want %q", err, got.ListSHA256, got.ID, st.ListSHA256)
				}
			case err == nil || !strings.Contains(err.Error(), tc.detail):
				t.Fatalf("%v, want an error saying %q", err, tc.detail)
			case tc.corrupt != errors.Is(err, snapshot.ErrCorrupt) || tc.corrupt == errors.Is(err, errMoverOutput):
				t.Fatalf("%v: corrupt %v, the mover's %v; want corrupt %v", err, errors.Is(err, snapshot.ErrCorrupt), errors.Is(err, errMoverOutput), tc.corrupt)
			}
		})
	}
}

// A restore that finds everything in place stages nothing and keeps its short list off the
// volume: ferry hands the lines back, the mover applies them only with the SHA-256 ferry checked,
// and the volume, its root's times too, is as it was.
func TestShortStagedListStaysOffTheVolume(t *testing.T) {
	src := sourceTree(t)
	stream, files := packed(t, src)
	dst := t.TempDir()
	unpack(t, stream, dst, UnpackOptions{Owners: os.Geteuid() == 0})
	before := treeState(t, dst)
	st, err := StageCompressed(context.Background(), dst, bytes.NewReader(stream))
	must(t, err)
	back := overMover(t, dst, st, inline(files))
	if back.Saved || !back.RootModTime.IsZero() {
		t.Fatalf("saved %v, staging folder made at %v: nothing needed it", back.Saved, back.RootModTime)
	}
	var out bytes.Buffer
	must(t, SaveStaged(dst, &st))
	must(t, PrintStaged(&out, dst, &st, st))
	var summary Staged
	must(t, readStaged(&out, &summary, &summary, "b/volumes/ns/c.tar.zst", inline(files)))
	tampered := bytes.Replace(summary.lines, []byte(`"0644"`), []byte(`"0666"`), 1)
	if bytes.Equal(tampered, summary.lines) {
		t.Fatal("no line to change")
	}
	if _, err := LoadStaged(dst, summary, bufio.NewReader(bytes.NewReader(tampered))); !badinput.Is(err) {
		t.Errorf("lines changed after ferry checked them: %v", err)
	}
	res, err := Apply(context.Background(), dst, back, UnpackOptions{Owners: os.Geteuid() == 0})
	must(t, err)
	if res.Unchanged != len(files) {
		t.Errorf("%d written, %d updated, %d unchanged of %d", res.Written, res.Updated, res.Unchanged, len(files))
	}
	if after := treeState(t, dst); !slices.Equal(before, after) {
		t.Errorf("the volume changed:\n%s", strings.Join(lineChanges(before, after), "\n"))
	}
}

// A long list is saved on the volume even when nothing was staged, in a staging folder of its
// own that Abort removes, giving the root its time back.
func TestLongStagedListIsSaved(t *testing.T) {
	dir := t.TempDir()
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	must(t, os.Chtimes(dir, old, old))
	st := Staged{ID: "0123456789abcdef", Files: make([]StagedFile, InlineStaged+1)}
	for i := range st.Files {
		st.Files[i] = StagedFile{File: snapshot.File{Path: fmt.Sprintf("f%06d", i), Type: "file", Mode: "0644"}}
	}
	must(t, SaveStaged(dir, &st))
	if !st.Saved || st.Count != len(st.Files) || !st.RootModTime.Equal(old) {
		t.Fatalf("saved %v, %d entries, root time %v", st.Saved, st.Count, st.RootModTime)
	}
	loaded, err := LoadStaged(dir, Staged{ID: st.ID, Count: st.Count, ListSHA256: st.ListSHA256, Saved: true, RootModTime: st.RootModTime}, nil)
	must(t, err)
	if !reflect.DeepEqual(listedFiles(t, dir, loaded), st.Files) {
		t.Error("the saved list reads back otherwise")
	}
	must(t, Abort(dir, st))
	entries, err := os.ReadDir(dir)
	must(t, err)
	fi, err := os.Stat(dir)
	must(t, err)
	if len(entries) != 0 || !fi.ModTime().Equal(old) {
		t.Errorf("after Abort: %d entries, root time %v", len(entries), fi.ModTime())
	}
}

// Stage lists an entry that a later one of its name replaces, and a kept target file with more
// names than the archive gives it (staged as a copy, separate), in both places a staged list is
// made: in memory (nothing staged while the archive is read) and in the draft in the staging
// folder (files staged). Apply puts the later entry in place and the copy apart from the other
// name.
func TestStagedListDropsAndSeparates(t *testing.T) {
	for _, staging := range []bool{false, true} {
		t.Run(fmt.Sprintf("files staged=%v", staging), func(t *testing.T) {
			dir := t.TempDir()
			mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
			for name, contents := range map[string]string{"a": "second", "gone": "was read", "shared": "same"} {
				must(t, os.WriteFile(filepath.Join(dir, name), []byte(contents), 0o644))
				must(t, os.Chtimes(filepath.Join(dir, name), mtime, mtime))
			}
			must(t, os.Link(filepath.Join(dir, "shared"), filepath.Join(dir, "other-name")))
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			file := func(name, contents string) {
				must(t, tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(contents)), ModTime: mtime}))
				_, err := tw.Write([]byte(contents))
				must(t, err)
			}
			want, staged := []string{"a", "shared"}, int64(len("same"))
			if staging {
				file("a", "first") // staged, then dropped
			} else {
				file("a", "second")
			}
			file("a", "second")
			file("gone", "was read")
			must(t, tw.WriteHeader(&tar.Header{Name: "gone", Typeflag: tar.TypeReg, PAXRecords: map[string]string{SkippedRecord: "changed while read"}}))
			file("shared", "same")
			if staging {
				file("z", "new contents")
				want, staged = append(want, "z"), staged+int64(len("new contents"))
			}
			must(t, tw.Close())

			st, err := Stage(context.Background(), dir, &buf)
			must(t, err)
			var paths []string
			var listed []snapshot.File
			for _, f := range listedFiles(t, dir, st) {
				paths, listed = append(paths, f.Path), append(listed, f.File)
				if f.Path == "shared" && f.Staged == "" {
					t.Error("the target's file of two names was not staged as a copy")
				}
			}
			if !slices.Equal(paths, want) || len(st.Skipped) != 1 || st.Bytes != staged {
				t.Fatalf("listed %q, skipped %v, %d bytes staged; want %q, one skipped, %d bytes", paths, st.Skipped, st.Bytes, want, staged)
			}
			entries, err := os.ReadDir(filepath.Join(dir, StagingPrefix+st.ID))
			must(t, err)
			var inStaging []string
			for _, e := range entries {
				inStaging = append(inStaging, e.Name())
			}
			if wantStaging := map[bool][]string{false: {"1"}, true: {"2", "3", stagedListName}}[staging]; !slices.Equal(inStaging, wantStaging) {
				t.Errorf("the staging folder holds %q, want %q", inStaging, wantStaging)
			}
			res := appliedOverMover(t, dir, overMover(t, dir, st, inline(listed)), UnpackOptions{})
			if res.Count != len(want) {
				t.Errorf("applied %d entries, want %d", res.Count, len(want))
			}
			got, err := os.ReadFile(filepath.Join(dir, "a"))
			must(t, err)
			a, err := os.Stat(filepath.Join(dir, "shared"))
			must(t, err)
			b, err := os.Stat(filepath.Join(dir, "other-name"))
			must(t, err)
			if string(got) != "second" || os.SameFile(a, b) {
				t.Errorf("a holds %q; shared still the file of other-name: %v", got, os.SameFile(a, b))
			}
		})
	}
}
