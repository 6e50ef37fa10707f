package volumes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// A mover pod names the backup it serves and where that backup is stored, so that a later run
// can tell the pod of a live backup from one a killed ferry left behind.
const (
	BackupLabel       = "ferry.dev/backup"
	StorageAnnotation = "ferry.dev/storage"
)

// UnlabelledStaleAfter is when a backup mover pod without any ferry.dev/ label (made by an older
// ferry, which kept no heartbeat to check) counts as left behind.
const UnlabelledStaleAfter = time.Hour

// markMover ties a mover pod to its backup and the backup's storage.
func markMover(pod *corev1.Pod, backup string, store storage.Backend) *corev1.Pod {
	pod.Labels[BackupLabel] = backup
	if store != nil {
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[StorageAnnotation] = store.String()
	}
	return pod
}

// cleanup removes the mover pods that killed runs left in the cluster before this capture adds
// its own. It never fails the backup: what it could not do is logged.
func (c Contents) cleanup(ctx context.Context) {
	if c.Storage == nil {
		return
	}
	var namespaces []string
	for _, v := range c.Plan.Volumes {
		if !slices.Contains(namespaces, v.Namespace) {
			namespaces = append(namespaces, v.Namespace)
		}
	}
	if _, err := CleanupMovers(ctx, c.Client, c.Storage, namespaces, time.Now(), c.Log); err != nil {
		c.Log.Warn("mover pods left by interrupted backups were not cleaned up", "error", err)
	}
}

// CleanupMovers deletes the backup mover pods that no live run needs: those of a backup in store
// that is complete, gone, or whose heartbeat went stale (its ferry was killed), and those of an
// older ferry (no ferry.dev/ label) made more than UnlabelledStaleAfter before now. Pods of a
// live run, of backups in another storage, and restore and verify movers are left alone. It
// looks cluster-wide, or, where that is forbidden, in namespaces. It logs and returns every pod
// it deleted, as namespace/name.
func CleanupMovers(ctx context.Context, client kubernetes.Interface, store storage.Backend, namespaces []string, now time.Time, log *slog.Logger) ([]string, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pods, err := listMovers(ctx, client, namespaces, log)
	if err != nil {
		return nil, err
	}
	runs := map[string]snapshot.RunStatus{}
	var deleted []string
	var errs []error
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		reason, err := staleReason(ctx, p, store, now, runs)
		if err != nil {
			errs = append(errs, fmt.Errorf("mover pod %s/%s: %w", p.Namespace, p.Name, err))
			continue
		}
		if reason == "" {
			continue
		}
		err = client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete mover pod %s/%s: %w", p.Namespace, p.Name, err))
			continue
		}
		log.Info("deleted a mover pod left behind", "pod", p.Namespace+"/"+p.Name, "backup", p.Labels[BackupLabel],
			"claim", p.Annotations["ferry.dev/claim"], "reason", reason)
		deleted = append(deleted, p.Namespace+"/"+p.Name)
	}
	return deleted, errors.Join(errs...)
}

// listMovers lists ferry's mover pods cluster-wide, or namespace by namespace when the user may
// not list pods everywhere.
func listMovers(ctx context.Context, client kubernetes.Interface, namespaces []string, log *slog.Logger) ([]corev1.Pod, error) {
	sel := metav1.ListOptions{LabelSelector: MoverLabel + "=ferry-mover"}
	all, err := client.CoreV1().Pods("").List(ctx, sel)
	if err == nil {
		return all.Items, nil
	}
	if !apierrors.IsForbidden(err) {
		return nil, fmt.Errorf("list mover pods: %w", err)
	}
	var pods []corev1.Pod
	for _, ns := range namespaces {
		list, err := client.CoreV1().Pods(ns).List(ctx, sel)
		if apierrors.IsForbidden(err) {
			log.Warn("may not list pods: mover pods left there by interrupted backups stay", "namespace", ns)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list mover pods in %s: %w", ns, err)
		}
		pods = append(pods, list.Items...)
	}
	return pods, nil
}

// staleReason says why pod is left behind, or "" when it may still be needed. runs caches the
// state of each backup.
func staleReason(ctx context.Context, pod corev1.Pod, store storage.Backend, now time.Time, runs map[string]snapshot.RunStatus) (string, error) {
	backup, labelled := pod.Labels[BackupLabel]
	if !labelled {
		// Restore and verify movers carry a ferry.dev/ label of their own; restores also write.
		if hasFerryLabel(pod) || !readsClaim(pod) {
			return "", nil
		}
		if age := now.Sub(pod.CreationTimestamp.Time); age > UnlabelledStaleAfter {
			return fmt.Sprintf("made by an older ferry %s ago", age.Round(time.Minute)), nil
		}
		return "", nil
	}
	if store == nil || pod.Annotations[StorageAnnotation] != store.String() {
		return "", nil // its backup's heartbeat is out of sight
	}
	st, ok := runs[backup]
	if !ok {
		var err error
		if st, err = snapshot.CheckRun(ctx, store, backup, now); err != nil {
			return "", fmt.Errorf("check backup %s: %w", backup, err)
		}
		runs[backup] = st
	}
	switch st.State {
	case snapshot.RunComplete:
		return "backup " + backup + " is complete", nil
	case snapshot.RunGone:
		return "backup " + backup + " is not in storage", nil
	case snapshot.RunDead:
		if st.LastBeat.IsZero() {
			return "backup " + backup + " is incomplete and nothing writes it", nil
		}
		return fmt.Sprintf("backup %s is incomplete and its heartbeat stopped %s ago", backup, now.Sub(st.LastBeat).Round(time.Second)), nil
	}
	return "", nil
}

// hasFerryLabel reports whether a newer ferry labelled the pod beyond MoverLabel.
func hasFerryLabel(pod corev1.Pod) bool {
	for k := range pod.Labels {
		if strings.HasPrefix(k, "ferry.dev/") {
			return true
		}
	}
	return false
}

// readsClaim reports whether the pod mounts its claim read-only, as every backup mover does; a
// mover that writes (a restore) is never taken for a backup's.
func readsClaim(pod corev1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			return v.PersistentVolumeClaim.ReadOnly
		}
	}
	return false
}

// moverFailed explains a failed read: when the mover pod is gone or going, that is the cause.
func moverFailed(ctx context.Context, client kubernetes.Interface, namespace, pod string, err error) error {
	if err == nil {
		return nil
	}
	var deleted errMoverDeleted
	if errors.As(context.Cause(ctx), &deleted) {
		return fmt.Errorf("%w: %w", deleted, err)
	}
	p, gerr := client.CoreV1().Pods(namespace).Get(context.WithoutCancel(ctx), pod, metav1.GetOptions{})
	if apierrors.IsNotFound(gerr) || (gerr == nil && p.DeletionTimestamp != nil) {
		return fmt.Errorf("%w: %w", errMoverDeleted{namespace, pod}, err)
	}
	return err
}

// moverStderr is what the mover said, to end an error message, if it said anything.
func moverStderr(stderr string) string {
	if stderr = strings.TrimSpace(stderr); stderr != "" {
		return ": " + stderr
	}
	return ""
}

// errMoverDeleted is the cause of a stream cut short because its mover pod was deleted.
type errMoverDeleted struct{ namespace, pod string }

func (e errMoverDeleted) Error() string {
	return fmt.Sprintf("mover pod %s/%s was deleted while it read the claim", e.namespace, e.pod)
}

// whileMoverLives returns a context that ends when the mover pod is deleted, with that as its
// cause. A cluster ends a deleted pod's exec streams in its own way (a reset stream, a truncated
// tar); this way the failure says why, also where the runtime would let the stream run on.
func whileMoverLives(ctx context.Context, client kubernetes.Interface, namespace, pod string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	pods := client.CoreV1().Pods(namespace)
	gone := func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil }
	go func() {
		for ctx.Err() == nil {
			p, err := pods.Get(ctx, pod, metav1.GetOptions{})
			if apierrors.IsNotFound(err) || (err == nil && gone(p)) {
				cancel(errMoverDeleted{namespace, pod})
				return
			}
			var w watch.Interface
			if err == nil {
				w, err = pods.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + pod, ResourceVersion: p.ResourceVersion})
			}
			if err != nil { // the API server is unreachable for now: the stream itself will tell
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
				continue
			}
			for ev := range w.ResultChan() {
				p, ok := ev.Object.(*corev1.Pod)
				if ev.Type == watch.Deleted || (ok && gone(p)) {
					w.Stop()
					cancel(errMoverDeleted{namespace, pod})
					return
				}
			}
			w.Stop() // the server ended the watch: look again
		}
	}()
	return ctx, func() { cancel(nil) }
}
