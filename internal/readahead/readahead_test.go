package readahead

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
	"time"
)

// The bytes come through whole and in order, in reads smaller and larger than the buffers, then
// the source's error.
func TestReadsAllInOrder(t *testing.T) {
	data := make([]byte, 1<<20+12345)
	for i := range data {
		data[i] = byte(i * 7)
	}
	for _, tc := range []struct {
		name string
		src  io.Reader
		want error
	}{
		{"whole", bytes.NewReader(data), nil},
		{"a byte a read", iotest.OneByteReader(bytes.NewReader(data[:5000])), nil},
		{"an error after the data", io.MultiReader(bytes.NewReader(data), iotest.ErrReader(errors.New("stream cut"))), errors.New("stream cut")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := io.ReadAll(New(tc.src, 3, 4096))
			want := data
			if tc.name == "a byte a read" {
				want = data[:5000]
			}
			if !bytes.Equal(got, want) {
				t.Errorf("read %d bytes, want the %d written, in order", len(got), len(want))
			}
			if (err == nil) != (tc.want == nil) || err != nil && err.Error() != tc.want.Error() {
				t.Errorf("error %v, want %v", err, tc.want)
			}
		})
	}
}

// A source that stops without ending hands over what it sent: a consumer that knows where its
// stream ends (a tar's end marker) is never kept waiting for a buffer to fill.
func TestLastBytesOfAStreamThatNeverEnds(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	r := New(pr, 8, 1<<20)
	go pw.Write([]byte("the archive's last 30 bytes..."))
	got := make([]byte, 30)
	done := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(r, got)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil || string(got) != "the archive's last 30 bytes..." {
			t.Errorf("read %q, %v", got, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the bytes of a stream that stays open were not handed over")
	}
}

// The goroutine reads while the consumer does not: the writer on the other end is not kept
// waiting for as many writes as there are buffers.
func TestReadsAheadOfTheConsumer(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	r := New(pr, 8, 1<<10)
	wrote := make(chan error, 1)
	go func() {
		for range 8 {
			if _, err := pw.Write(bytes.Repeat([]byte("x"), 100)); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("8 writes waited for a consumer that had not read yet")
	}
	got := make([]byte, 800)
	if _, err := io.ReadFull(r, got); err != nil || !bytes.Equal(got, bytes.Repeat([]byte("x"), 800)) {
		t.Errorf("read %q, %v; want the 800 bytes written", got, err)
	}
}
