// Package volumes captures the contents of PersistentVolumeClaims through short-lived mover pods:
// a pod mounts the claim read-only with its working directory at the mount, ferry execs
// `ferry mover pack` in it and streams the tar it writes, compressed, into the backup, listing
// every file with its size, mode, owner and SHA-256.
package volumes

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// MountPath is where mover pods mount the claim; it is also their working directory.
const MountPath = "/data"

// MoverLabel marks mover pods.
const MoverLabel = "app.kubernetes.io/name"

// Contents captures the plan's volumes.
type Contents struct {
	Config *rest.Config
	Client kubernetes.Interface
	Plan   *plans.Plan
	// Image runs `ferry mover` (the ferry image).
	Image string
	// Parallel is how many claims move at once (default 4).
	Parallel int
	Log      *slog.Logger
}

// Name implements snapshot.Kind.
func (c Contents) Name() string { return "volumes" }

// Capture implements snapshot.Kind: every claim of the plan that holds no database or bucket.
func (c Contents) Capture(ctx context.Context, w *snapshot.Writer) error {
	if c.Parallel <= 0 {
		c.Parallel = 4
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.Parallel)
	for _, v := range c.Plan.Volumes {
		if v.Holds != "" {
			continue
		}
		if v.Phase != "Bound" {
			w.Skip("volume", v.Namespace+"/"+v.Name, "the claim is "+strings.ToLower(orUnknown(v.Phase))+": it has no volume to read")
			continue
		}
		g.Go(func() error {
			entry, err := c.capture(gctx, w, v)
			if err != nil {
				return fmt.Errorf("volume %s/%s: %w", v.Namespace, v.Name, err)
			}
			w.AddVolume(entry)
			return nil
		})
	}
	return g.Wait()
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// moverPod mounts the claim read-only; a ReadWriteOnce claim in use is pinned to its node.
func (c Contents) moverPod(v plans.Volume) *corev1.Pod {
	node := ""
	if slices.Contains(v.AccessModes, "ReadWriteOnce") || slices.Contains(v.AccessModes, "ReadWriteOncePod") {
		for _, p := range v.Pods {
			if p.Node != "" {
				node = p.Node
				break
			}
		}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "ferry-mover-", Namespace: v.Namespace,
			Labels:      map[string]string{MoverLabel: "ferry-mover"},
			Annotations: map[string]string{"ferry.dev/claim": v.Name},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			NodeName:                      node,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name: "mover", Image: c.Image, Command: []string{"ferry", "mover", "idle"}, WorkingDir: MountPath,
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: MountPath, ReadOnly: true}},
				SecurityContext: &corev1.SecurityContext{
					RunAsUser: ptr.To[int64](0), ReadOnlyRootFilesystem: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
				},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.Name, ReadOnly: true},
			}}},
		},
	}
}

func (c Contents) capture(ctx context.Context, w *snapshot.Writer, v plans.Volume) (snapshot.Volume, error) {
	entry := snapshot.Volume{Namespace: v.Namespace, Name: v.Name, Key: "volumes/" + v.Namespace + "/" + v.Name + ".tar.zst"}
	pods := c.Client.CoreV1().Pods(v.Namespace)
	pod, err := pods.Create(ctx, c.moverPod(v), metav1.CreateOptions{})
	if err != nil {
		return entry, fmt.Errorf("create mover pod: %w", err)
	}
	// Removed on success, failure and Ctrl-C alike.
	defer pods.Delete(context.WithoutCancel(ctx), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	c.Log.Info("mover pod created", "pod", v.Namespace+"/"+pod.Name, "claim", v.Name, "node", pod.Spec.NodeName)

	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return false, fmt.Errorf("mover pod %s ended (%s)", p.Name, p.Status.Phase)
		}
		return p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		return entry, fmt.Errorf("mover pod %s not running: %w", pod.Name, err)
	}
	// The container may take a moment to answer exec after the pod reports Running.
	var lastErr error
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var out bytes.Buffer
		lastErr = kube.Exec(ctx, c.Config, c.Client, kube.ExecRequest{Namespace: v.Namespace, Pod: pod.Name, Container: "mover",
			Command: []string{"ferry", "mover", "ready"}, Stdout: &out})
		return lastErr == nil, nil
	})
	if err != nil {
		return entry, fmt.Errorf("mover pod %s does not answer: %w", pod.Name, lastErr)
	}

	tarOut, tarIn := io.Pipe()     // pack's stdout
	indexOut, indexIn := io.Pipe() // a copy for the file list
	zstdOut, zstdIn := io.Pipe()   // the compressed stream for storage
	var stderr bytes.Buffer
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		err := kube.Exec(gctx, c.Config, c.Client, kube.ExecRequest{Namespace: v.Namespace, Pod: pod.Name, Container: "mover",
			Command: []string{"ferry", "mover", "pack"}, Stdout: tarIn, Stderr: &stderr})
		if err != nil {
			err = fmt.Errorf("ferry mover pack: %w: %s", err, strings.TrimSpace(stderr.String()))
		}
		tarIn.CloseWithError(err)
		return err
	})
	g.Go(func() error {
		enc, err := zstd.NewWriter(zstdIn)
		if err == nil {
			_, err = io.Copy(enc, io.TeeReader(tarOut, indexIn))
			if cerr := enc.Close(); err == nil {
				err = cerr
			}
		}
		tarOut.CloseWithError(err)
		indexIn.CloseWithError(err)
		zstdIn.CloseWithError(err)
		return err
	})
	g.Go(func() error {
		files, err := Index(indexOut)
		io.Copy(io.Discard, indexOut) // whatever follows the end marker
		entry.Files = files
		return err
	})
	g.Go(func() error {
		stored, err := w.Put(gctx, entry.Key, zstdOut)
		zstdOut.CloseWithError(err)
		entry.Key = stored
		return err
	})
	if err := g.Wait(); err != nil {
		return entry, err
	}
	for _, f := range entry.Files {
		entry.Bytes += f.Size
	}
	return entry, nil
}
