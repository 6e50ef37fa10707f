package kube

import (
	"context"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// QuotaUncounted says err is the API server's refusal of an object that a ResourceQuota of its
// namespace tracks, made while the quota's controller had not counted the namespace yet ("status
// unknown for quota"): the quota was made a moment before, as a Kubeflow Profile's controller
// makes it once a restore made the namespace and the Profile. The controller counts within
// moments, and the same request then passes.
func QuotaUncounted(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "status unknown for quota")
}

// QuotaRefused says err is a refusal by a ResourceQuota: one not counted yet (QuotaUncounted), or
// one without room ("exceeded quota").
func QuotaRefused(err error) bool {
	return QuotaUncounted(err) || apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota")
}

// quotaCountWait bounds how long CreateCounted waits for a quota to be counted.
const quotaCountWait = 15 * time.Second

// CreateCounted runs create, and again while the API server refuses it for a quota not counted
// yet (QuotaUncounted), for up to quotaCountWait; it returns create's last error, or ctx's.
func CreateCounted(ctx context.Context, create func() error) error {
	return RetryWhile(ctx, quotaCountWait, QuotaUncounted, create)
}
