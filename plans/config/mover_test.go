package config

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestMoverPodResourcesFitLimitRanges(t *testing.T) {
	list := func(kv ...string) corev1.ResourceList {
		out := corev1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		mover  Mover
		ranges []corev1.LimitRangeItem
		want   string // requests cpu, memory / limits cpu, memory
	}{
		{"defaults", Mover{}, nil, "100m 128Mi / 1 512Mi"},
		{"configured", Mover{Resources: MoverResources{Requests: map[string]string{"cpu": "250m"}, Limits: map[string]string{"memory": "1Gi"}}}, nil, "250m 128Mi / 1 1Gi"},
		{"request above the default limit raises it", Mover{Resources: MoverResources{Requests: map[string]string{"memory": "2Gi"}}}, nil, "100m 2Gi / 1 2Gi"},
		{"limit below the default request lowers it", Mover{Resources: MoverResources{Limits: map[string]string{"cpu": "50m"}}}, nil, "50m 128Mi / 50m 512Mi"},
		{"container max", Mover{}, []corev1.LimitRangeItem{{Type: corev1.LimitTypeContainer, Max: list("cpu", "500m", "memory", "256Mi")}}, "100m 128Mi / 500m 256Mi"},
		{"pod min and max", Mover{}, []corev1.LimitRangeItem{{Type: corev1.LimitTypePod, Min: list("cpu", "200m", "memory", "256Mi"), Max: list("memory", "384Mi")}}, "200m 256Mi / 1 384Mi"},
		{"max below the request", Mover{}, []corev1.LimitRangeItem{{Type: corev1.LimitTypeContainer, Max: list("memory", "100Mi")}}, "100m 100Mi / 1 100Mi"},
		{"ratio", Mover{}, []corev1.LimitRangeItem{{Type: corev1.LimitTypeContainer, MaxLimitRequestRatio: list("cpu", "4", "memory", "2")}}, "250m 256Mi / 1 512Mi"},
		{"other types ignored", Mover{}, []corev1.LimitRangeItem{{Type: corev1.LimitTypePersistentVolumeClaim, Max: list("memory", "1Mi")}}, "100m 128Mi / 1 512Mi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.mover.PodResources([]corev1.LimitRange{{Spec: corev1.LimitRangeSpec{Limits: tc.ranges}}})
			got := strings.Join([]string{r.Requests.Cpu().String(), r.Requests.Memory().String(), "/", r.Limits.Cpu().String(), r.Limits.Memory().String()}, " ")
			if got != tc.want {
				t.Fatalf("PodResources = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestMoverConfig(t *testing.T) {
	cfg, err := ParseConfig("ferry.yaml", []byte(`
mover:
  resources: {requests: {cpu: 200m, memory: 256Mi}, limits: {memory: 1Gi}}
  nodeSelector: {pool: data}
  tolerations: [{key: dedicated, operator: Equal, value: data, effect: NoSchedule}]
  priorityClassName: backup-low
  imagePullSecrets: [{name: regcred}]
`))
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Mover
	if m.NodeSelector["pool"] != "data" || m.PriorityClassName != "backup-low" || m.PullSecrets()[0].Name != "regcred" ||
		m.PodTolerations()[0].Key != "dedicated" || len(m.PodTolerations()) != 1 {
		t.Fatalf("mover = %+v", m)
	}
	if (Mover{}).PodTolerations()[0].Operator != corev1.TolerationOpExists {
		t.Fatal("without tolerations a mover tolerates every taint")
	}
	over := Config{}.Merge(cfg).Merge(Config{Planning: Planning{Mover: Mover{Resources: MoverResources{Limits: map[string]string{"cpu": "2"}}}}})
	if over.Mover.Resources.Limits["cpu"] != "2" || over.Mover.Resources.Limits["memory"] != "1Gi" || over.Mover.PriorityClassName != "backup-low" {
		t.Fatalf("merged mover = %+v", over.Mover)
	}
	for yaml, want := range map[string]string{
		"mover: {resources: {requests: {gpu: 1}}}\n":                     "mover.resources.requests.gpu: unknown resource",
		"mover: {resources: {limits: {memory: lots}}}\n":                 `mover.resources.limits.memory: "lots" is not a positive quantity`,
		"mover: {resources: {requests: {cpu: 2}, limits: {cpu: 1}}}\n":   "mover.resources.requests.cpu: 2 is more than the limit 1",
		"mover: {tolerations: [{key: a, operator: Maybe}]}\n":            `mover.tolerations[0].operator: "Maybe"`,
		"mover: {tolerations: [{key: a, operator: Exists, value: b}]}\n": "mover.tolerations[0].value",
		"mover: {tolerations: [{key: a, effect: Sometimes}]}\n":          `mover.tolerations[0].effect: "Sometimes"`,
		"mover: {imagePullSecrets: [{name: ''}]}\n":                      "mover.imagePullSecrets[0].name: missing",
		"mover: {priorityClassName: Not_A_Name}\n":                       "mover.priorityClassName",
		"mover: {labels: {team: \"a b\"}}\n":                             "mover.labels.team",
		"mover: {labels: {\"-bad\": x}}\n":                               "mover.labels.-bad",
		"mover: {annotations: {\"a/b/c\": x}}\n":                         "mover.annotations.a/b/c",
		"mover: {nodeselector: {a: b}}\n":                                "field nodeselector not found",
	} {
		if _, err := ParseConfig("ferry.yaml", []byte(yaml)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseConfig(%q) = %v, want an error naming %q", yaml, err, want)
		}
	}
}
