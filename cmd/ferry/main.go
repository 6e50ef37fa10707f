// Command ferry moves, backs up and restores Kubernetes platforms blue-green. main only wires the
// commands and turns errors into exit codes; the work lives in the packages.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/snapshot"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// Exit codes, as README.md documents them.
const (
	exitOK         = 0
	exitFailed     = 1
	exitBadInput   = 2
	exitIncomplete = 3 // finished, but items failed or were skipped; the report lists them
	exitRefused    = 4 // refused to lose data (what green holds that blue lacks); the message names it
)

// incompleteError reports work that finished with failed or skipped items.
type incompleteError struct{ msg string }

func (e *incompleteError) Error() string { return e.msg }

// refusedError is a refusal to lose data: the input was fine, but doing as asked would drop what
// only one side holds. The message names what and how to go on.
type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

func main() {
	// In a pod (a mover, a scheduled backup) the collector keeps the heap under 90 % of the
	// container's memory limit, rather than let the kernel kill the process at the limit. Without
	// a limit (or with GOMEMLIMIT set) nothing changes; an error leaves the default.
	_, _ = memlimit.Set()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, streams genericiooptions.IOStreams) int {
	global := newGlobalOptions()
	cmd := newRootCommand(global, streams)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	if perr := global.profile.finish(); err == nil {
		err = perr
	}
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(streams.ErrOut, "ferry: %v\n", hint(err))
	return exitCode(err)
}

func exitCode(err error) int {
	var incomplete *incompleteError
	var refused *refusedError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &refused):
		return exitRefused
	case badinput.Is(err):
		return exitBadInput
	case errors.As(err, &incomplete):
		return exitIncomplete
	default:
		return exitFailed
	}
}

// hint adds to a library's error the flag that gives what it lacks: the libraries do not speak of flags.
func hint(err error) error {
	switch {
	case errors.Is(err, snapshot.ErrNoIdentity), errors.Is(err, snapshot.ErrWrongIdentity):
		return fmt.Errorf("%w; give the key with --identity", err)
	}
	return err
}

// discardIfNil keeps writers usable in tests that leave a stream out.
func discardIfNil(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
