package kube

import (
	"context"
	"time"
)

// RetryWhile runs do, and again after a growing delay while its error is one that passes
// (refusedFor), for up to wait; it returns do's last error, or ctx's.
func RetryWhile(ctx context.Context, wait time.Duration, refusedFor func(error) bool, do func() error) error {
	deadline := time.Now().Add(wait)
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 2*time.Second) {
		err := do()
		if err == nil || !refusedFor(err) || time.Now().Add(delay).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
	}
}
