package volumes

import (
	"context"
	"log/slog"
	"testing"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// TestMoverPodShape: requests and limits always (a quota counting cpu or memory refuses pods
// without them), ferry.yaml's mover section applied, and the restricted level met where enforced.
func TestMoverPodShape(t *testing.T) {
	cfg, err := config.ParseConfig("ferry.yaml", []byte(`
mover:
  resources: {limits: {memory: 1Gi}}
  nodeSelector: {pool: data}
  tolerations: [{key: dedicated, operator: Exists}]
  priorityClassName: backup-low
  imagePullSecrets: [{name: regcred}]
  labels: {team: data, sidecar.istio.io/inject: "true", app.kubernetes.io/name: other}
  annotations: {owner: data-team}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		c          Contents
		v          plans.Volume
		restricted bool
		selector   bool
	}{
		{name: "defaults", c: Contents{Image: "ferry"}, v: plans.Volume{Namespace: "a", Name: "data"}},
		{name: "configured", c: Contents{Image: "ferry", Plan: &plans.Plan{Config: cfg.Planning}}, v: plans.Volume{Namespace: "a", Name: "data"}, selector: true},
		{name: "pinned to its node", c: Contents{Image: "ferry", Plan: &plans.Plan{Config: cfg.Planning}}, restricted: true,
			v: plans.Volume{Namespace: "a", Name: "data", AccessModes: []string{"ReadWriteOnce"}, Pods: []plans.PodUse{{Name: "app", Node: "n1"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := tc.c.moverPod(tc.v, tc.restricted)
			spec, res := pod.Spec, pod.Spec.Containers[0].Resources
			if res.Requests.Cpu().IsZero() || res.Requests.Memory().IsZero() || res.Limits.Cpu().IsZero() || res.Limits.Memory().IsZero() {
				t.Fatalf("resources %v: want cpu and memory requests and limits", res)
			}
			configured := tc.c.Plan != nil
			if configured != (res.Limits.Memory().String() == "1Gi") || configured != (spec.PriorityClassName == "backup-low") ||
				configured != (len(spec.ImagePullSecrets) == 1) || configured != (spec.Tolerations[0].Key == "dedicated") {
				t.Errorf("spec %+v does not follow the mover section (configured %v)", spec, configured)
			}
			// Out of the mesh unless ferry.yaml says otherwise; ferry's own label and annotation stay.
			labels, annotations := pod.Labels, pod.Annotations
			if labels[MoverLabel] != "ferry-mover" || annotations["ferry.dev/claim"] != "data" || annotations["linkerd.io/inject"] != "disabled" ||
				configured != (labels["team"] == "data" && annotations["owner"] == "data-team") ||
				labels["sidecar.istio.io/inject"] != map[bool]string{false: "false", true: "true"}[configured] {
				t.Errorf("labels %v, annotations %v (configured %v)", labels, annotations, configured)
			}
			if tc.selector != (spec.NodeSelector["pool"] == "data") {
				t.Errorf("node selector %v (pinned to %q)", spec.NodeSelector, spec.NodeName)
			}
			sc := spec.Containers[0].SecurityContext
			if tc.restricted && (spec.SecurityContext == nil || !*spec.SecurityContext.RunAsNonRoot || !*sc.RunAsNonRoot ||
				*sc.AllowPrivilegeEscalation || len(sc.Capabilities.Add) > 0 || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault) {
				t.Errorf("security %+v / %+v does not meet the restricted level", spec.SecurityContext, sc)
			}
		})
	}
}

// TestPlaceAsWorkload: a restore mover of a claim not yet bound, of a WaitForFirstConsumer class,
// runs where the claim's pods ran on the source (their selector, required affinity and
// tolerations, beside the mover section's), unless no schedulable node of the target is like
// theirs.
func TestPlaceAsWorkload(t *testing.T) {
	zoneB := &plans.NodePlacement{NodeSelector: map[string]string{"zone": "b"},
		Tolerations: []corev1.Toleration{{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}}
	gpuPool := &plans.NodePlacement{NodeAffinity: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"gpu"}}}}}}}
	objects := []runtime.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n-a", Labels: map[string]string{"zone": "a", "pool": "cpu", "kubernetes.io/os": "linux"}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n-b", Labels: map[string]string{"zone": "b", "pool": "gpu", "kubernetes.io/os": "linux"}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n-d", Labels: map[string]string{"zone": "d", "kubernetes.io/os": "linux"}}, Spec: corev1.NodeSpec{Unschedulable: true}},
		&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "zonal"}, VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)},
		&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "instant"}, VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)},
	}
	for _, tc := range []struct {
		name      string
		placement *plans.NodePlacement
		class     string
		placed    bool
	}{
		{"no placement recorded", nil, "zonal", false},
		{"a zone and a taint", zoneB, "zonal", true},
		{"a required affinity", gpuPool, "zonal", true},
		{"a zone the target lacks", &plans.NodePlacement{NodeSelector: map[string]string{"zone": "c"}}, "zonal", false},
		{"a zone of a cordoned node only", &plans.NodePlacement{NodeSelector: map[string]string{"zone": "d"}}, "zonal", false},
		{"a class that binds at once", zoneB, "instant", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := &plans.Plan{Volumes: []plans.Volume{{Namespace: "a", Name: "data", Pods: []plans.PodUse{{Name: "app", Placement: tc.placement}}}}}
			plan.Config.Mover.NodeSelector = map[string]string{"kubernetes.io/os": "linux"}
			c := Contents{Image: "ferry", Plan: plan, Client: fake.NewClientset(objects...), Log: slog.New(slog.DiscardHandler)}
			spec := c.moverPod(plans.Volume{Namespace: "b", Name: "data"}, false)
			c.placeAsWorkload(context.Background(), spec, snapshot.Volume{Namespace: "a", Name: "data"}, tc.class)
			s := spec.Spec
			placed := s.NodeSelector["zone"] != "" || s.Affinity != nil
			if placed != tc.placed || s.NodeSelector["kubernetes.io/os"] != "linux" {
				t.Errorf("selector %v, affinity %+v; placed %v, want %v", s.NodeSelector, s.Affinity, placed, tc.placed)
			}
			if tc.placement == zoneB && tc.placed && (len(s.Tolerations) == 0 || s.Tolerations[len(s.Tolerations)-1].Key != "dedicated") {
				t.Errorf("tolerations %+v lack the workload's", s.Tolerations)
			}
		})
	}
}
