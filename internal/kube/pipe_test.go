package kube

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"
)

// A Pipe's writes never wait for the reader, which gets every byte in order, then the writer's
// error, whether what it lags is held in memory or, beyond the limit, in a file; once the
// reader closes it, writes fail.
func TestPipe(t *testing.T) {
	for _, limit := range []int{0, 500, 1 << 20} {
		t.Run(fmt.Sprintf("limit=%d", limit), func(t *testing.T) {
			p := NewPipe(limit)
			var want bytes.Buffer
			write := func(i int) {
				t.Helper()
				chunk := bytes.Repeat([]byte{byte(i)}, i%97+1)
				want.Write(chunk)
				if n, err := p.Write(chunk); n != len(chunk) || err != nil {
					t.Fatalf("write %d: %d, %v", i, n, err)
				}
				if p.held > limit {
					t.Fatalf("%d bytes held in memory, limit %d", p.held, limit)
				}
			}
			var got bytes.Buffer
			buf := make([]byte, 77)
			for i := range 1000 { // nobody reads yet: an io.Pipe would wait at the first write
				write(i)
				if i%300 == 299 { // the reader catches up all the way (the file is dropped), or in part
					for reads := 0; got.Len() < want.Len() && (i != 599 || reads < 50); reads++ {
						n, err := p.Read(buf)
						if err != nil {
							t.Fatal(err)
						}
						got.Write(buf[:n])
					}
				}
			}
			stopped := errors.New("the command failed")
			p.CloseWithError(stopped)
			rest, err := io.ReadAll(p)
			got.Write(rest)
			if !errors.Is(err, stopped) || !bytes.Equal(got.Bytes(), want.Bytes()) {
				t.Fatalf("read %d bytes (want %d, same: %v), then %v", got.Len(), want.Len(), bytes.Equal(got.Bytes(), want.Bytes()), err)
			}
			if p.spill != nil {
				t.Error("the file is kept after everything in it was read")
			}

			p = NewPipe(limit)
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

			p = NewPipe(limit)
			p.Write([]byte("dropped"))
			p.Close()
			if _, err := p.Write([]byte("more")); !errors.Is(err, io.ErrClosedPipe) {
				t.Errorf("a write after the reader closed: %v", err)
			}
			if _, err := p.Read(make([]byte, 8)); !errors.Is(err, io.ErrClosedPipe) {
				t.Errorf("a read after Close: %v", err)
			}
			if p.spill != nil {
				t.Error("the file is kept after Close")
			}
		})
	}
}
