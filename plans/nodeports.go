package plans

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/ferrykube/ferry/plans/rules"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// NodePort is a node port a user chose for a Service (rules.ChosenNodePortsOf), as a plan records it.
type NodePort = rules.NodePort

// ClusterIP is a cluster IP a user chose for a Service (rules.ChosenClusterIPOf), as a plan records it.
type ClusterIP = rules.ClusterIP

var serviceCIDRsGVR = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "servicecidrs"}

// checkChosenAddresses blocks on each chosen node port and cluster IP of the plan that a Service
// of the target other than its own (after namespace mapping) already holds, and on each chosen
// cluster IP outside the target's service ranges: creating the Service there would be refused.
func checkChosenAddresses(ctx context.Context, p *Plan, target Clients) error {
	if len(p.NodePorts) == 0 && len(p.ClusterIPs) == 0 {
		return nil
	}
	list, err := target.Dynamic.Resource(servicesGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("target: list services: %w", err)
	}
	heldPorts := map[int64]string{} // node port -> namespace/name of the target's service
	heldIPs := map[string]string{}  // cluster IP -> namespace/name of the target's service
	for _, svc := range list.Items {
		for _, n := range rules.HeldNodePorts(svc.Object) {
			heldPorts[n] = svc.GetNamespace() + "/" + svc.GetName()
		}
		ips, _, _ := unstructured.NestedStringSlice(svc.Object, "spec", "clusterIPs")
		for _, ip := range ips {
			heldIPs[ip] = svc.GetNamespace() + "/" + svc.GetName()
		}
	}
	for _, np := range p.NodePorts {
		own := mapNamespace(p, np.Namespace) + "/" + np.Service
		if holder, ok := heldPorts[np.NodePort]; ok && holder != own {
			p.block("service "+own, "node port %d (%s) was chosen on the source and is taken on the target by service %s: free it there, or change the port on the source", np.NodePort, np.Port, holder)
		}
	}
	ranges, known := serviceRanges(ctx, target)
	for _, c := range p.ClusterIPs {
		own := mapNamespace(p, c.Namespace) + "/" + c.Service
		if holder, ok := heldIPs[c.IP]; ok && holder != own {
			p.block("service "+own, "cluster IP %s was chosen on the source and is taken on the target by service %s: free it there, or change the IP on the source", c.IP, holder)
		} else if known && !inRanges(c.IP, ranges) {
			p.block("service "+own, "cluster IP %s was chosen on the source and is outside the target's service ranges (%s)", c.IP, strings.Join(prefixStrings(ranges), ", "))
		}
	}
	return nil
}

// serviceRanges are the target's service IP ranges (its ServiceCIDRs, Kubernetes 1.33 and later);
// known is false when the target does not tell them (older, or not readable by this identity).
func serviceRanges(ctx context.Context, target Clients) (ranges []netip.Prefix, known bool) {
	list, err := target.Dynamic.Resource(serviceCIDRsGVR).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) == 0 {
		return nil, false
	}
	for _, c := range list.Items {
		cidrs, _, _ := unstructured.NestedStringSlice(c.Object, "spec", "cidrs")
		for _, s := range cidrs {
			if prefix, err := netip.ParsePrefix(s); err == nil {
				ranges = append(ranges, prefix)
			}
		}
	}
	return ranges, len(ranges) > 0
}

func inRanges(ip string, ranges []netip.Prefix) bool {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	for _, r := range ranges {
		if r.Contains(addr) {
			return true
		}
	}
	return false
}

func prefixStrings(ranges []netip.Prefix) []string {
	out := make([]string, len(ranges))
	for i, r := range ranges {
		out[i] = r.String()
	}
	return out
}
