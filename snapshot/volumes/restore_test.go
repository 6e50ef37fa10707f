package volumes

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

type failingReader struct {
	data  io.Reader
	err   error
	reads int
}

func (f *failingReader) Read(p []byte) (int, error) {
	f.reads++
	n, err := f.data.Read(p)
	if err == io.EOF {
		return n, f.err
	}
	return n, err
}

// A stream that breaks off ends the exec (kwok never ends its stdin), and is the error reported.
func TestFeedCancelsOnAStreamError(t *testing.T) {
	broken := errors.New("the backup's file does not match its manifest")
	src := &failingReader{data: strings.NewReader("some bytes"), err: broken}
	ctx, cancel := context.WithCancelCause(context.Background())
	in := &feed{src: src, cancel: cancel}
	data, err := io.ReadAll(in)
	if err != nil || string(data) != "some bytes" {
		t.Fatalf("the exec's stdin got %q, %v: want the bytes, then its end", data, err)
	}
	if !errors.Is(context.Cause(ctx), broken) {
		t.Fatalf("the exec was not cancelled with the stream's error: %v", context.Cause(ctx))
	}
	if err := in.stop(); !errors.Is(err, broken) || in.read != int64(len("some bytes")) {
		t.Fatalf("stop: %v after %d bytes", err, in.read)
	}
	reads := src.reads
	if n, err := in.Read(make([]byte, 10)); n != 0 || err != io.EOF || src.reads != reads {
		t.Fatal("a stopped feed still reads the stream")
	}
}
