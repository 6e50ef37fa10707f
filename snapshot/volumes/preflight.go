package volumes

import (
	"context"
	"fmt"
	"strings"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/rules"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PreflightMovers tries, with dryRun=All, the mover pod of one claim of each namespace whose
// claims' files move, on the cluster c reaches (cluster names it: "source", "target"; the target's
// namespaces are the mapped ones), and returns a finding for each namespace whose admission would
// refuse it: a policy engine's webhook, a Pod Security level, a LimitRange ferry cannot fit.
// Found only when the first mover is made, such a refusal stopped a run after blue's writers
// were stopped. A namespace the cluster lacks is left out (a restore makes it, with the source's
// labels, which PreflightPods weighs), and so are quota refusals (PreflightQuotas weighs every
// mover at once) and a namespace's default service account not made yet.
func (c Contents) PreflightMovers(ctx context.Context, cluster string) ([]plans.Finding, error) {
	var findings []plans.Finding
	seen := map[string]bool{}
	for _, v := range c.Plan.Volumes {
		if v.FilesUnread() != "" {
			continue
		}
		v.Namespace = c.Mapping.Namespace(v.Namespace)
		if seen[v.Namespace] {
			continue
		}
		seen[v.Namespace] = true
		restricted, err := c.restricted(ctx, v.Namespace)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return findings, err
		}
		spec := c.moverPod(v, restricted)
		if err := c.fitResources(ctx, spec); err != nil {
			return findings, err
		}
		_, err = c.Client.CoreV1().Pods(v.Namespace).Create(ctx, spec, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: "ferry-preflight"})
		subject := "mover pods in namespace " + v.Namespace
		switch {
		case err == nil, kube.QuotaUncounted(err), apierrors.IsNotFound(err),
			apierrors.IsForbidden(err) && (strings.Contains(err.Error(), "quota") || strings.Contains(err.Error(), "service account")):
		case kube.WebhookUnreachable(err):
			findings = append(findings, plans.Finding{Severity: plans.Warning, Subject: subject, Message: fmt.Sprintf(
				"on the %s, an admission webhook that must admit ferry's mover pods cannot be called now (%v): they wait up to %s for it when they are made", cluster, err, moverAdmissionWait)})
		case apierrors.IsForbidden(err), apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
			findings = append(findings, plans.Finding{Severity: plans.Blocking, Subject: subject, Message: fmt.Sprintf(
				"on the %s, ferry's mover pods (label %s=%s, image %s), which read and write the claims' files, would be refused: %v; let them pass the policy, or change mover in ferry.yaml",
				cluster, rules.MoverLabel, rules.MoverName, c.Image, err)})
		default:
			return findings, fmt.Errorf("%s: try a mover pod on the %s: %w", subject, cluster, err)
		}
	}
	return findings, nil
}
