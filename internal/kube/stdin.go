package kube

import (
	"context"
	"io"
	"sync"
)

// Stdin guards a stream handed to an exec's stdin. The exec's copy of stdin runs in a goroutine
// of its own that may outlive the command (and kwok, or a kubelet slow to notice, may never end
// the command's stdin): Stop waits for a read under way and makes every later read return io.EOF,
// so that the stream's owner may close its source then.
type Stdin struct {
	mu      sync.Mutex
	src     io.Reader
	cancel  context.CancelCauseFunc
	stopped bool
	err     error
	n       int64
}

// NewStdin guards src. With cancel (the exec's context's), an error of src cancels the exec with
// that error as its cause, and the exec's stdin sees its end: a stream that breaks off ends the
// exec itself, and Stop returns the error. Without, src's errors reach the exec's copier as they
// are.
func NewStdin(src io.Reader, cancel context.CancelCauseFunc) *Stdin {
	return &Stdin{src: src, cancel: cancel}
}

func (s *Stdin) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return 0, io.EOF
	}
	n, err := s.src.Read(p)
	s.n += int64(n)
	if err != nil && err != io.EOF && s.cancel != nil {
		s.err = err
		s.cancel(err)
		return n, io.EOF // the exec ends by the cancel; its stdin copier need not report it too
	}
	return n, err
}

// Stop ends the reads of src and returns its error, if it had one (with a cancel).
func (s *Stdin) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	return s.err
}

// Sent is how many bytes of src were read.
func (s *Stdin) Sent() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}
