package kube

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestPollSoon(t *testing.T) {
	tests := []struct {
		name    string
		doneAt  int // the call at which cond is done; 0: never
		failAt  int
		timeout time.Duration
		wantErr error
	}{
		{name: "done at once", doneAt: 1, timeout: time.Minute},
		// Well past the point where the delay reaches its cap: the poll goes on until the timeout.
		{name: "done after many polls at the cap", doneAt: 200, timeout: time.Minute},
		{name: "cond fails", failAt: 3, timeout: time.Minute, wantErr: errBroken},
		{name: "never done", timeout: 50 * time.Millisecond, wantErr: context.DeadlineExceeded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := PollSoon(context.Background(), time.Millisecond, 2*time.Millisecond, tc.timeout, func(context.Context) (bool, error) {
				calls++
				if calls == tc.failAt {
					return false, errBroken
				}
				return calls == tc.doneAt, nil
			})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("PollSoon: %v after %d calls, want %v", err, calls, tc.wantErr)
			}
			if tc.doneAt > 0 && calls != tc.doneAt {
				t.Fatalf("cond called %d times, want %d", calls, tc.doneAt)
			}
		})
	}
}

var errBroken = errors.New("broken")
