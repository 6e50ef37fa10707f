package kube

import (
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// WebhookUnreachable says err is the API server's refusal of a request because an admission
// webhook that must admit it (failurePolicy Fail) could not be called: its server does not run,
// has no ready endpoint yet, or did not answer. The same request passes once the server serves,
// whereas a webhook that answered and denied the request is a refusal for good.
func WebhookUnreachable(err error) bool {
	return apierrors.IsInternalError(err) && strings.Contains(err.Error(), "failed calling webhook")
}
