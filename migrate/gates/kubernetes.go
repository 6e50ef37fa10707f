package gates

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ferrykube/ferry/plans/config"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// kubernetesGate passes when every Deployment and StatefulSet it selects has all its replicas
// updated and ready at its current generation.
type kubernetesGate struct {
	name   string
	cfg    config.KubernetesGate
	client kubernetes.Interface
}

func newKubernetes(name string, cfg config.KubernetesGate, opts Options) (*kubernetesGate, error) {
	if opts.RESTConfig == nil {
		return nil, errors.New("gate " + name + ": no kubeconfig to reach the cluster")
	}
	rc, err := opts.RESTConfig(cfg.Context)
	if err != nil {
		return nil, fmt.Errorf("gate %s: kubernetes.context %q: %w", name, cfg.Context, err)
	}
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("gate %s: kubernetes.context %q: %w", name, cfg.Context, err)
	}
	return &kubernetesGate{name: name, cfg: cfg, client: kc}, nil
}

// NewKubernetes builds a kubernetes gate on a client of the caller's.
func NewKubernetes(name string, cfg config.KubernetesGate, client kubernetes.Interface) Gate {
	return &kubernetesGate{name: name, cfg: cfg, client: client}
}

func (g *kubernetesGate) Name() string { return g.name }

func replicas(r *int32) int32 {
	if r == nil {
		return 1
	}
	return *r
}

func deploymentReady(d *appsv1.Deployment) bool {
	want := replicas(d.Spec.Replicas)
	s := d.Status
	return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.AvailableReplicas == want && s.Replicas == want
}

func statefulSetReady(s *appsv1.StatefulSet) bool {
	want := replicas(s.Spec.Replicas)
	st := s.Status
	return st.ObservedGeneration >= s.Generation && st.ReadyReplicas == want && st.Replicas == want &&
		(st.UpdateRevision == "" || st.CurrentRevision == st.UpdateRevision || st.UpdatedReplicas == want)
}

func (g *kubernetesGate) Measure(ctx context.Context) Measurement {
	m := Measurement{Gate: g.name, At: time.Now()}
	opts := metav1.ListOptions{LabelSelector: g.cfg.Selector}
	total := 0
	var notReady []string
	for _, ns := range g.cfg.Namespaces {
		deps, err := g.client.AppsV1().Deployments(ns).List(ctx, opts)
		if err != nil {
			m.Inconclusive, m.Detail = true, fmt.Sprintf("list deployments in %s: %v", ns, err)
			return m
		}
		for i := range deps.Items {
			total++
			if d := &deps.Items[i]; !deploymentReady(d) {
				want := replicas(d.Spec.Replicas)
				if d.Status.ObservedGeneration < d.Generation {
					notReady = append(notReady, fmt.Sprintf("deployment %s/%s (generation %d not observed yet)", ns, d.Name, d.Generation))
					continue
				}
				notReady = append(notReady, fmt.Sprintf("deployment %s/%s (%d/%d updated, %d/%d available, %d old)", ns, d.Name,
					d.Status.UpdatedReplicas, want, d.Status.AvailableReplicas, want, max(d.Status.Replicas-d.Status.UpdatedReplicas, 0)))
			}
		}
		sets, err := g.client.AppsV1().StatefulSets(ns).List(ctx, opts)
		if err != nil {
			m.Inconclusive, m.Detail = true, fmt.Sprintf("list statefulsets in %s: %v", ns, err)
			return m
		}
		for i := range sets.Items {
			total++
			if s := &sets.Items[i]; !statefulSetReady(s) {
				notReady = append(notReady, fmt.Sprintf("statefulset %s/%s (%d/%d ready)", ns, s.Name, s.Status.ReadyReplicas, replicas(s.Spec.Replicas)))
			}
		}
	}
	where := strings.Join(g.cfg.Namespaces, ", ")
	if g.cfg.Selector != "" {
		where += " with " + g.cfg.Selector
	}
	if total == 0 {
		m.Inconclusive, m.Detail = true, "no Deployment or StatefulSet in "+where
		return m
	}
	m.Value = float64(total-len(notReady)) / float64(total)
	m.OK = len(notReady) == 0
	if m.OK {
		m.Detail = fmt.Sprintf("%d workloads ready in %s", total, where)
	} else {
		n := len(notReady)
		if n > 5 {
			notReady = append(notReady[:5], fmt.Sprintf("%d more", n-5))
		}
		m.Detail = fmt.Sprintf("%d of %d workloads not ready in %s: %s", n, total, where, strings.Join(notReady, ", "))
	}
	return m
}
