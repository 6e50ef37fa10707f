package kube

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// A Pipe's writes never wait for the reader, which gets every byte in order, then the writer's
// error; once the reader closes it, writes fail.
func TestPipe(t *testing.T) {
	p := NewPipe()
	var want bytes.Buffer
	for i := range 1000 { // nobody reads yet: an io.Pipe would wait at the first write
		chunk := bytes.Repeat([]byte{byte(i)}, i%97+1)
		want.Write(chunk)
		if n, err := p.Write(chunk); n != len(chunk) || err != nil {
			t.Fatalf("write %d: %d, %v", i, n, err)
		}
	}
	stopped := errors.New("the command failed")
	p.CloseWithError(stopped)
	got, err := io.ReadAll(p)
	if !errors.Is(err, stopped) || !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("read %d bytes (want %d, same: %v), then %v", len(got), want.Len(), bytes.Equal(got, want.Bytes()), err)
	}

	p = NewPipe()
	done := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(p)
		done <- b
	}()
	p.Write([]byte("waited for"))
	p.CloseWithError(nil)
	if b := <-done; string(b) != "waited for" {
		t.Fatalf("a waiting reader read %q", b)
	}

	p = NewPipe()
	p.Write([]byte("dropped"))
	p.Close()
	if _, err := p.Write([]byte("more")); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("a write after the reader closed: %v", err)
	}
	if _, err := p.Read(make([]byte, 8)); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("a read after Close: %v", err)
	}
}
