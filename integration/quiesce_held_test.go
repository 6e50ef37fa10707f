package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrykube/ferry/migrate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestMigrateStopsWhenWritersStartAgain: a GitOps tool's self-heal puts a Deployment's replicas
// back as soon as the quiesce scales it to zero (Argo CD's selfHeal, Flux's drift correction do;
// so do autoscalers and operators). Its pods then write while the backup reads, and a backup
// that lacks what they wrote must never reach green. ferry migrate stops (exit 3) naming the
// writer, at once rather than after waiting for its pods, keeps no backup, and makes nothing on
// green. Once the self-heal is paused, the
// resumed run stops the writer again, backs up anew and shifts; the writer stays stopped on blue.
func TestMigrateStopsWhenWritersStartAgain(t *testing.T) {
	_, greenKC := cutover(t)
	_, blueKC := clients(t, "blue")
	ctx := context.Background()
	const ns = "quiesce-held"
	cleanup := func() { removeNamespace(t, ns, blueKC, greenKC) }
	cleanup()
	t.Cleanup(cleanup)
	createNamespace(t, blueKC, ns, nil)
	createDeployment(t, blueKC, ns, "api", corev1.PodSpec{Containers: []corev1.Container{{Name: "api", Image: "api"}}})
	if _, err := blueKC.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"mode": "live"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(config, []byte(`include: {namespaces: [`+ns+`]}
quiesce:
- {resource: deployments.apps, namespace: `+ns+`, names: [api], action: scale-to-zero, why: writes the shop's orders}
`), 0o644); err != nil {
		t.Fatal(err)
	}

	// The self-heal: whenever the quiesce has scaled api to zero, it puts one replica back.
	healCtx, stopHealing := context.WithCancel(ctx)
	defer stopHealing()
	var healed atomic.Int32
	go func() {
		for healCtx.Err() == nil {
			d, err := blueKC.AppsV1().Deployments(ns).Get(healCtx, "api", metav1.GetOptions{})
			if err == nil && d.Annotations[migrate.QuiescedAnnotation] != "" && d.Spec.Replicas != nil && *d.Spec.Replicas == 0 {
				if _, err := blueKC.AppsV1().Deployments(ns).Patch(healCtx, "api", types.MergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{}); err == nil {
					healed.Add(1)
				}
			}
			select {
			case <-healCtx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()

	store := "file://" + filepath.Join(t.TempDir(), "store")
	code, out, errOut := runFerry(t, "--storage", store, "migrate", "--from", "blue", "--to", "cutover", "-f", config, "--lease-ttl", testLeaseTTL.String())
	// Stopped as ferry waited for its pods to end, or while the backup read (its backup deleted).
	if code != 3 || !strings.Contains(errOut, "deployments.apps "+ns+"/api: started again (spec.replicas is 1, the quiesce set 0)") {
		t.Fatalf("ferry migrate exited %d, want 3 naming deployments.apps %s/api as started again (self-healed %d times)\nstdout: %s\nstderr: %s",
			code, ns, healed.Load(), out, errOut)
	}
	id := runID(t, errOut)
	t.Cleanup(func() { runFerry(t, "--storage", store, "rollback", "--run", id, "--discard-green-writes") })
	if _, list, _ := runFerry(t, "--storage", store, "backups", "list"); strings.Contains(list, id) {
		t.Errorf("the backup made while the writer ran is still listed:\n%s", list)
	}
	if _, err := greenKC.CoreV1().ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the stopped run restored onto green (get settings: %v)", err)
	}

	// The self-heal paused (as an operator pauses its sync), the run goes on.
	stopHealing()
	time.Sleep(testLeaseTTL + 100*time.Millisecond) // the stopped run's lease expires
	code, out, errOut = runFerry(t, "--storage", store, "migrate", "--resume", id, "--lease-ttl", testLeaseTTL.String())
	if code != 0 || !strings.Contains(out, "shifted") {
		t.Fatalf("the resumed run exited %d, want 0 and shifted\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if !strings.Contains(errOut, "a writer was started again since the quiesce; stopped it again") {
		t.Errorf("the resumed run did not say it stopped api again\nstderr: %s", errOut)
	}
	if d, err := blueKC.AppsV1().Deployments(ns).Get(ctx, "api", metav1.GetOptions{}); err != nil || d.Spec.Replicas == nil || *d.Spec.Replicas != 0 {
		t.Errorf("blue's api after the run: %v, %v; want it stopped", d.Spec.Replicas, err)
	}
	if cm, err := greenKC.CoreV1().ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{}); err != nil || cm.Data["mode"] != "live" {
		t.Errorf("green's settings after the run: %v, %v", cm.Data, err)
	}
}
