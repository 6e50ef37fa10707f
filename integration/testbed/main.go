package testbed

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
)

// Main runs a test package's tests against one shared testbed, started before the first test and
// stopped after the last, also when the run is interrupted. With -short no testbed is started and
// *tb stays nil: tests that need it skip themselves with Require. Call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(testbed.Main(m, testbed.Everything, &tb)) }
func Main(m *testing.M, opts Options, tb **Testbed) int {
	flag.Parse()
	if testing.Short() {
		return m.Run()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	started, err := Start(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testbed: %v\n", err)
		return 1
	}
	*tb = started
	finished := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			fmt.Fprintln(os.Stderr, "testbed: interrupted; stopping")
			started.Stop(context.Background())
			os.Exit(1)
		case <-finished:
		}
	}()
	code := m.Run()
	close(finished)
	if err := started.Stop(context.Background()); err != nil {
		fmt.Fprintf(os.Stderr, "testbed: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Require skips a test in -short mode, where no testbed runs, and returns the shared testbed.
func Require(t testing.TB, tb *Testbed) *Testbed {
	t.Helper()
	if tb == nil {
		if testing.Short() {
			t.Skip("needs the testbed; runs without -short")
		}
		t.Fatal("the testbed is not running: start it with testbed.Main in TestMain")
	}
	return tb
}
