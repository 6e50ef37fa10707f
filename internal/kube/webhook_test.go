package kube

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestWebhookUnreachable: a webhook whose server could not be called is told from one that
// answered and denied, and from other refusals; RetryWhile makes a request again only while the
// server cannot be called.
func TestWebhookUnreachable(t *testing.T) {
	experiments := schema.GroupResource{Group: "kubeflow.org", Resource: "experiments"}
	unreachable := apierrors.NewInternalError(errors.New(`failed calling webhook "validator.experiment.katib.kubeflow.org": failed to call webhook: Post "https://katib-controller.kubeflow.svc:443/validate-experiment?timeout=10s": no endpoints available for service "katib-controller"`))
	denied := apierrors.NewForbidden(experiments, "tune", errors.New(`admission webhook "validator.experiment.katib.kubeflow.org" denied the request: spec.objective is required`))
	other := apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
	for _, tc := range []struct {
		name    string
		answers []error
		calls   int
		want    error
	}{
		{"admitted at once", []error{nil}, 1, nil},
		{"admitted once the server serves", []error{unreachable, unreachable, nil}, 3, nil},
		{"denied", []error{denied, nil}, 1, denied},
		{"another internal error", []error{other, nil}, 1, other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := RetryWhile(context.Background(), time.Minute, WebhookUnreachable, func() error {
				calls++
				return tc.answers[calls-1]
			})
			if calls != tc.calls || !errors.Is(err, tc.want) {
				t.Errorf("RetryWhile called do %d times and returned %v; want %d and %v", calls, err, tc.calls, tc.want)
			}
		})
	}
	if WebhookUnreachable(nil) {
		t.Error("no error is an unreachable webhook")
	}
	// Down: nothing serves it. A server that runs and fails is not down.
	for msg, down := range map[string]bool{
		`no endpoints available for service "katib-controller"`:                                                                                       true,
		`Post "https://katib-controller.kubeflow.svc:443/validate": dial tcp 10.96.0.12:443: connect: connection refused`:                             true,
		`the server is currently unable to handle the request`:                                                                                        true,
		`Post "https://katib-controller.kubeflow.svc:443/validate": tls: failed to verify certificate: x509: certificate signed by unknown authority`: false,
		`Post "https://katib-controller.kubeflow.svc:443/validate?timeout=10s": context deadline exceeded`:                                            false,
	} {
		err := apierrors.NewInternalError(errors.New(`failed calling webhook "validator.experiment.katib.kubeflow.org": failed to call webhook: ` + msg))
		if WebhookServerDown(err) != down {
			t.Errorf("WebhookServerDown(%q) = %v, want %v", msg, !down, down)
		}
	}
}
