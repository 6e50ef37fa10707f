// Package volumes captures the contents of PersistentVolumeClaims through short-lived mover pods:
// a pod mounts the claim read-only with its working directory at the mount, ferry execs
// `ferry mover pack` in it and streams the tar it writes, compressed, into the backup, listing
// every file with its size, mode, owner and SHA-256. A restore streams the stored archive into
// `ferry mover unpack` in a pod that mounts the claim on the target read-write, and checks what it
// wrote against the manifest; a verify lists the target's claim with `ferry mover pack --list`.
// With Chunks the tar stream is stored over the chunk repository instead, cut at its entries, and
// only files changed since the claim's previous backup are read (see tree.go and chunked.go);
// restore makes the archive again from it, and stages and checks it the same way.
package volumes

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/plans/rules"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"github.com/ferrykube/ferry/storage/repo"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// MountPath is where mover pods mount the claim; it is also their working directory.
const MountPath = "/data"

// MoverLabel, of value rules.MoverName, marks mover pods.
const MoverLabel = rules.MoverLabel

// Contents captures the plan's volumes, and restores and verifies a backup's.
type Contents struct {
	Config *rest.Config
	Client kubernetes.Interface
	Plan   *plans.Plan
	// Image runs `ferry mover` (the ferry image).
	Image string
	// Parallel is how many claims move at once (default 4).
	Parallel int
	// Direct, when set, has each mover move its volume to or from storage itself, through URLs
	// presigned for its own object and a short time (see direct.go): data then flows from many
	// nodes at once, not through ferry. Encrypted volumes are restored through ferry all the same.
	Direct storage.Presigner
	// Storage is where the backup goes: mover pods name it, and a capture first deletes the pods
	// that killed runs into it left behind (see cleanup.go).
	Storage storage.Backend
	// Mapping names the target namespace of each claim on a restore or verify.
	Mapping snapshot.Mapping
	// Exact makes a restore also delete what a claim holds that the backup does not, leaving the
	// tree exactly as backed up (to carry data back); by default such files are left alone.
	Exact bool
	// Chunks stores each volume read through exec (not Direct) as a tree stream over the chunk
	// repository (see tree.go): content-addressed, deduplicated, and reading only the files
	// that changed since the claim's previous backup of this format.
	Chunks bool
	// Base names a backup in the same storage that a restore before left the target's claims
	// as: a chunked volume's restore then sends only the files whose entries differ from the
	// same claim's in Base, and the mover checks the others on the claim (see TypeKept). A warm
	// run's rounds and final restore set it; "" sends every file.
	Base string
	Log  *slog.Logger

	// repo is the chunk repository a chunked capture writes to, and previous the backups it
	// looks for each claim's previous tree in.
	repo     *repo.Repo
	previous []snapshot.Previous
	// base is Base's manifest, read once by Restore; nil when there is none to read.
	base *snapshot.Manifest

	// movers are the pods this run started, as they were when ferry first saw them running:
	// ferry execs only into those, and only while they still are (see identity.go).
	movers *moverSet
}

// Name implements snapshot.Kind.
func (c Contents) Name() string { return "volumes" }

// Capture implements snapshot.Kind: every claim of the plan that holds no database or bucket.
func (c Contents) Capture(ctx context.Context, w *snapshot.Writer) error {
	c = c.withDefaults()
	c.cleanup(ctx)
	reads := slices.ContainsFunc(c.Plan.Volumes, func(v plans.Volume) bool { return v.FilesUnread() == "" })
	if c.Chunks && c.Direct == nil && reads { // a backup of no claim neither loads nor makes the repository
		var err error
		// Write-only: a capture only writes, and its index then keeps about 42 bytes a chunk, not 61.
		if c.repo, err = openRepo(ctx, c.Storage, repo.Options{Prefix: RepoPrefix(w.Recipients()), Recipients: w.Recipients(), WriteOnly: true}); err != nil {
			return err
		}
		if !w.Encrypted() {
			c.previous = w.Recent(ctx)
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.Parallel)
	for _, v := range c.Plan.Volumes {
		if v.Holds != "" {
			continue
		}
		if v.NoVolumeYet() {
			g.Go(func() error { return c.noVolumeYet(gctx, w, v) })
			continue
		}
		if why := v.FilesUnread(); why != "" {
			w.Skip("volume", v.Namespace+"/"+v.Name, why)
			continue
		}
		g.Go(func() error {
			if slices.Contains(v.AccessModes, "ReadWriteOncePod") { // its pods as they are now, not as planned
				live, err := c.liveVolume(gctx, v.Namespace, v.Name)
				if err != nil {
					return err // it names the claim
				}
				if why := heldByOnePod(live); why != "" {
					w.Skip("volume", v.Namespace+"/"+v.Name, why)
					return nil
				}
			}
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

// noVolumeYet records claim v, planned with no volume, as holding no data when it still has
// none, and as skipped when it has one now (files the plan did not read) or is to be filled
// from a data source when first used.
func (c Contents) noVolumeYet(ctx context.Context, w *snapshot.Writer, v plans.Volume) error {
	name := v.Namespace + "/" + v.Name
	pvc, err := c.Client.CoreV1().PersistentVolumeClaims(v.Namespace).Get(ctx, v.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		w.NoData("volume", name, "the claim had no volume when planned and is gone now")
	case err != nil:
		return fmt.Errorf("claim %s: %w", name, err)
	case pvc.Spec.VolumeName == "" && (pvc.Spec.DataSource != nil || pvc.Spec.DataSourceRef != nil):
		// A clone, a snapshot's restore or a populator's claim: filled when its first pod comes,
		// from a source a restore does not make it with.
		w.Skip("volume", name, "the claim has no volume yet, and is to be filled from its data source when first used: a restore makes it without the source, empty; copy what the source holds another way")
	case rules.NeverBound(string(pvc.Status.Phase), pvc.Spec.VolumeName):
		w.NoData("volume", name, "the claim has no volume yet (pending): nothing to copy; a restore makes it again, pending")
	default:
		w.Skip("volume", name, "the claim had no volume when planned and has one now: its files were not read (plan again)")
	}
	return nil
}

// moverPod mounts the claim read-only; a ReadWriteOnce claim in use is pinned to its node. It runs
// as root with only DAC_OVERRIDE, to read every file (allowed by the baseline pod security level),
// or, where the namespace enforces the restricted level, as a non-root user that reads what the
// claim's files let others read. ferry.yaml's mover section adds requests and limits (fitted to
// the namespace's LimitRanges when the pod is created), node selector, tolerations, priority
// class and pull secrets.
func (c Contents) moverPod(v plans.Volume, restricted bool) *corev1.Pod {
	m := c.mover()
	node := ""
	if slices.Contains(v.AccessModes, "ReadWriteOnce") || slices.Contains(v.AccessModes, "ReadWriteOncePod") {
		for _, p := range v.Pods {
			if p.Node != "" {
				node = p.Node
				break
			}
		}
	}
	var selector map[string]string
	if node == "" {
		selector = m.NodeSelector // a pinned pod goes where its claim is
	}
	// A mover needs no service mesh (its data moves through exec, or straight to storage): a
	// proxy injected into it would wait on the mesh's control plane, take a share of the
	// namespace's quota, and want NET_ADMIN where no CNI sets its redirect up. Istio's injector
	// passes a pod of this label by, Linkerd's one of this annotation; ferry.yaml may say
	// otherwise.
	labels := map[string]string{"sidecar.istio.io/inject": "false"}
	maps.Copy(labels, m.Labels)
	labels[MoverLabel] = rules.MoverName
	annotations := map[string]string{"linkerd.io/inject": "disabled"}
	maps.Copy(annotations, m.Annotations)
	annotations["ferry.dev/claim"] = v.Name
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "ferry-mover-", Namespace: v.Namespace,
			Labels: labels, Annotations: annotations,
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			NodeName:                      node,
			NodeSelector:                  selector,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Tolerations:                   m.PodTolerations(),
			PriorityClassName:             m.PriorityClassName,
			ImagePullSecrets:              m.PullSecrets(),
			SecurityContext:               podSecurity(restricted),
			Containers: []corev1.Container{{
				Name: "mover", Image: c.Image, Command: []string{"ferry", "mover", "idle"}, WorkingDir: MountPath,
				VolumeMounts:    []corev1.VolumeMount{{Name: "data", MountPath: MountPath, ReadOnly: true}},
				SecurityContext: moverSecurity(restricted),
				Resources:       m.PodResources(nil),
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.Name, ReadOnly: true},
			}}},
		},
	}
}

func moverSecurity(restricted bool) *corev1.SecurityContext {
	sc := &corev1.SecurityContext{
		ReadOnlyRootFilesystem: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	if restricted {
		sc.RunAsNonRoot, sc.RunAsUser = ptr.To(true), ptr.To[int64](65532)
	} else {
		sc.RunAsUser = ptr.To[int64](0)
		sc.Capabilities.Add = []corev1.Capability{"DAC_OVERRIDE"}
	}
	return sc
}

// podSecurity is the pod-level part of the restricted level where it is enforced: non-root and
// the runtime's default seccomp profile for every container.
func podSecurity(restricted bool) *corev1.PodSecurityContext {
	if !restricted {
		return nil
	}
	return &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
}

func (c Contents) mover() config.Mover {
	if c.Plan == nil {
		return config.Mover{}
	}
	return c.Plan.Config.Mover
}

// fitResources keeps the mover's requests and limits within the namespace's LimitRanges, so the
// pod is admitted where a range's min or max would refuse ferry's defaults.
func (c Contents) fitResources(ctx context.Context, spec *corev1.Pod) error {
	ranges, err := c.Client.CoreV1().LimitRanges(spec.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("limit ranges of %s: %w", spec.Namespace, err)
	}
	if len(ranges.Items) == 0 {
		return nil
	}
	for i := range spec.Spec.Containers {
		spec.Spec.Containers[i].Resources = c.mover().PodResources(ranges.Items)
	}
	return nil
}

// restricted reports whether the namespace enforces the restricted pod security level, which
// mover pods must then meet.
func (c Contents) restricted(ctx context.Context, namespace string) (bool, error) {
	ns, err := c.Client.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("namespace %s: %w", namespace, err)
	}
	return ns.Labels["pod-security.kubernetes.io/enforce"] == "restricted", nil
}

// moverStartWait is how long a mover pod may take to run: a claim may wait for its volume, a
// node for room. pullBackOffWait is how long it may back off pulling its image: a registry's
// brief refusal (a rate limit, a blip) passes within it; a wrong image or missing credentials do
// not, and a mover that cannot have its image fails then, not after moverStartWait.
const (
	moverStartWait  = 3 * time.Minute
	pullBackOffWait = 45 * time.Second
)

// A podVerdict says whether a pod not running yet is worth waiting for.
type podVerdict int

const (
	waitOn        podVerdict = iota // it may yet run
	giveUpNow                       // it never will without someone's help (an invalid image name)
	giveUpIfLasts                   // its image pull fails, again and again: give up after pullBackOffWait
)

// podWaiting says why a pod is not running yet, from its containers' waiting states and its
// scheduling condition, or "", and whether to wait on.
func podWaiting(p *corev1.Pod) (why string, verdict podVerdict) {
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" {
			why = "container " + cs.Name + ": " + w.Reason
			if w.Message != "" {
				why += ": " + w.Message
			}
			switch w.Reason {
			case "InvalidImageName", "ErrImageNeverPull":
				return why, giveUpNow
			case "ErrImagePull", "ImagePullBackOff": // the kubelet goes from one to the other
				return why, giveUpIfLasts
			}
			return why, waitOn
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return "not scheduled: " + cmp.Or(c.Message, c.Reason), waitOn
		}
	}
	return "", waitOn
}

// moverAdmissionWait bounds how long a mover pod waits for the server of an admission webhook
// that must admit it: a restore makes webhooks last, beside their servers, which a verification's
// movers may find still starting (an image to pull). A webhook whose server is a writer the
// quiesce stopped lets movers pass (migrate's exemption); one nothing will start fails after it.
const moverAdmissionWait = 3 * time.Minute

// createFitted creates the mover pod spec, fitted to its namespace's LimitRanges, and once more,
// fitted again, when a LimitRange refuses it: a restore makes a namespace's LimitRanges while
// the movers of its claims start, so one may come between the fitting and the create.
func (c Contents) createFitted(ctx context.Context, spec *corev1.Pod) (*corev1.Pod, error) {
	pod, err := c.Client.CoreV1().Pods(spec.Namespace).Create(ctx, spec, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), " usage per ") && !strings.Contains(err.Error(), " limit to request ratio per ") {
		return pod, err
	}
	if ferr := c.fitResources(ctx, spec); ferr != nil {
		return nil, ferr
	}
	return c.Client.CoreV1().Pods(spec.Namespace).Create(ctx, spec, metav1.CreateOptions{})
}

// startMover creates a mover pod and waits until it answers exec; a claim waiting for its first
// consumer binds once the pod is scheduled. stop deletes the pod, also after ctx ended.
func (c Contents) startMover(ctx context.Context, spec *corev1.Pod) (string, func(), error) {
	if err := c.fitResources(ctx, spec); err != nil {
		return "", nil, err
	}
	account := cmp.Or(spec.Spec.ServiceAccountName, "default")
	err := kube.WaitServiceAccount(ctx, spec.Namespace, account, kube.ServiceAccountWait, func(ctx context.Context) error {
		_, err := c.Client.CoreV1().ServiceAccounts(spec.Namespace).Get(ctx, account, metav1.GetOptions{})
		return err
	})
	if err != nil {
		return "", nil, fmt.Errorf("mover pod in %s: %w", spec.Namespace, err)
	}
	pods := c.Client.CoreV1().Pods(spec.Namespace)
	var pod *corev1.Pod
	said := false
	err = kube.RetryWhile(ctx, moverAdmissionWait, func(err error) bool {
		down := kube.WebhookServerDown(err)
		if down && !said {
			c.Log.Info("waiting for an admission webhook's server to admit the mover pod", "namespace", spec.Namespace, "error", err)
			said = true
		}
		return down
	}, func() error {
		return kube.CreateCounted(ctx, func() (err error) {
			pod, err = c.createFitted(ctx, spec)
			return err
		})
	})
	if err != nil {
		if kube.WebhookServerDown(err) {
			return "", nil, fmt.Errorf("create mover pod in %s: the server of an admission webhook that must admit it did not serve within %s: %w", spec.Namespace, moverAdmissionWait, err)
		}
		return "", nil, fmt.Errorf("create mover pod in %s: %w", spec.Namespace, err)
	}
	name := spec.Namespace + "/" + pod.Name
	stop := func() {
		if id := c.movers.remove(spec.Namespace, pod.Name); id != nil && id.refused.Load() {
			c.Log.Warn("mover pod left in place for inspection: it is not the pod ferry started", "pod", name)
			return
		}
		pods.Delete(context.WithoutCancel(ctx), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}
	c.Log.Info("mover pod created", "pod", name, "claim", spec.Annotations["ferry.dev/claim"], "node", pod.Spec.NodeName, "role", spec.Labels[RoleLabel])
	var running *corev1.Pod
	waiting := "" // why the pod is not running yet, as it last said
	var backingOff time.Time
	// A mover pod usually runs within a moment; each 200 ms waited for it cost a small volume's
	// incremental backup a tenth of its time.
	err = kube.PollSoon(ctx, 20*time.Millisecond, 200*time.Millisecond, moverStartWait, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("mover pod %s: %w", name, err)
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return false, fmt.Errorf("mover pod %s ended (%s)", name, p.Status.Phase)
		}
		running = p
		why, verdict := podWaiting(p)
		switch {
		case verdict != giveUpIfLasts:
			backingOff = time.Time{}
		case backingOff.IsZero():
			backingOff = time.Now()
		case time.Since(backingOff) > pullBackOffWait:
			verdict = giveUpNow
		}
		// A back-off's message says only that; the pull's own error, before it, says why.
		if !strings.Contains(why, "ImagePullBackOff") || !strings.Contains(waiting, "ErrImagePull") {
			waiting = why
		}
		if verdict == giveUpNow {
			return false, fmt.Errorf("mover pod %s cannot start: %s", name, waiting)
		}
		return p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		stop()
		switch {
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			return "", nil, fmt.Errorf("mover pod %s not running after %s: %s: %w", name, moverStartWait, cmp.Or(waiting, "it gave no reason"), err)
		case ctx.Err() != nil:
			return "", nil, fmt.Errorf("mover pod %s not running: %w", name, err)
		}
		return "", nil, err
	}
	c.movers.add(recordMover(spec, pod, running))
	// The container may take a moment to answer exec after the pod reports Running.
	var lastErr error
	err = kube.PollSoon(ctx, 20*time.Millisecond, 200*time.Millisecond, time.Minute, func(ctx context.Context) (bool, error) {
		var out bytes.Buffer
		lastErr = c.exec(ctx, kube.ExecRequest{Namespace: spec.Namespace, Pod: pod.Name, Container: "mover",
			Command: []string{"ferry", "mover", "ready"}, Stdout: &out})
		if isRefused(lastErr) {
			return false, lastErr
		}
		return lastErr == nil, nil
	})
	if isRefused(err) {
		stop()
		return "", nil, err
	}
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("mover pod %s does not answer: %w", name, errors.Join(err, lastErr))
	}
	return pod.Name, stop, nil
}

func (c Contents) capture(ctx context.Context, w *snapshot.Writer, v plans.Volume) (snapshot.Volume, error) {
	entry := snapshot.Volume{Namespace: v.Namespace, Name: v.Name, Key: TarFile(v.Namespace, v.Name), Xattrs: true}
	restricted, err := c.restricted(ctx, v.Namespace)
	if err != nil {
		return entry, err
	}
	pod, stopPod, err := c.startMover(ctx, markMover(c.moverPod(v, restricted), w.Name(), c.Storage))
	if err != nil {
		return entry, err
	}
	defer stopPod() // on success, failure and Ctrl-C alike
	ctx, stop := whileMoverLives(ctx, c.Client, v.Namespace, pod)
	defer stop()

	stream := c.stream
	switch {
	case c.Direct != nil:
		stream = c.streamDirect
	case c.repo != nil:
		continueFrom := true
		stream = func(ctx context.Context, w *snapshot.Writer, v plans.Volume, pod string, entry snapshot.Volume) (snapshot.Volume, []SkippedFile, error) {
			out, skipped, err := c.streamTree(ctx, w, v, pod, entry, continueFrom)
			if errors.Is(err, errPreviousTree) && continueFrom {
				// A previous backup that cannot be continued from costs reading every file, never
				// the backup.
				c.Log.Warn("the claim's previous backup cannot be continued from: backing up every file", "claim", v.Namespace+"/"+v.Name, "error", err)
				continueFrom = false
				return c.streamTree(ctx, w, v, pod, entry, false)
			}
			return out, skipped, err
		}
	}
	// An exec stream may break off with the mover still there (a kubelet or API server dropping
	// the connection): stream it again, into the same file (a direct mover's, into an upload of
	// its own). A deleted mover pod ends ctx, and is never retried.
	var streamed snapshot.Volume
	var skipped []SkippedFile
	err = kube.RetryBroken(ctx, func() (err error) {
		streamed, skipped, err = stream(ctx, w, v, pod, entry)
		return err
	}, func(attempt int, err error) {
		c.Log.Warn("the volume's stream ended early; streaming it again", "claim", v.Namespace+"/"+v.Name, "attempt", attempt, "error", err)
	})
	if err == nil {
		entry = streamed
	}
	if err != nil {
		return entry, moverFailed(ctx, c.Client, v.Namespace, pod, err)
	}
	skipFiles(w, entry, skipped)
	return entry, nil
}

// skipFiles records the files Pack left out as skipped items of the backup: the rest of the
// volume is kept, and the backup says it is not whole.
func skipFiles(w *snapshot.Writer, v snapshot.Volume, skipped []SkippedFile) {
	for _, f := range skipped {
		w.Skip(SkippedFileKind, v.Namespace+"/"+v.Name+":"+f.Path, f.Reason)
	}
}

// stream runs `ferry mover pack` in the pod and stores its tar, compressed, at the entry's key,
// and the files it holds as the volume's file list; it returns the entry as stored and the files
// Pack left out.
func (c Contents) stream(ctx context.Context, w *snapshot.Writer, v plans.Volume, pod string, entry snapshot.Volume) (snapshot.Volume, []SkippedFile, error) {
	list, err := w.NewFileList(ctx, v.Namespace, v.Name)
	if err != nil {
		return entry, nil, err
	}
	tarOut, tarIn := io.Pipe() // pack's stdout
	var stderr bytes.Buffer
	go func() {
		err := c.exec(ctx, kube.ExecRequest{Namespace: v.Namespace, Pod: pod, Container: "mover",
			Command: []string{"ferry", "mover", "pack"}, Stdout: tarIn, Stderr: &stderr})
		if err != nil {
			err = fmt.Errorf("ferry mover pack: %w%s", err, moverStderr(stderr.String()))
		}
		tarIn.CloseWithError(err)
	}()
	var stored string
	var putErr error
	files := fileCounter{list: list}
	skipped, err := storeTar(tarOut, func(compressed io.Reader) error {
		stored, putErr = w.Put(ctx, entry.Key, compressed)
		return putErr
	}, files.add)
	if errors.Is(err, errFileList) && putErr != nil {
		err = putErr // storage failing: the archive's error says so, naming its file
	}
	if err != nil {
		list.Abort(err)
		return entry, skipped, err
	}
	fl, err := list.Close()
	if err != nil {
		return entry, skipped, err
	}
	entry.Key, entry.List, entry.Bytes, entry.Root = stored, &fl, files.bytes, files.root
	return entry, skipped, nil
}

// fileCounter writes a volume's entries to its file list, counting its contents: each file once
// whatever its names.
type fileCounter struct {
	list  *snapshot.FileListWriter
	bytes int64
	// root is the volume's root folder, which the list leaves out (snapshot.Volume.Root).
	root *snapshot.File
}

func (c *fileCounter) add(f snapshot.File) error {
	if f.Path == RootPath {
		c.root = &f
		return nil
	}
	c.count(f)
	if err := c.list.Add(f); err != nil {
		return fmt.Errorf("%w: %w", errFileList, err)
	}
	return nil
}

// errFileList marks an error of writing a volume's file list.
var errFileList = errors.New("the volume's file list")

func (c *fileCounter) count(f snapshot.File) {
	if f.Type == "file" && f.Hardlink == "" {
		c.bytes += f.Size
	}
}

// streamDirect has the mover upload the volume itself, through part URLs ferry presigns as it
// asks (see uploadDirect), and report the files it packed, which ferry stores as the file list;
// as stream, it returns the entry as stored and the files Pack left out. Each run is an upload
// of its own: one that fails is aborted.
func (c Contents) streamDirect(ctx context.Context, w *snapshot.Writer, v plans.Volume, pod string, entry snapshot.Volume) (snapshot.Volume, []SkippedFile, error) {
	var stderr bytes.Buffer
	list, err := w.NewFileList(ctx, entry.Namespace, entry.Name)
	if err != nil {
		return entry, nil, err
	}
	files := fileCounter{list: list}
	req := DirectPackRequest{Recipients: w.Recipients(), PartSize: basePartSize(v.Bytes)}
	res, err := uploadDirect(ctx, c.Direct, w.StorageKey(entry.Key), req, func(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
		return c.exec(ctx, kube.ExecRequest{Namespace: entry.Namespace, Pod: pod, Container: "mover",
			Command: []string{"ferry", "mover", "pack", "--direct"}, Stdin: stdin, Stdout: stdout, Stderr: &stderr})
	}, files.add)
	if err != nil {
		err = fmt.Errorf("ferry mover pack --direct: %w%s", err, moverStderr(stderr.String()))
		list.Abort(err)
		return entry, nil, err
	}
	fl, err := list.Close()
	if err != nil {
		return entry, nil, err
	}
	// The stream's SHA-256 is the mover's (ferry checked its size); every read checks it.
	entry.Key, entry.List, entry.Bytes, entry.Root = w.StoredName(entry.Key), &fl, files.bytes, files.root
	w.Record(snapshot.Stream{Key: entry.Key, Bytes: res.Bytes, SHA256: res.SHA256})
	return entry, res.Skipped, nil
}
