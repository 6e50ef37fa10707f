package kube

import (
	"context"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// PollSoon calls cond at once, then after a delay that grows from first to at most every, until
// cond is done, fails, or timeout passes. Something a moment away (a pod the kubelet is starting)
// is seen within tens of milliseconds, and a long wait still polls no more often than every.
//
// wait.ExponentialBackoff would not do: it gives up once its delay reaches its cap, whatever the
// timeout. A Backoff's DelayFunc keeps returning the cap instead.
func PollSoon(ctx context.Context, first, every, timeout time.Duration, cond wait.ConditionWithContextFunc) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	delays := wait.Backoff{Duration: first, Factor: 1.6, Cap: every, Steps: math.MaxInt32}.DelayFunc()
	return delays.Until(ctx, true, false, cond)
}
