// Package readahead reads a stream ahead of its consumer, in a goroutine of its own, so that the
// producer on the other end (an exec stream) does not wait while the consumer works (writes
// files). Unlike a reader that fills whole buffers, each read's bytes are passed on as they come:
// a stream that stops without ending (a stdin kwok or a kubelet never closes) still hands over
// its last bytes.
package readahead

import "io"

// chunk is one read of the source: its bytes, then its error.
type chunk struct {
	data []byte
	err  error
}

// Reader hands out what its goroutine read from the source, in order. It has no Close: the
// goroutine ends once the source's Read returns an error, and otherwise stays blocked in a Read
// of a source that never ends until the process exits.
type Reader struct {
	chunks <-chan chunk
	free   chan<- []byte
	// held is the buffer current is part of, given back once read.
	held, current []byte
	err           error
}

// New starts reading r ahead: up to buffers reads of at most size bytes each wait for the
// consumer.
func New(r io.Reader, buffers, size int) *Reader {
	chunks := make(chan chunk, buffers)
	// Two more buffers than wait: one the goroutine reads into, one the consumer reads from.
	free := make(chan []byte, buffers+2)
	for range buffers + 2 {
		free <- make([]byte, size)
	}
	go func() {
		defer close(chunks)
		for buf := range free {
			n, err := r.Read(buf)
			if n == 0 && err == nil {
				free <- buf
				continue
			}
			chunks <- chunk{data: buf[:n], err: err}
			if err != nil {
				return
			}
		}
	}()
	return &Reader{chunks: chunks, free: free}
}

// Read implements io.Reader: the bytes read ahead, then the source's error.
func (r *Reader) Read(p []byte) (int, error) {
	for len(r.current) == 0 {
		if r.held != nil {
			r.free <- r.held[:cap(r.held)]
			r.held = nil
		}
		if r.err != nil {
			return 0, r.err
		}
		c, ok := <-r.chunks
		if !ok {
			r.err = io.EOF // not reached: the goroutine sends its error first
			continue
		}
		r.held, r.current, r.err = c.data, c.data, c.err
	}
	n := copy(p, r.current)
	r.current = r.current[n:]
	return n, nil
}
