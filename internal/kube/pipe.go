package kube

import (
	"io"
	"sync"
)

// Pipe is an io.Pipe whose writes never wait for the reader: what the reader has not read yet is
// held in memory. An exec's output must be taken as fast as it comes: the API server's
// WebSocket answers no ping while it waits to write, and when the command ends it closes the
// connection with those pings unread, which resets it, and the client loses the output's end
// and the command's status. A reader that is slower than the output holds the difference, not
// the whole output.
type Pipe struct {
	mu     sync.Mutex
	ready  *sync.Cond
	chunks [][]byte
	err    error // set by CloseWithError: io.EOF, or why the writer stopped
	closed bool  // the reader stopped
}

// NewPipe returns an empty Pipe.
func NewPipe() *Pipe {
	p := &Pipe{}
	p.ready = sync.NewCond(&p.mu)
	return p
}

// Write holds a copy of b for the reader. It fails once the reader closed the pipe.
func (p *Pipe) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.err != nil {
		return 0, io.ErrClosedPipe
	}
	if len(b) > 0 {
		p.chunks = append(p.chunks, append([]byte(nil), b...))
		p.ready.Signal()
	}
	return len(b), nil
}

// CloseWithError ends the writes: the reader gets what was written, then err (io.EOF if nil).
func (p *Pipe) CloseWithError(err error) {
	if err == nil {
		err = io.EOF
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
	}
	p.ready.Broadcast()
}

// Read reads what was written, waiting for it.
func (p *Pipe) Read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.chunks) == 0 && p.err == nil && !p.closed {
		p.ready.Wait()
	}
	if p.closed {
		return 0, io.ErrClosedPipe
	}
	if len(p.chunks) == 0 {
		return 0, p.err
	}
	n := copy(b, p.chunks[0])
	if p.chunks[0] = p.chunks[0][n:]; len(p.chunks[0]) == 0 {
		p.chunks[0] = nil
		p.chunks = p.chunks[1:]
	}
	return n, nil
}

// Close stops the reader: what is held is dropped, and later writes fail.
func (p *Pipe) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed, p.chunks = true, nil
	p.ready.Broadcast()
	return nil
}
