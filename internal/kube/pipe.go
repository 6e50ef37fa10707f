package kube

import (
	"fmt"
	"io"
	"os"
	"sync"
)

// Pipe is an io.Pipe whose writes never wait for the reader: what the reader has not read yet is
// held, up to a limit in memory, beyond it in a temporary file. An exec's output must be taken as
// fast as it comes: the API server's WebSocket answers no ping while it waits to write, and when
// the command ends it closes the connection with those pings unread, which resets it, and the
// client loses the output's end and the command's status. A reader that is slower than the
// output holds the difference, not the whole output, and in memory no more than the limit.
type Pipe struct {
	mu     sync.Mutex
	ready  *sync.Cond
	chunks [][]byte
	held   int // bytes in chunks
	limit  int
	// spill holds what is written while chunks hold limit bytes, until the reader has read it
	// all: written and read are its bytes so far. It is removed from its folder once made.
	spill         *os.File
	written, read int64
	err           error // set by CloseWithError: io.EOF, or why the writer stopped
	closed        bool  // the reader stopped
}

// NewPipe returns an empty Pipe that holds up to limit bytes in memory.
func NewPipe(limit int) *Pipe {
	p := &Pipe{limit: limit}
	p.ready = sync.NewCond(&p.mu)
	return p
}

// Write holds a copy of b for the reader. It fails once the reader closed the pipe, or when what
// the limit leaves out cannot be written to the temporary file (the reader then gets that error).
func (p *Pipe) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.err != nil {
		return 0, io.ErrClosedPipe
	}
	if len(b) == 0 {
		return 0, nil
	}
	if p.spill == nil && p.held+len(b) > p.limit {
		f, err := os.CreateTemp("", "ferry-output-*")
		if err != nil {
			p.err = fmt.Errorf("hold a command's output: %w", err)
			return 0, p.err
		}
		os.Remove(f.Name()) // gone with the last descriptor, whatever happens
		p.spill = f
	}
	if p.spill != nil {
		n, err := p.spill.WriteAt(b, p.written)
		p.written += int64(n)
		if err != nil {
			p.err = fmt.Errorf("hold a command's output: %w", err)
			return n, p.err
		}
	} else {
		p.chunks = append(p.chunks, append([]byte(nil), b...))
		p.held += len(b)
	}
	p.ready.Signal()
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
	for len(p.chunks) == 0 && p.read == p.written && p.err == nil && !p.closed {
		p.ready.Wait()
	}
	switch {
	case p.closed:
		return 0, io.ErrClosedPipe
	case len(p.chunks) > 0: // written before the spill
		n := copy(b, p.chunks[0])
		p.held -= n
		if p.chunks[0] = p.chunks[0][n:]; len(p.chunks[0]) == 0 {
			p.chunks[0] = nil
			p.chunks = p.chunks[1:]
		}
		return n, nil
	case p.read < p.written:
		n, err := p.spill.ReadAt(b[:min(int64(len(b)), p.written-p.read)], p.read)
		p.read += int64(n)
		if err != nil && err != io.EOF {
			return n, fmt.Errorf("read a command's output back: %w", err)
		}
		if p.read == p.written { // read up: the next writes go to memory again
			p.dropSpill()
		}
		return n, nil
	}
	return 0, p.err
}

// Close stops the reader: what is held is dropped, and later writes fail.
func (p *Pipe) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed, p.chunks, p.held = true, nil, 0
	p.dropSpill()
	p.ready.Broadcast()
	return nil
}

func (p *Pipe) dropSpill() {
	if p.spill != nil {
		p.spill.Close()
		p.spill, p.written, p.read = nil, 0, 0
	}
}

// ReadOutput runs run, which writes a command's output to the writer it gets, and hands read
// the output as it comes, through a Pipe that holds up to memory bytes of what read lags: read
// reads to the end or fails, which makes run's later writes fail. It returns read's error and
// run's. An exec whose output is read slower than it comes loses the output's end (see Pipe).
func ReadOutput(memory int, run func(stdout io.Writer) error, read func(io.Reader) error) (readErr, runErr error) {
	out := NewPipe(memory)
	ran := make(chan error, 1)
	go func() {
		err := run(out)
		out.CloseWithError(err)
		ran <- err
	}()
	if readErr = read(out); readErr == nil {
		io.Copy(io.Discard, out) // the last line's end
	}
	out.Close() // a command still printing stops there
	return readErr, <-ran
}
