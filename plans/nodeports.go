package plans

import (
	"context"
	"fmt"

	"github.com/ferrykube/ferry/plans/rules"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodePort is a node port a user chose for a Service (rules.ChosenNodePortsOf), as a plan records it.
type NodePort = rules.NodePort

// checkNodePorts blocks on each chosen node port of the plan that a Service of the target other
// than its own (after namespace mapping) already holds: creating it there would be refused.
func checkNodePorts(ctx context.Context, p *Plan, target Clients) error {
	if len(p.NodePorts) == 0 {
		return nil
	}
	list, err := target.Dynamic.Resource(servicesGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("target: list services: %w", err)
	}
	held := map[int64]string{} // node port -> namespace/name of the target's service
	for _, svc := range list.Items {
		for _, n := range rules.HeldNodePorts(svc.Object) {
			held[n] = svc.GetNamespace() + "/" + svc.GetName()
		}
	}
	for _, np := range p.NodePorts {
		own := mapNamespace(p, np.Namespace) + "/" + np.Service
		if holder, ok := held[np.NodePort]; ok && holder != own {
			p.block("service "+own, "node port %d (%s) was chosen on the source and is taken on the target by service %s: free it there, or change the port on the source", np.NodePort, np.Port, holder)
		}
	}
	return nil
}
