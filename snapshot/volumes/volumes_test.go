package volumes

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// untilRunning returns the mover once the watch sees it run, and fails on a mover that ended;
// another pod's changes are not taken for the mover's.
func TestUntilRunning(t *testing.T) {
	for _, tc := range []struct {
		name  string
		phase corev1.PodPhase
		want  string // an error's words; "" for the running pod
	}{
		{"runs", corev1.PodRunning, ""},
		{"fails", corev1.PodFailed, "mover pod team/mover ended (Failed)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			client := fake.NewClientset()
			pods := client.CoreV1().Pods("team")
			for _, name := range []string{"mover", "other"} {
				if _, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team"},
					Status: corev1.PodStatus{Phase: corev1.PodPending}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			type result struct {
				pod *corev1.Pod
				err error
			}
			done := make(chan result, 1)
			go func() {
				p, err := untilRunning(ctx, pods, "mover", time.Minute)
				done <- result{p, err}
			}()
			set := func(name string, phase corev1.PodPhase) {
				p, err := pods.Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				p.Status.Phase = phase
				if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			// The other pod's change comes first, while the mover still waits.
			time.Sleep(50 * time.Millisecond)
			set("other", tc.phase)
			select {
			case r := <-done:
				t.Fatalf("untilRunning returned on another pod's change: %v, %v", r.pod, r.err)
			case <-time.After(300 * time.Millisecond):
			}
			set("mover", tc.phase)
			r := <-done
			switch {
			case tc.want == "" && (r.err != nil || r.pod.Name != "mover" || r.pod.Status.Phase != corev1.PodRunning):
				t.Fatalf("got %v, %v; want the running mover", r.pod, r.err)
			case tc.want != "" && (r.err == nil || !strings.Contains(r.err.Error(), tc.want)):
				t.Fatalf("got error %v, want %q", r.err, tc.want)
			}
		})
	}
}
