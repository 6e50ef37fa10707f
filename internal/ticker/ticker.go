// Package ticker calls a function at a steady interval in the background until it is stopped, as
// a run's lease renewals and a backup's heartbeat do.
package ticker

import (
	"context"
	"time"

	"k8s.io/utils/clock"
)

// Loop calls a function at every tick of its ticker.
type Loop struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// Start calls fn at every interval of clk, the first one interval from now, until ctx ends,
// Stop is called or fn returns false. fn's context ends on Stop. The ticker is made before Start
// returns, so that a test clock's steps after it reach the loop.
func Start(ctx context.Context, clk clock.WithTicker, interval time.Duration, fn func(ctx context.Context) bool) *Loop {
	ctx, cancel := context.WithCancel(ctx)
	l := &Loop{cancel: cancel, done: make(chan struct{})}
	tick := clk.NewTicker(interval)
	go func() {
		defer close(l.done)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C():
			}
			if !fn(ctx) {
				return
			}
		}
	}()
	return l
}

// Stop ends the loop and waits for a call of fn under way: no call follows its return.
func (l *Loop) Stop() {
	l.cancel()
	<-l.done
}

// Done is closed once the loop has ended.
func (l *Loop) Done() <-chan struct{} { return l.done }
