package volumes

import (
	"context"
	"fmt"
	"strings"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/rules"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PreflightMovers tries, with dryRun=All, the mover pod of one claim of each namespace whose
// claims' files move, on the cluster c reaches, and returns a finding for each namespace whose
// admission would refuse it: a policy engine's webhook, a Pod Security level, a LimitRange ferry
// cannot fit. Found only when the first mover is made, such a refusal stopped a run after blue's
// writers were stopped. On the source (restore false) the pod is a backup's; on the target
// (restore true, namespaces mapped) a restore's, placed by the scheduler. A namespace the cluster
// lacks is left out (a restore makes it: its movers are tried only then), and so are quota
// refusals (PreflightQuotas weighs every mover at once) and a namespace's default service account
// not made yet. cluster names the cluster in the findings.
func (c Contents) PreflightMovers(ctx context.Context, cluster string, restore bool) ([]plans.Finding, error) {
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
		spec, err := c.preflightMover(ctx, v, restore)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return findings, err
		}
		_, err = c.Client.CoreV1().Pods(v.Namespace).Create(ctx, spec, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: "ferry-preflight"})
		subject := "mover pods in namespace " + v.Namespace
		switch {
		case err == nil, kube.QuotaUncounted(err), apierrors.IsNotFound(err),
			apierrors.IsForbidden(err) && (strings.Contains(err.Error(), "exceeded quota") || strings.Contains(err.Error(), "failed quota") ||
				strings.Contains(err.Error(), "error looking up service account")):
		case kube.WebhookServerDown(err):
			findings = append(findings, plans.Finding{Severity: plans.Warning, Subject: subject, Message: fmt.Sprintf(
				"on the %s, the server of an admission webhook that must admit ferry's mover pods does not serve now (%v): they wait up to %s for it when they are made", cluster, err, moverAdmissionWait)})
		case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "cannot create resource"):
			findings = append(findings, plans.Finding{Severity: plans.Warning, Subject: subject, Message: fmt.Sprintf(
				"on the %s, ferry's user may not make mover pods here (%v): reading or writing the claims' files needs it", cluster, err)})
		case apierrors.IsForbidden(err), apierrors.IsInvalid(err), apierrors.IsBadRequest(err), kube.WebhookUnreachable(err):
			findings = append(findings, plans.Finding{Severity: plans.Blocking, Subject: subject, Message: fmt.Sprintf(
				"on the %s, ferry's mover pods (label %s=%s, image %s), which read and write the claims' files, would be refused: %v; let them pass the policy, or change mover in ferry.yaml",
				cluster, rules.MoverLabel, rules.MoverName, c.Image, err)})
		default:
			return findings, fmt.Errorf("%s: try a mover pod on the %s: %w", subject, cluster, err)
		}
	}
	return findings, nil
}

// preflightMover is the mover pod a backup (restore false) or a restore makes for claim v, fitted
// to its namespace's LimitRanges; a restore's is not pinned to the node the source's pods ran on.
func (c Contents) preflightMover(ctx context.Context, v plans.Volume, restore bool) (*corev1.Pod, error) {
	var spec *corev1.Pod
	if restore {
		v.Pods = nil
		var err error
		if spec, err = c.targetMover(ctx, v, roleRestore); err != nil {
			return nil, err
		}
	} else {
		restricted, err := c.restricted(ctx, v.Namespace)
		if err != nil {
			return nil, err
		}
		spec = c.moverPod(v, restricted)
	}
	return spec, c.fitResources(ctx, spec)
}
