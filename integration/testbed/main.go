package testbed

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"
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
	// Only loopback: an S3 client without credentials would ask the EC2 metadata service, a
	// link-local address, and so would every ferry the tests start (they inherit this).
	os.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	near := nearTimeout()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	started, err := Start(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testbed: %v\n", err)
		return 1
	}
	started.clock = newTestClock()
	*tb = started
	finished := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			fmt.Fprintln(os.Stderr, "testbed: interrupted; stopping")
		case <-near:
			fmt.Fprintln(os.Stderr, "testbed: go test's -timeout is near; stopping the testbed before it ends the run")
		case <-finished:
			return
		}
		started.clock.report(os.Stderr, 10)
		started.Stop(context.Background())
		os.Exit(1)
	}()
	code := m.Run()
	close(finished)
	if code != 0 {
		started.clock.report(os.Stderr, 10)
	}
	if err := started.Stop(context.Background()); err != nil {
		fmt.Fprintf(os.Stderr, "testbed: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// nearTimeout fires two minutes before go test's -timeout ends the binary with a panic, so that the
// testbed's processes are stopped and the running tests named (nil, never firing, without a timeout).
func nearTimeout() <-chan time.Time {
	f := flag.Lookup("test.timeout")
	if f == nil {
		return nil
	}
	timeout, err := time.ParseDuration(f.Value.String())
	if err != nil || timeout <= 0 {
		return nil
	}
	return time.After(max(timeout-2*time.Minute, timeout*9/10))
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
	if tb.clock != nil {
		tb.clock.begin(t)
	}
	return tb
}
