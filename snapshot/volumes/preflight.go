package volumes

import (
	"context"
	"fmt"
	"strings"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/rules"
	"github.com/ferrykube/ferry/snapshot"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
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

// noProvisioner is the provisioner of a class that makes no volumes: its claims bind only to
// volumes made by hand (local volumes).
const noProvisioner = "kubernetes.io/no-provisioner"

// Precheck refuses, before a restore applies anything, a backup with files for a claim the
// target holds already but cannot give a volume: pending, of a storage class the target does not
// have (nor the backup brings) and no volume of that class's name is free for it, or of a class
// that makes no volumes with none of its volumes free. The mover that writes the claim's files
// could not start, and the restore would stop after the mover's wait, some volumes written and
// others not (a carry-back into blue's claims, a restore where GitOps made the claims first). A
// claim the restore makes gets its class from the backup, mapped; the target preflight checks
// those. What cannot be read is no refusal: the restore goes on, as before this check.
func (c Contents) Precheck(ctx context.Context, r *snapshot.Reader, report *snapshot.Report) error {
	c = c.withDefaults()
	var refused []string
	var volumes []corev1.PersistentVolume // listed once, when a claim needs them
	for _, v := range r.Manifest.Volumes {
		ns := c.Mapping.Namespace(v.Namespace)
		name := ns + "/" + v.Name
		why, err := c.cannotBind(ctx, r.Manifest, ns, v.Name, &volumes)
		if err != nil {
			c.Log.Warn("cannot tell whether the target's claim can get a volume: restoring it all the same", "claim", name, "error", err)
			continue
		}
		if why != "" {
			report.Add(kindName, snapshot.StatusFailed, name, "the claim cannot get a volume on the target: "+why+"; nothing of the backup was applied")
			refused = append(refused, name+" ("+why+")")
		}
	}
	if len(refused) > 0 {
		return fmt.Errorf("claims the target holds cannot get a volume for their files: %s; make their class on the target or give it free volumes: %w", strings.Join(refused, "; "), snapshot.ErrRefused)
	}
	return nil
}

// cannotBind says why the target's claim ns/name, when it exists and is pending, cannot get a
// volume; "" when it is bound or may be. volumes caches the target's volumes.
func (c Contents) cannotBind(ctx context.Context, m *snapshot.Manifest, ns, name string, volumes *[]corev1.PersistentVolume) (string, error) {
	claim, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil // the restore makes it
	}
	if err != nil {
		return "", fmt.Errorf("read the claim: %w", err)
	}
	class := ptr.Deref(claim.Spec.StorageClassName, "")
	if claim.Spec.VolumeName != "" || claim.Status.Phase != corev1.ClaimPending || class == "" {
		return "", nil // bound, being bound to a named volume, or waiting for one made by hand
	}
	sc, err := c.Client.StorageV1().StorageClasses().Get(ctx, class, metav1.GetOptions{})
	var why string
	switch {
	case apierrors.IsNotFound(err) && m.HoldsObject("storage.k8s.io", "StorageClass", "", class):
		return "", nil // the restore makes the class before the volumes
	case apierrors.IsNotFound(err):
		why = "its storage class " + class + " does not exist, and no volume of that class is free for it"
	case err != nil:
		return "", fmt.Errorf("read its storage class %s: %w", class, err)
	case sc.Provisioner != noProvisioner:
		return "", nil
	default:
		why = "its storage class " + class + " makes no volumes (" + noProvisioner + ") and none of its volumes is free for it"
	}
	// A class that makes no volumes, or none at all (the "manual" of volumes made by hand), binds
	// a claim to a free volume of the class's name.
	if *volumes == nil {
		list, err := c.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", fmt.Errorf("list the volumes of its storage class %s: %w", class, err)
		}
		*volumes = list.Items
	}
	want := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	for _, pv := range *volumes {
		ref := pv.Spec.ClaimRef
		if pv.Spec.StorageClassName == class && pv.Status.Phase == corev1.VolumeAvailable && pv.Spec.Capacity.Storage().Cmp(want) >= 0 &&
			(ref == nil || ref.Namespace == claim.Namespace && ref.Name == claim.Name) {
			return "", nil
		}
	}
	return why, nil
}
