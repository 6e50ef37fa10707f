package volumes

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestCleanupMoversDeletesOnlyPodsOfEndedRuns(t *testing.T) {
	ctx := context.Background()
	store, err := storage.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other, err := storage.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	create := func(name string) *snapshot.Writer {
		w, err := snapshot.Create(ctx, store, name, plans.Cluster{}, &plans.Plan{}, now, nil)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	done := create("done")
	if _, err := done.Commit(ctx, now); err != nil {
		t.Fatal(err)
	}
	create("killed") // claimed, no heartbeat: its ferry died
	create("live")
	beat, err := snapshot.StartHeartbeat(ctx, store, "live", time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer beat.Stop(ctx)

	c := Contents{Image: "ferry"}
	pod := func(name, backup string, st storage.Backend, age time.Duration, readOnly bool) *corev1.Pod {
		p := c.moverPod(plans.Volume{Namespace: "team", Name: "data"}, false)
		p.Name, p.GenerateName = name, ""
		if backup != "" {
			markMover(p, backup, st)
		}
		p.CreationTimestamp = metav1.NewTime(now.Add(-age))
		p.Spec.Volumes[0].PersistentVolumeClaim.ReadOnly = readOnly
		return p
	}
	oldVerifier := pod("old-verifier", "", nil, 2*time.Hour, true)
	oldVerifier.Labels[RoleLabel] = "verify"
	client := fake.NewClientset(
		pod("of-complete", "done", store, time.Minute, true),
		pod("of-killed", "killed", store, time.Minute, true),
		pod("of-deleted", "deleted", store, time.Minute, true),
		pod("of-live", "live", store, time.Minute, true),
		pod("other-storage", "killed", other, time.Minute, true),
		pod("old-unlabelled", "", nil, 2*time.Hour, true),
		pod("young-unlabelled", "", nil, time.Minute, true),
		pod("old-writer", "", nil, 2*time.Hour, false),
		oldVerifier,
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team"}},
	)
	deleted, err := CleanupMovers(ctx, client, store, []string{"team"}, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(deleted)
	want := []string{"team/of-complete", "team/of-deleted", "team/of-killed", "team/old-unlabelled"}
	if !slices.Equal(deleted, want) {
		t.Fatalf("deleted %v, want %v", deleted, want)
	}
	left, _ := client.CoreV1().Pods("team").List(ctx, metav1.ListOptions{})
	if len(left.Items) != 6 {
		t.Fatalf("%d pods left, want 6", len(left.Items))
	}

	// Hours later the live run's heartbeat is stale, and the unlabelled pod old: both go.
	deleted, err = CleanupMovers(ctx, client, store, nil, now.Add(snapshot.StaleBeats*time.Hour+time.Minute), nil)
	slices.Sort(deleted)
	if err != nil || !slices.Equal(deleted, []string{"team/of-live", "team/young-unlabelled"}) {
		t.Fatalf("with a stale heartbeat, deleted %v (%v)", deleted, err)
	}
}

func TestWhileMoverLivesEndsWhenThePodIsDeleted(t *testing.T) {
	ctx := context.Background()
	mover := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ferry-mover-x", Namespace: "team"}}
	client := fake.NewClientset(mover)
	watching := make(chan struct{}, 1)
	client.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		watching <- struct{}{}
		return false, nil, nil
	})
	live, stop := whileMoverLives(ctx, client, "team", "ferry-mover-x")
	defer stop()
	<-watching
	if live.Err() != nil {
		t.Fatal("ended while the pod lives")
	}
	if err := client.CoreV1().Pods("team").Delete(ctx, "ferry-mover-x", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-live.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("still going after the pod was deleted")
	}
	err := moverFailed(live, client, "team", "ferry-mover-x", live.Err())
	if want := "mover pod team/ferry-mover-x was deleted while it read the claim: context canceled"; err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}

	// A pod gone before the watch begins ends it too; stop ends it without a cause of its own.
	gone, stopGone := whileMoverLives(ctx, client, "team", "ferry-mover-x")
	defer stopGone()
	<-gone.Done()
	var deleted errMoverDeleted
	if !errors.As(context.Cause(gone), &deleted) {
		t.Fatalf("cause %v", context.Cause(gone))
	}
	client.CoreV1().Pods("team").Create(ctx, mover, metav1.CreateOptions{})
	other, stopOther := whileMoverLives(ctx, client, "team", "ferry-mover-x")
	stopOther()
	<-other.Done()
	if errors.As(context.Cause(other), &deleted) {
		t.Fatalf("stopped, yet the cause is %v", context.Cause(other))
	}
	if err := moverFailed(ctx, client, "team", "ferry-mover-x", errors.New("stream reset")); err.Error() != "stream reset" {
		t.Fatalf("with the pod alive the error is %v", err)
	}
}

// A namespace just restored has no default service account until the controller manager makes
// it, and the API server refuses pods that run as it until then: the mover waits for it, not fails.
func TestMoverWaitsForTheNamespacesServiceAccount(t *testing.T) {
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}})
	refused := 0
	client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if _, err := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("serviceaccounts"), "team", "default"); err != nil {
			refused++
			return true, nil, apierrors.NewForbidden(corev1.Resource("pods"), "", errors.New("error looking up service account team/default: serviceaccount \"default\" not found"))
		}
		return false, nil, nil
	})
	go func() {
		time.Sleep(500 * time.Millisecond) // the controller manager, a moment later
		client.Tracker().Add(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "team"}})
	}()
	c := Contents{Image: "ferry", Client: client, Log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _, err := c.startMover(ctx, c.moverPod(plans.Volume{Namespace: "team", Name: "data"}, false))
	if refused > 0 || err == nil || !strings.Contains(err.Error(), "not running") {
		t.Fatalf("pod creations refused: %d; startMover: %v; want none refused, and the wait for the (fake, never running) pod to end", refused, err)
	}
}

// A restore makes admission webhooks last, beside their servers: a verification's mover may find
// a webhook that must admit it whose server is still starting. It waits for the server, not fails.
func TestMoverWaitsForAWebhooksServer(t *testing.T) {
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "team"}})
	refused := 0
	client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if refused < 3 {
			refused++
			return true, nil, apierrors.NewInternalError(errors.New(`failed calling webhook "defaults.kubeflow.org": failed to call webhook: Post "https://admission-webhook-service.kubeflow.svc:443/apply-poddefault": no endpoints available for service "admission-webhook-service"`))
		}
		return false, nil, nil
	})
	c := Contents{Image: "ferry", Client: client, Log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, _, err := c.startMover(ctx, c.moverPod(plans.Volume{Namespace: "team", Name: "data"}, false))
	if refused != 3 || err == nil || !strings.Contains(err.Error(), "not running") {
		t.Fatalf("pod creations refused: %d; startMover: %v; want 3 refused, then the wait for the (fake, never running) pod to end", refused, err)
	}

	// A webhook that denies the pod is a refusal for good.
	denied := fake.NewClientset(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "team"}})
	calls := 0
	denied.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		calls++
		return true, nil, apierrors.NewForbidden(corev1.Resource("pods"), "", errors.New(`admission webhook "policy.example.com" denied the request: no`))
	})
	c.Client = denied
	if _, _, err := c.startMover(ctx, c.moverPod(plans.Volume{Namespace: "team", Name: "data"}, false)); calls != 1 || err == nil || !strings.Contains(err.Error(), "denied the request") {
		t.Fatalf("a webhook that denies: %d creations, %v; want one, and its denial", calls, err)
	}
}

func TestPodWaiting(t *testing.T) {
	waitingIn := func(reason, message string) corev1.PodStatus {
		return corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "mover",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}}}}
	}
	for _, tc := range []struct {
		name    string
		status  corev1.PodStatus
		want    string
		verdict podVerdict
	}{
		{"just created", corev1.PodStatus{Phase: corev1.PodPending}, "", waitOn},
		{"creating", waitingIn("ContainerCreating", ""), "", waitOn},
		{"unschedulable", corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: "Unschedulable", Message: "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims."}}},
			"not scheduled: 0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims.", waitOn},
		{"pulling failed once", waitingIn("ErrImagePull", "rpc error: not found"), "container mover: ErrImagePull: rpc error: not found", giveUpIfLasts},
		{"pull backing off", waitingIn("ImagePullBackOff", `Back-off pulling image "registry.invalid/ferry:v1"`), `container mover: ImagePullBackOff: Back-off pulling image "registry.invalid/ferry:v1"`, giveUpIfLasts},
		{"invalid image", waitingIn("InvalidImageName", ""), "container mover: InvalidImageName", giveUpNow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why, verdict := podWaiting(&corev1.Pod{Status: tc.status})
			if why != tc.want || verdict != tc.verdict {
				t.Errorf("podWaiting = %q, %v; want %q, %v", why, verdict, tc.want, tc.verdict)
			}
		})
	}
}

// A mover whose image name is invalid fails at once, saying so, not after moverStartWait.
func TestMoverWhoseImageIsInvalidFailsAtOnce(t *testing.T) {
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "team"}})
	client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		pod := action.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		pod.Name = "ferry-mover-x"
		pod.Status = corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "mover",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "InvalidImageName", Message: `failed to apply default image tag "ferry:"`}}}}}
		return false, nil, nil
	})
	c := Contents{Image: "ferry", Client: client, Log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, _, err := c.startMover(ctx, c.moverPod(plans.Volume{Namespace: "team", Name: "data"}, false))
	if err == nil || !strings.Contains(err.Error(), `cannot start: container mover: InvalidImageName: failed to apply default image tag "ferry:"`) || time.Since(start) > 2*time.Second {
		t.Fatalf("startMover after %s: %v; want at once an error naming the image", time.Since(start), err)
	}
	if pods, _ := client.CoreV1().Pods("team").List(context.Background(), metav1.ListOptions{}); len(pods.Items) > 0 {
		t.Errorf("the mover pod is left: %v", pods.Items[0].Name)
	}
}

func TestHeldByOnePod(t *testing.T) {
	used := []plans.PodUse{{Name: "writer", Node: "node-a"}}
	for _, tc := range []struct {
		name string
		v    plans.Volume
		want string
	}{
		{"ReadWriteOnce in use: the mover joins it on its node", plans.Volume{AccessModes: []string{"ReadWriteOnce"}, Pods: used}, ""},
		{"ReadWriteOncePod unused", plans.Volume{AccessModes: []string{"ReadWriteOncePod"}}, ""},
		{"ReadWriteOncePod in use", plans.Volume{AccessModes: []string{"ReadWriteOncePod"}, Pods: used}, "a ReadWriteOncePod claim in use by pod writer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := heldByOnePod(tc.v); !strings.HasPrefix(got, tc.want) || (got == "") != (tc.want == "") {
				t.Errorf("heldByOnePod = %q, want %q…", got, tc.want)
			}
		})
	}
	c := Contents{Image: "ferry", Client: fake.NewClientset()}
	if _, err := c.targetMover(context.Background(), plans.Volume{Namespace: "team", Name: "solo", AccessModes: []string{"ReadWriteOncePod"}, Pods: used}, roleRestore); err == nil ||
		!strings.Contains(err.Error(), "in use by pod writer") {
		t.Errorf("a restore mover for a ReadWriteOncePod claim in use: %v, want refused", err)
	}
}
