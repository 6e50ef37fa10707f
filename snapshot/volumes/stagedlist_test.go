package volumes

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

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
