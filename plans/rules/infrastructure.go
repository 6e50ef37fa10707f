package rules

// infrastructureRules are the types in which a cluster's own infrastructure (its network plugin,
// its node autoscaler, its device drivers) records the cluster itself: which addresses its pods
// and nodes hold, which identities it gave them, which machines it runs. They never move: the
// target's own plugins make their records, and a copy of the source's would be taken for the
// target's (Calico handing out addresses a copied block says are taken, or giving a pod one
// that another holds; Karpenter managing, and ending, the source's machines).
func infrastructureRules() map[string]Rule {
	out := map[string]Rule{}
	for why, grs := range map[string][]string{
		"Calico's address allocations for the source cluster's nodes and pods": {
			"ipamblocks.crd.projectcalico.org", "blockaffinities.crd.projectcalico.org", "ipamhandles.crd.projectcalico.org"},
		"Cilium's records of the source cluster's pods, nodes and security identities": {
			"ciliumendpoints.cilium.io", "ciliumendpointslices.cilium.io", "ciliumidentities.cilium.io", "ciliumnodes.cilium.io"},
		"Karpenter's records of the source cluster's machines (the target's Karpenter would manage them)": {
			"nodeclaims.karpenter.sh"},
		"features the source cluster's nodes published": {
			"nodefeatures.nfd.k8s-sigs.io"},
		"devices the source cluster's drivers published for its nodes": {
			"resourceslices.resource.k8s.io"},
	} {
		for _, gr := range grs {
			out[gr] = Rule{Wave: WaveRest, Never: why}
		}
	}
	return out
}
