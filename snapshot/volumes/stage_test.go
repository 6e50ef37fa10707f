package volumes

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// heldReader hands out the first n bytes of its stream, then waits for release before the rest.
type heldReader struct {
	r       *bytes.Reader
	n       int64
	release chan struct{}
}

func (h *heldReader) Read(p []byte) (int, error) {
	read := h.r.Size() - int64(h.r.Len())
	if read >= h.n {
		<-h.release
	} else if int64(len(p)) > h.n-read {
		p = p[:h.n-read]
	}
	return h.r.Read(p)
}

// An exec that broke off can leave its mover running, or start it only after ferry has tried
// again: a stage that starts while another stages into the same volume must leave that one's
// staging folder alone (the zoo's warm run once lost a retry's stage so: "openat 3: no such file
// or directory"), and still remove what no running mover holds.
func TestAStageLeavesTheStagingFolderOfARunningOne(t *testing.T) {
	src := t.TempDir()
	for _, name := range []string{"a", "b", "c", "d"} {
		data := make([]byte, 512<<10)
		rand.Read(data)
		must(t, os.WriteFile(filepath.Join(src, name), data, 0o644))
	}
	stream, files := packed(t, src)
	dst := t.TempDir()
	left := filepath.Join(dst, StagingPrefix+"0123abcd")
	must(t, os.Mkdir(left, 0o700))

	held := &heldReader{r: bytes.NewReader(stream), n: int64(len(stream) / 2), release: make(chan struct{})}
	type result struct {
		st  Staged
		err error
	}
	first := make(chan result, 1)
	go func() {
		st, err := StageCompressed(context.Background(), dst, held)
		first <- result{st, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		folders, _ := filepath.Glob(filepath.Join(dst, StagingPrefix+"*"))
		if len(folders) == 1 && folders[0] != left {
			break
		}
		if time.Now().After(deadline) {
			close(held.release)
			t.Fatalf("the first stage made no staging folder of its own: %v", folders)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A late mover whose stdin is gone: it ends at once, with nothing staged.
	if _, err := StageCompressed(context.Background(), dst, bytes.NewReader(nil)); err == nil {
		t.Error("a stage of an empty stream succeeded")
	}
	// A mover ferry gave up on that still holds its folder (kwok's stdin never ends): the apply
	// removes the folder.
	abandoned := filepath.Join(dst, StagingPrefix+"89abcdef")
	must(t, os.Mkdir(abandoned, 0o700))
	hold, err := os.Open(abandoned)
	must(t, err)
	defer hold.Close()
	must(t, unix.Flock(int(hold.Fd()), unix.LOCK_EX|unix.LOCK_NB))
	close(held.release)
	res := <-first
	if res.err != nil {
		t.Fatalf("the stage that ran while another started: %v", res.err)
	}
	if _, err := os.Stat(left); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the folder no mover holds is still there: %v", err)
	}
	_, err = Apply(context.Background(), dst, res.st, UnpackOptions{Owners: os.Geteuid() == 0})
	must(t, err)
	sameTree(t, files, dst)
	if folders, _ := filepath.Glob(filepath.Join(dst, StagingPrefix+"*")); len(folders) != 0 {
		t.Errorf("staging folders left: %v", folders)
	}
}
