package kube

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
)

// ServiceAccountWait bounds the wait for a namespace's service account to appear.
const ServiceAccountWait = 2 * time.Minute

// WaitServiceAccount waits until get finds the service account namespace/name (a Get of it on the
// cluster). The controller manager makes a namespace's default account a moment after the
// namespace, and until then the API server refuses every pod that runs as it: a pod created in a
// namespace ferry has just restored must wait. An account that cannot be read (ferry may not be
// allowed to) is not waited for: the pod's creation then says what is wrong.
func WaitServiceAccount(ctx context.Context, namespace, name string, timeout time.Duration, get func(ctx context.Context) error) error {
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		err := get(ctx)
		return !apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("service account %s/%s, which pods in the namespace run as, does not exist after %s (the controller manager makes a namespace's default one): %w", namespace, name, timeout, err)
	}
	return nil
}
