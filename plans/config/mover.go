package config

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Mover is ferry.yaml's mover section: how the short-lived pods that read and write claims are
// shaped, for clusters whose namespaces demand it (quotas that want requests and limits, nodes
// set aside by taints, registries behind pull secrets).
type Mover struct {
	// Resources are the mover container's requests and limits; unset ones take MoverDefaults'.
	Resources MoverResources `yaml:"resources,omitempty" json:"resources,omitzero"`
	// NodeSelector applies to movers not pinned to the node of the pod using their claim.
	NodeSelector map[string]string `yaml:"nodeSelector,omitempty" json:"nodeSelector,omitempty"`
	// Tolerations replace the default, which tolerates every taint (a mover must reach any node
	// a claim is attached to).
	Tolerations       []Toleration `yaml:"tolerations,omitempty" json:"tolerations,omitempty"`
	PriorityClassName string       `yaml:"priorityClassName,omitempty" json:"priorityClassName,omitempty"`
	ImagePullSecrets  []LocalRef   `yaml:"imagePullSecrets,omitempty" json:"imagePullSecrets,omitempty"`
	// Labels and Annotations are added to mover pods, for admission policies that demand some (a
	// team's label) or a mesh that must take them in after all (sidecar.istio.io/inject: "true");
	// ferry's own (app.kubernetes.io/name, ferry.dev/claim) stay.
	Labels      map[string]string `yaml:"labels,omitempty" json:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty" json:"annotations,omitempty"`
}

// MoverResources are quantities by resource name (cpu, memory, ephemeral-storage).
type MoverResources struct {
	Requests map[string]string `yaml:"requests,omitempty" json:"requests,omitempty"`
	Limits   map[string]string `yaml:"limits,omitempty" json:"limits,omitempty"`
}

// Toleration is a pod toleration, as Kubernetes writes it.
type Toleration struct {
	Key               string `yaml:"key,omitempty" json:"key,omitempty"`
	Operator          string `yaml:"operator,omitempty" json:"operator,omitempty"`
	Value             string `yaml:"value,omitempty" json:"value,omitempty"`
	Effect            string `yaml:"effect,omitempty" json:"effect,omitempty"`
	TolerationSeconds *int64 `yaml:"tolerationSeconds,omitempty" json:"tolerationSeconds,omitempty"`
}

// LocalRef names an object in the mover's namespace.
type LocalRef struct {
	Name string `yaml:"name" json:"name"`
}

// moverDefaults are the mover's requests and limits when ferry.yaml sets none: enough to stream
// a tar and hash it, small enough for a namespace quota to have room for a few.
var moverDefaults = MoverResources{
	Requests: map[string]string{"cpu": "100m", "memory": "128Mi"},
	Limits:   map[string]string{"cpu": "1", "memory": "512Mi"},
}

// MoverResourceNames are the resources a mover sets requests and limits of.
var MoverResourceNames = []string{"cpu", "memory", "ephemeral-storage"}

var dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

func (m Mover) validate(bad func(field, format string, args ...any)) {
	parsed := map[string]resource.Quantity{}
	for _, part := range []struct {
		field string
		m     map[string]string
	}{{"requests", m.Resources.Requests}, {"limits", m.Resources.Limits}} {
		for _, name := range slices.Sorted(maps.Keys(part.m)) {
			f := "mover.resources." + part.field + "." + name
			if !slices.Contains(MoverResourceNames, name) {
				bad(f, "unknown resource: want cpu, memory or ephemeral-storage")
				continue
			}
			q, err := resource.ParseQuantity(part.m[name])
			if err != nil || q.Sign() <= 0 {
				bad(f, "%q is not a positive quantity such as 250m or 256Mi", part.m[name])
				continue
			}
			parsed[part.field+"."+name] = q
		}
	}
	for _, name := range MoverResourceNames {
		req, okReq := parsed["requests."+name]
		lim, okLim := parsed["limits."+name]
		if okReq && okLim && req.Cmp(lim) > 0 {
			bad("mover.resources.requests."+name, "%s is more than the limit %s", req.String(), lim.String())
		}
	}
	for i, t := range m.Tolerations {
		f := fmt.Sprintf("mover.tolerations[%d]", i)
		switch t.Operator {
		case "", "Equal":
		case "Exists":
			if t.Value != "" {
				bad(f+".value", "must be empty with operator Exists")
			}
		default:
			bad(f+".operator", "%q: want Equal or Exists", t.Operator)
		}
		switch t.Effect {
		case "", "NoSchedule", "PreferNoSchedule", "NoExecute":
		default:
			bad(f+".effect", "%q: want NoSchedule, PreferNoSchedule or NoExecute", t.Effect)
		}
	}
	for i, s := range m.ImagePullSecrets {
		if s.Name == "" {
			bad(fmt.Sprintf("mover.imagePullSecrets[%d].name", i), "missing")
		}
	}
	if m.PriorityClassName != "" && !dnsSubdomain.MatchString(m.PriorityClassName) {
		bad("mover.priorityClassName", "%q is not a priority class name", m.PriorityClassName)
	}
	for _, key := range slices.Sorted(maps.Keys(m.Labels)) {
		if errs := slices.Concat(validation.IsQualifiedName(key), validation.IsValidLabelValue(m.Labels[key])); len(errs) > 0 {
			bad("mover.labels."+key, "%s", strings.Join(errs, "; "))
		}
	}
	for _, key := range slices.Sorted(maps.Keys(m.Annotations)) {
		if errs := validation.IsQualifiedName(key); len(errs) > 0 {
			bad("mover.annotations."+key, "%s", strings.Join(errs, "; "))
		}
	}
}

// merge returns m extended by over: set fields of over win, resource by resource.
func (m Mover) merge(over Mover) Mover {
	out := m
	out.Resources.Requests = mergeMaps(m.Resources.Requests, over.Resources.Requests)
	out.Resources.Limits = mergeMaps(m.Resources.Limits, over.Resources.Limits)
	out.NodeSelector = mergeMaps(m.NodeSelector, over.NodeSelector)
	out.Labels = mergeMaps(m.Labels, over.Labels)
	out.Annotations = mergeMaps(m.Annotations, over.Annotations)
	if over.Tolerations != nil {
		out.Tolerations = over.Tolerations
	}
	if over.PriorityClassName != "" {
		out.PriorityClassName = over.PriorityClassName
	}
	if over.ImagePullSecrets != nil {
		out.ImagePullSecrets = over.ImagePullSecrets
	}
	return out
}

// PodTolerations are the tolerations of mover pods.
func (m Mover) PodTolerations() []corev1.Toleration {
	if len(m.Tolerations) == 0 {
		return []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	}
	out := make([]corev1.Toleration, 0, len(m.Tolerations))
	for _, t := range m.Tolerations {
		out = append(out, corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOperator(t.Operator), Value: t.Value,
			Effect: corev1.TaintEffect(t.Effect), TolerationSeconds: t.TolerationSeconds})
	}
	return out
}

// PullSecrets are the image pull secrets of mover pods.
func (m Mover) PullSecrets() []corev1.LocalObjectReference {
	var out []corev1.LocalObjectReference
	for _, s := range m.ImagePullSecrets {
		out = append(out, corev1.LocalObjectReference{Name: s.Name})
	}
	return out
}

// PodResources are the mover container's requests and limits in a namespace with these
// LimitRanges: ferry.yaml's over the defaults, a request never above its limit, then kept within
// every range's min and max and its largest limit-to-request ratio, so the pod is admitted.
// The values were validated with the configuration.
func (m Mover) PodResources(ranges []corev1.LimitRange) corev1.ResourceRequirements {
	req, lim := corev1.ResourceList{}, corev1.ResourceList{}
	for name, v := range mergeMaps(moverDefaults.Requests, m.Resources.Requests) {
		if q, err := resource.ParseQuantity(v); err == nil {
			req[corev1.ResourceName(name)] = q
		}
	}
	for name, v := range mergeMaps(moverDefaults.Limits, m.Resources.Limits) {
		if q, err := resource.ParseQuantity(v); err == nil {
			lim[corev1.ResourceName(name)] = q
		}
	}
	// A request set above the default limit raises the limit (a limit set below the default
	// request lowers the request below).
	for name, r := range req {
		if l, ok := lim[name]; ok && r.Cmp(l) > 0 {
			if _, userLimit := m.Resources.Limits[string(name)]; userLimit {
				req[name] = l
			} else {
				lim[name] = r
			}
		}
	}
	for _, lr := range ranges {
		for _, item := range lr.Spec.Limits {
			if item.Type != corev1.LimitTypeContainer && item.Type != corev1.LimitTypePod {
				continue
			}
			for name, min := range item.Min {
				raise(req, name, min)
				raise(lim, name, min)
			}
			for name, max := range item.Max {
				lower(req, name, max)
				lower(lim, name, max)
			}
		}
	}
	for name, r := range req {
		if l, ok := lim[name]; ok && r.Cmp(l) > 0 {
			req[name] = l
		}
	}
	for _, lr := range ranges {
		for _, item := range lr.Spec.Limits {
			if item.Type != corev1.LimitTypeContainer && item.Type != corev1.LimitTypePod {
				continue
			}
			for name, ratio := range item.MaxLimitRequestRatio {
				l, okL := lim[name]
				r, okR := req[name]
				if !okL || !okR || ratio.Sign() <= 0 {
					continue
				}
				// request >= limit / ratio, rounded up to the milli-unit.
				need := resource.NewMilliQuantity((l.MilliValue()*1000+ratio.MilliValue()-1)/ratio.MilliValue(), l.Format)
				if r.Cmp(*need) < 0 {
					req[name] = *need
				}
			}
		}
	}
	return corev1.ResourceRequirements{Requests: req, Limits: lim}
}

// raise sets list[name] to at least min, when list sets it.
func raise(list corev1.ResourceList, name corev1.ResourceName, min resource.Quantity) {
	if q, ok := list[name]; ok && q.Cmp(min) < 0 {
		list[name] = min.DeepCopy()
	}
}

// lower sets list[name] to at most max, when list sets it.
func lower(list corev1.ResourceList, name corev1.ResourceName, max resource.Quantity) {
	if q, ok := list[name]; ok && q.Cmp(max) > 0 {
		list[name] = max.DeepCopy()
	}
}
