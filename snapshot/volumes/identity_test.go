package volumes

import (
	"context"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/storage"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestMoverIdentity: each kind of change to a mover pod after ferry saw it running is refused,
// naming the pod and the change; an unchanged pod, one the runtime reports no image ID for, and
// one that only gained labels of others or a sidecar at admission are accepted.
func TestMoverIdentity(t *testing.T) {
	store, err := storage.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := Contents{Image: "ferry:dev"}
	spec := markMover(c.moverPod(plans.Volume{Namespace: "team", Name: "data"}, false), "nightly", store)
	spec.Labels[RoleLabel] = roleRestore
	// What the API server made of it: a name, a UID, and a sidecar an admission webhook injected.
	created := spec.DeepCopy()
	created.Name, created.UID = "ferry-mover-x1", "uid-1"
	created.Spec.Containers = append(created.Spec.Containers, corev1.Container{Name: "proxy", Image: "proxy:1"})
	running := func(imageID string) *corev1.Pod {
		p := created.DeepCopy()
		p.Status.Phase = corev1.PodRunning
		for _, ctr := range p.Spec.Containers {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: ctr.Name, Image: ctr.Image, ImageID: imageID})
		}
		return p
	}

	for _, tc := range []struct {
		name    string
		imageID string // what the runtime reported when ferry first saw the pod running
		change  func(p *corev1.Pod)
		refused string // "" when accepted
	}{
		{name: "unchanged", imageID: "sha256:aaa", change: func(*corev1.Pod) {}},
		{name: "no image ID reported", change: func(*corev1.Pod) {}},
		{name: "image ID reported only now", change: func(p *corev1.Pod) { p.Status.ContainerStatuses[0].ImageID = "sha256:bbb" }},
		{name: "image ID no longer reported", imageID: "sha256:aaa", change: func(p *corev1.Pod) { p.Status.ContainerStatuses[0].ImageID = "" }},
		{name: "labels of others added", change: func(p *corev1.Pod) { p.Labels["team"] = "a" }},
		{name: "image changed", imageID: "sha256:aaa", change: func(p *corev1.Pod) { p.Spec.Containers[0].Image = "evil:1" },
			refused: `container mover image is now "evil:1", ferry started it with "ferry:dev"`},
		{name: "sidecar's image changed", change: func(p *corev1.Pod) { p.Spec.Containers[1].Image = "evil:1" },
			refused: `container proxy image is now "evil:1", ferry started it with "proxy:1"`},
		{name: "image ID changed", imageID: "sha256:aaa", change: func(p *corev1.Pod) { p.Status.ContainerStatuses[0].ImageID = "sha256:bbb" },
			refused: `container mover runs image ID "sha256:bbb", ferry saw "sha256:aaa"`},
		{name: "restarted", change: func(p *corev1.Pod) { p.Status.ContainerStatuses[0].RestartCount = 1 },
			refused: "container mover restarted (restart count 1, ferry saw 0"},
		{name: "status gone", change: func(p *corev1.Pod) { p.Status.ContainerStatuses = p.Status.ContainerStatuses[1:] },
			refused: "container mover no longer reports its status"},
		{name: "deleted and made again", change: func(p *corev1.Pod) { p.UID = "uid-2" },
			refused: "it was deleted and made again (UID uid-2, ferry's was uid-1)"},
		{name: "role label removed", change: func(p *corev1.Pod) { delete(p.Labels, RoleLabel) },
			refused: "label " + RoleLabel + " was removed"},
		{name: "mover label changed", change: func(p *corev1.Pod) { p.Labels[MoverLabel] = "other" },
			refused: "label " + MoverLabel + ` is now "other", ferry set "ferry-mover"`},
		{name: "backup label changed", change: func(p *corev1.Pod) { p.Labels[BackupLabel] = "other" },
			refused: "label " + BackupLabel + ` is now "other", ferry set "nightly"`},
		{name: "claim annotation removed", change: func(p *corev1.Pod) { delete(p.Annotations, "ferry.dev/claim") },
			refused: "annotation ferry.dev/claim was removed"},
		{name: "storage annotation changed", change: func(p *corev1.Pod) { p.Annotations[StorageAnnotation] = "s3://elsewhere" },
			refused: "annotation " + StorageAnnotation + " was changed"},
		{name: "container added", change: func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "spy", Image: "spy:1"})
		}, refused: "container spy was added"},
		{name: "container removed", change: func(p *corev1.Pod) { p.Spec.Containers = p.Spec.Containers[:1] },
			refused: "container proxy was removed"},
		{name: "init container added", change: func(p *corev1.Pod) {
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "first", Image: "first:1"})
		}, refused: "init container first was added"},
		{name: "ephemeral container added", change: func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
				EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "busybox"}})
		}, refused: "ephemeral container debugger was added"},
		{name: "command changed", change: func(p *corev1.Pod) { p.Spec.Containers[0].Command = []string{"sh", "-c", "cat"} },
			refused: "container mover runs another command"},
		{name: "args changed", change: func(p *corev1.Pod) { p.Spec.Containers[0].Args = []string{"--evil"} },
			refused: "container mover runs another command"},
		{name: "several changes", change: func(p *corev1.Pod) {
			p.Spec.Containers[0].Image = "evil:1"
			p.Status.ContainerStatuses[0].RestartCount = 1
		}, refused: `container mover image is now "evil:1", ferry started it with "ferry:dev"; container mover restarted`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := running(tc.imageID)
			id := recordMover(spec, created, now)
			now = now.DeepCopy()
			tc.change(now)
			err := id.check(context.Background(), fake.NewClientset(now))
			if tc.refused == "" {
				if err != nil || id.refused.Load() {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !isRefused(err) || !id.refused.Load() {
				t.Fatalf("accepted (%v), want refused with %q", err, tc.refused)
			}
			want := "mover pod team/ferry-mover-x1: " + tc.refused
			if msg := err.Error(); !strings.HasPrefix(msg, want) || !strings.HasSuffix(msg, "; refusing to exec into it (the pod is left in place for inspection)") {
				t.Fatalf("error %q, want it to start with %q and refuse", msg, want)
			}
			if strings.Contains(err.Error(), store.String()) {
				t.Fatalf("error %q names the annotation's value", err)
			}
		})
	}
}

// TestMoverExecRefusesUnknownPods: ferry execs only into mover pods it started and still knows,
// and a pod it could not read is not one it deletes or leaves, only one it does not exec into.
func TestMoverExecRefusesUnknownPods(t *testing.T) {
	ctx := context.Background()
	c := Contents{Image: "ferry:dev", Client: fake.NewClientset()}
	req := kube.ExecRequest{Namespace: "team", Pod: "ferry-mover-x1", Container: "mover", Command: []string{"ferry", "mover", "ready"}}
	if err := c.exec(ctx, req); err == nil || !strings.Contains(err.Error(), "mover pod team/ferry-mover-x1: not a pod this run started") {
		t.Fatalf("exec without a recorded identity: %v", err)
	}
	c = c.withDefaults()
	spec := c.moverPod(plans.Volume{Namespace: "team", Name: "data"}, false)
	created := spec.DeepCopy()
	created.Name, created.UID = "ferry-mover-x1", "uid-1"
	id := recordMover(spec, created, created)
	c.movers.add(id)
	err := c.exec(ctx, req) // the pod is gone: the check cannot read it
	if err == nil || isRefused(err) || id.refused.Load() || !strings.Contains(err.Error(), "mover pod team/ferry-mover-x1: read it before exec") {
		t.Fatalf("exec into a pod that is gone: %v", err)
	}
	if c.movers.remove("team", "ferry-mover-x1") != id || c.movers.get("team", "ferry-mover-x1") != nil {
		t.Fatal("the stopped pod is still known")
	}
}

// TestMoverIdentityOfAnAdmittedImage: an image admission pinned to its digest when the pod was
// created is the mover's image; changing it afterwards is still refused.
func TestMoverIdentityOfAnAdmittedImage(t *testing.T) {
	c := Contents{Image: "ferry:dev"}
	spec := c.moverPod(plans.Volume{Namespace: "team", Name: "data"}, false)
	created := spec.DeepCopy()
	created.Name, created.UID = "ferry-mover-x1", "uid-1"
	created.Spec.Containers[0].Image = "ferry:dev@sha256:ccc"
	id := recordMover(spec, created, created)
	if err := id.check(context.Background(), fake.NewClientset(created.DeepCopy())); err != nil {
		t.Fatalf("the admitted pod is refused: %v", err)
	}
	changed := created.DeepCopy()
	changed.Spec.Containers[0].Image = "ferry:dev"
	if err := id.check(context.Background(), fake.NewClientset(changed)); err == nil || !isRefused(err) {
		t.Fatalf("an image changed after admission is accepted: %v", err)
	}
}
