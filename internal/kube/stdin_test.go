package kube

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
func TestStdinCancelsOnAStreamError(t *testing.T) {
	broken := errors.New("the backup's file does not match its manifest")
	src := &failingReader{data: strings.NewReader("some bytes"), err: broken}
	ctx, cancel := context.WithCancelCause(context.Background())
	in := NewStdin(src, cancel)
	data, err := io.ReadAll(in)
	if err != nil || string(data) != "some bytes" {
		t.Fatalf("the exec's stdin got %q, %v: want the bytes, then its end", data, err)
	}
	if !errors.Is(context.Cause(ctx), broken) {
		t.Fatalf("the exec was not cancelled with the stream's error: %v", context.Cause(ctx))
	}
	if err := in.Stop(); !errors.Is(err, broken) || in.Sent() != int64(len("some bytes")) {
		t.Fatalf("stop: %v after %d bytes", err, in.Sent())
	}
	reads := src.reads
	if n, err := in.Read(make([]byte, 10)); n != 0 || err != io.EOF || src.reads != reads {
		t.Fatal("a stopped stdin still reads the stream")
	}
}

// Without a cancel, the stream's errors pass as they are (the stream cancels the exec itself).
func TestStdinPassesErrorsWithoutCancel(t *testing.T) {
	broken := errors.New("the dump is longer than the manifest says")
	in := NewStdin(&failingReader{data: strings.NewReader("abc"), err: broken}, nil)
	if _, err := io.ReadAll(in); !errors.Is(err, broken) {
		t.Fatalf("read: %v, want the stream's error", err)
	}
	if err := in.Stop(); err != nil {
		t.Fatalf("stop: %v; the error was the reader's to report", err)
	}
}

func TestStdinStopEndsReads(t *testing.T) {
	s := NewStdin(strings.NewReader("abc"), nil)
	buf := make([]byte, 1)
	if n, err := s.Read(buf); n != 1 || err != nil {
		t.Fatalf("read %d, %v", n, err)
	}
	s.Stop()
	if n, err := s.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("after stop: read %d, %v; want 0, EOF", n, err)
	}
}
