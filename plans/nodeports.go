package plans

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/ferrykube/ferry/plans/rules"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	heldPorts := map[int64]string{}    // node port -> namespace/name of the target's service
	heldIPs := map[netip.Addr]string{} // cluster IP -> namespace/name of the target's service
	ipsOf := map[string][]netip.Addr{} // namespace/name of the target's service -> its cluster IPs
	for _, svc := range list.Items {
		name := svc.GetNamespace() + "/" + svc.GetName()
		for _, n := range rules.HeldNodePorts(svc.Object) {
			heldPorts[n] = name
		}
		ips, _, _ := unstructured.NestedStringSlice(svc.Object, "spec", "clusterIPs")
		for _, ip := range ips {
			if addr, err := netip.ParseAddr(ip); err == nil {
				heldIPs[addr] = name
				ipsOf[name] = append(ipsOf[name], addr)
			}
		}
	}
	for _, np := range p.NodePorts {
		own := p.Config.MapNamespace(np.Namespace) + "/" + np.Service
		if holder, ok := heldPorts[np.NodePort]; ok && holder != own {
			p.block("service "+own, "node port %d (%s) was chosen on the source and is taken on the target by service %s: free it there, or change the port on the source", np.NodePort, np.Port, holder)
		}
	}
	if len(p.ClusterIPs) == 0 {
		return nil
	}
	ranges, known := serviceRanges(ctx, p, target)
	for _, c := range p.ClusterIPs {
		own := p.Config.MapNamespace(c.Namespace) + "/" + c.Service
		addr, err := netip.ParseAddr(c.IP)
		if err != nil {
			continue
		}
		switch holder, held := heldIPs[addr]; {
		case held && holder != own:
			p.block("service "+own, "cluster IP %s was chosen on the source and is taken on the target by service %s: free it there, or change the IP on the source", c.IP, holder)
		case !held && len(ipsOf[own]) > 0:
			p.warn("service "+own, "cluster IP %s was chosen on the source; the target's service of that name has %s, and a cluster IP cannot change: the restore leaves it (or, replacing it, fails) unless it is deleted there first", c.IP, ipsOf[own][0])
		case known && !slices.ContainsFunc(ranges, func(r netip.Prefix) bool { return r.Contains(addr) }):
			p.block("service "+own, "cluster IP %s was chosen on the source and is outside the target's service ranges (%s)", c.IP, strings.Join(prefixStrings(ranges), ", "))
		}
	}
	return nil
}

// serviceRanges are the target's service IP ranges (its ServiceCIDRs, Kubernetes 1.33 and later);
// known is false when the target does not tell them: an older one, or an identity that may not
// read them (a warning: the chosen cluster IPs are then not checked against them).
func serviceRanges(ctx context.Context, p *Plan, target Clients) (ranges []netip.Prefix, known bool) {
	list, err := target.Dynamic.Resource(serviceCIDRsGVR).List(ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) {
		p.warn("target", "its service ranges (ServiceCIDRs) cannot be read by this identity: chosen cluster IPs are not checked against them")
	}
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

func prefixStrings(ranges []netip.Prefix) []string {
	out := make([]string, len(ranges))
	for i, r := range ranges {
		out[i] = r.String()
	}
	return out
}
