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

	"github.com/ferrykube/ferry/internal/badinput"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// Exit codes, as design.md fixes them.
const (
	exitOK         = 0
	exitFailed     = 1
	exitBadInput   = 2
	exitIncomplete = 3 // finished, but items failed or were skipped; the report lists them
)

// incompleteError reports work that finished with failed or skipped items.
type incompleteError struct{ msg string }

func (e *incompleteError) Error() string { return e.msg }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, streams genericiooptions.IOStreams) int {
	cmd := newRootCommand(streams)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(streams.ErrOut, "ferry: %v\n", err)
	return exitCode(err)
}

func exitCode(err error) int {
	var incomplete *incompleteError
	switch {
	case err == nil:
		return exitOK
	case badinput.Is(err):
		return exitBadInput
	case errors.As(err, &incomplete):
		return exitIncomplete
	default:
		return exitFailed
	}
}

// discardIfNil keeps writers usable in tests that leave a stream out.
func discardIfNil(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
