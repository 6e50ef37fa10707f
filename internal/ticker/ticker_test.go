package ticker

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestLoop(t *testing.T) {
	const interval = time.Minute
	for _, tc := range []struct {
		name string
		// keepGoing is fn's answer at its call n (from 1).
		keepGoing func(n int) bool
		// end ends the loop from outside after the ticks (nil: it is not ended so).
		end   func(l *Loop, cancel context.CancelFunc)
		ticks int
		calls int  // fn's calls after ticks
		ended bool // the loop ended by itself (fn returned false)
	}{
		{name: "stopped before the first interval", keepGoing: func(int) bool { return true }, end: func(l *Loop, _ context.CancelFunc) { l.Stop() }, ticks: 0, calls: 0},
		{name: "one call an interval", keepGoing: func(int) bool { return true }, ticks: 3, calls: 3},
		{name: "fn stops it", keepGoing: func(n int) bool { return n < 2 }, ticks: 4, calls: 2, ended: true},
		{name: "Stop ends it", keepGoing: func(int) bool { return true }, end: func(l *Loop, _ context.CancelFunc) { l.Stop() }, ticks: 2, calls: 2},
		{name: "its context ends it", keepGoing: func(int) bool { return true }, end: func(l *Loop, cancel context.CancelFunc) { cancel(); <-l.Done() }, ticks: 1, calls: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			called := make(chan int)
			n := 0
			l := Start(ctx, clk, interval, func(ctx context.Context) bool {
				if ctx.Err() != nil {
					t.Error("fn called with its context ended")
				}
				n++
				called <- n
				return tc.keepGoing(n)
			})
			defer l.Stop()
			calls := 0
			for i := 0; i < tc.ticks; i++ {
				clk.Step(interval)
				if calls == tc.calls {
					continue // the loop ended: the step reaches no one
				}
				select {
				case calls = <-called:
				case <-time.After(10 * time.Second):
					t.Fatalf("no call after tick %d", i+1)
				}
			}
			if calls != tc.calls {
				t.Fatalf("%d calls after %d ticks, want %d", calls, tc.ticks, tc.calls)
			}
			if tc.ended {
				select {
				case <-l.Done():
				case <-time.After(10 * time.Second):
					t.Fatal("the loop goes on after fn returned false")
				}
			}
			if tc.end != nil {
				tc.end(l, cancel)
				select {
				case <-l.Done():
				default:
					t.Fatal("the loop goes on after it was ended")
				}
			}
			if tc.ended || tc.end != nil {
				clk.Step(interval)
				select {
				case n := <-called:
					t.Fatalf("call %d after the loop ended", n)
				case <-time.After(50 * time.Millisecond):
				}
			}
		})
	}
}
