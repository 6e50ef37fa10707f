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

// WebhookServerDown says err is a webhook that could not be called (WebhookUnreachable) because
// nothing serves it: its Service has no ready endpoint, nothing listens, or what is in front of it
// has no server to send the request to. A server that runs yet fails (its certificate, a hang)
// is not down.
func WebhookServerDown(err error) bool {
	if !WebhookUnreachable(err) {
		return false
	}
	msg := err.Error()
	for _, down := range []string{"no endpoints available for service", "connection refused", "the server is currently unable to handle the request"} {
		if strings.Contains(msg, down) {
			return true
		}
	}
	return false
}
