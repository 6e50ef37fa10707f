package volumes

import (
	"testing"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	corev1 "k8s.io/api/core/v1"
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
