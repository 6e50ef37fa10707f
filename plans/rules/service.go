package rules

import (
	"encoding/json"
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Services move without what the source's API server allocated: the cluster IPs and the node
// ports no user chose (ChosenClusterIP, ChosenNodePorts: Velero's rule for node ports). Chosen
// cluster IPs ("None" makes one headless) and node ports, loadBalancerIP, externalIPs and
// loadBalancerSourceRanges are the user's and move.
// The default namespace's "kubernetes" stays: the target's API server publishes its own.
// A Service's cluster IP is fixed once allocated: one that becomes headless, or stops being so, is
// made again (Remake), but not one with node ports (a NodePort's or a load balancer's), which
// would get others, and another address outside.
func serviceRules() map[string]Rule {
	return map[string]Rule{"services": {
		Wave: WaveRest,
		Remake: func(live, _ map[string]any) string {
			switch t, _ := nestedField(live, "spec", "type").(string); t {
			case "LoadBalancer":
				return "it is a LoadBalancer: made again, it would get another load balancer, at another address"
			case "NodePort":
				return "it is a NodePort Service: made again, it would get other node ports than those load balancers and firewalls outside may point at"
			}
			return ""
		},
		Exclude: func(obj map[string]any) string {
			if apiServersOwn(unstructured.Unstructured{Object: obj}) {
				return "the target's API server publishes its own"
			}
			return ""
		},
		Fixed:     headlessChange,
		Normalize: normalizeService,
		Live:      withAllocatedPorts,
	}}
}

// headlessChange names a Service that is headless (cluster IP "None") where the backup's is not,
// or the other way round: a backup's allocated IP is left out (normalizeService), so comparing
// fields would miss it, and an update keeps the target's.
func headlessChange(want, live map[string]any) string {
	wantIP, _ := nestedField(want, "spec", "clusterIP").(string)
	liveIP, _ := nestedField(live, "spec", "clusterIP").(string)
	wantType, _ := nestedField(want, "spec", "type").(string)
	liveType, _ := nestedField(live, "spec", "type").(string)
	// An ExternalName Service has no cluster IP, and one becomes any other type in place.
	if (wantIP == "None") == (liveIP == "None") || wantType == "ExternalName" || liveType == "ExternalName" {
		return ""
	}
	describe := func(ip string) string {
		if ip == "None" {
			return `"None" (headless)`
		}
		return "an allocated IP"
	}
	return "spec.clusterIP: backup " + describe(wantIP) + ", target " + describe(liveIP)
}

// normalizeService drops a Service's cluster IPs and the node ports no user chose; it reads the
// managed fields and the last-applied configuration, so it runs before those are dropped.
func normalizeService(obj map[string]any) {
	spec := nestedMap(obj, "spec")
	if spec == nil {
		return
	}
	if ip, chosen := ChosenClusterIP(obj); !chosen {
		delete(spec, "clusterIP")
		delete(spec, "clusterIPs")
	} else if ip != "None" && !specFieldChosen(obj, "clusterIPs") {
		// The API server fills clusterIPs from clusterIP, and allocates the other family's IP
		// of a dual-stack Service: the target does both anew.
		delete(spec, "clusterIPs")
	}
	chosen, health := ChosenNodePorts(obj)
	ports, _ := spec["ports"].([]any)
	for i, p := range ports {
		if pm, ok := p.(map[string]any); ok && !chosen[i] {
			delete(pm, "nodePort")
		}
	}
	if !health {
		delete(spec, "healthCheckNodePort")
	}
}

// withAllocatedPorts puts back into a live Service's normalized form the node ports the target
// allocated, so that a chosen port that changed is named with both values.
func withAllocatedPorts(norm, live map[string]any) {
	spec, liveSpec := nestedMap(norm, "spec"), nestedMap(live, "spec")
	if spec == nil || liveSpec == nil {
		return
	}
	ports, _ := spec["ports"].([]any)
	livePorts, _ := liveSpec["ports"].([]any)
	for i, p := range ports {
		if pm, ok := p.(map[string]any); ok && i < len(livePorts) {
			if n, ok := asMap(livePorts[i])["nodePort"]; ok {
				pm["nodePort"] = n
			}
		}
	}
	if n, ok := liveSpec["healthCheckNodePort"]; ok {
		spec["healthCheckNodePort"] = n
	}
}

// LastApplied is the annotation kubectl apply (client-side) keeps the applied object in.
const LastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// NodePort is a node port a user chose for a Service: it moves as it is, so it must be free on the
// target (load balancers and firewalls outside the cluster point at it).
type NodePort struct {
	Namespace string `json:"namespace"`
	Service   string `json:"service"`
	// Port names the service port ("http", or "8080/TCP"); "healthCheckNodePort" for that field.
	Port     string `json:"port"`
	NodePort int64  `json:"nodePort"`
}

// ChosenNodePorts says which node ports of a Service (an object as the API serves it, with its
// managed fields) a user chose, by Velero's rule: those the last-applied configuration holds
// (kubectl apply) or some field manager set (server-side apply, create or update with the port);
// the API server's allocation is in no manager's fields. ports[i] is spec.ports[i]'s.
func ChosenNodePorts(svc map[string]any) (ports []bool, healthCheck bool) {
	specPorts, _, _ := unstructured.NestedSlice(svc, "spec", "ports")
	ports = make([]bool, len(specPorts))
	named, unnamed := map[string]bool{}, map[int64]bool{}
	keys := map[string]bool{} // managed-fields keys of ports whose nodePort a manager set
	u := unstructured.Unstructured{Object: svc}
	if cfg := u.GetAnnotations()[LastApplied]; cfg != "" {
		var applied map[string]any
		if json.Unmarshal([]byte(cfg), &applied) == nil {
			list, _, _ := unstructured.NestedSlice(applied, "spec", "ports")
			for _, p := range list {
				pm, _ := p.(map[string]any)
				if n := intOf(pm["nodePort"]); n > 0 {
					if name, _ := pm["name"].(string); name != "" {
						named[name] = true
					} else {
						unnamed[n] = true
					}
				}
			}
			healthCheck = intOf(nestedField(applied, "spec", "healthCheckNodePort")) > 0
		}
	}
	for _, entry := range managedFields(svc) {
		fields, _ := nestedField(entry, "fieldsV1", "f:spec").(map[string]any)
		if _, ok := fields["f:healthCheckNodePort"]; ok {
			healthCheck = true
		}
		list, _ := fields["f:ports"].(map[string]any)
		for key, p := range list {
			if _, ok := asMap(p)["f:nodePort"]; ok {
				keys[key] = true
			}
		}
	}
	for i, p := range specPorts {
		pm, _ := p.(map[string]any)
		n := intOf(pm["nodePort"])
		if n == 0 {
			continue
		}
		name, _ := pm["name"].(string)
		ports[i] = (name != "" && named[name]) || (name == "" && unnamed[n]) || keys[portKey(pm)]
	}
	return ports, healthCheck
}

// ChosenClusterIP is a Service's cluster IP and whether a user chose it, by the rule of node ports
// (ChosenNodePorts): the last-applied configuration holds it, or some field manager set it; the
// API server's allocation is in no manager's fields. "None" (headless) is always chosen.
func ChosenClusterIP(svc map[string]any) (ip string, chosen bool) {
	ip, _ = nestedField(svc, "spec", "clusterIP").(string)
	switch ip {
	case "":
		return "", false
	case "None":
		return ip, true
	}
	return ip, specFieldChosen(svc, "clusterIP")
}

// specFieldChosen says whether a user set a Service's spec field: the last-applied configuration
// holds a value for it, or some field manager owns it.
func specFieldChosen(svc map[string]any, field string) bool {
	u := unstructured.Unstructured{Object: svc}
	if cfg := u.GetAnnotations()[LastApplied]; cfg != "" {
		var applied map[string]any
		if json.Unmarshal([]byte(cfg), &applied) == nil {
			switch v := nestedField(applied, "spec", field).(type) {
			case string:
				if v != "" {
					return true
				}
			case []any:
				if len(v) > 0 {
					return true
				}
			}
		}
	}
	for _, entry := range managedFields(svc) {
		fields, _ := nestedField(entry, "fieldsV1", "f:spec").(map[string]any)
		if _, ok := fields["f:"+field]; ok {
			return true
		}
	}
	return false
}

// ClusterIP is a cluster IP a user chose for a Service (ChosenClusterIP), as a plan records it: it
// moves as it is, so it must be free on the target and within its service ranges.
type ClusterIP struct {
	Namespace string `json:"namespace"`
	Service   string `json:"service"`
	IP        string `json:"ip"`
}

// ChosenClusterIPOf is the cluster IP a user chose for a Service, if any, but "None".
func ChosenClusterIPOf(svc map[string]any) []ClusterIP {
	ip, chosen := ChosenClusterIP(svc)
	if !chosen || ip == "None" {
		return nil
	}
	u := unstructured.Unstructured{Object: svc}
	return []ClusterIP{{Namespace: u.GetNamespace(), Service: u.GetName(), IP: ip}}
}

// ChosenNodePortsOf lists the node ports a user chose for a Service (see ChosenNodePorts).
func ChosenNodePortsOf(svc map[string]any) []NodePort {
	u := unstructured.Unstructured{Object: svc}
	chosen, health := ChosenNodePorts(svc)
	specPorts, _, _ := unstructured.NestedSlice(svc, "spec", "ports")
	var out []NodePort
	for i, p := range specPorts {
		if chosen[i] {
			pm, _ := p.(map[string]any)
			out = append(out, NodePort{Namespace: u.GetNamespace(), Service: u.GetName(), Port: portName(pm), NodePort: intOf(pm["nodePort"])})
		}
	}
	if n := intOf(nestedField(svc, "spec", "healthCheckNodePort")); health && n > 0 {
		out = append(out, NodePort{Namespace: u.GetNamespace(), Service: u.GetName(), Port: "healthCheckNodePort", NodePort: n})
	}
	return out
}

// HeldNodePorts lists every node port a Service holds, chosen or allocated, health check's too.
func HeldNodePorts(svc map[string]any) []int64 {
	var out []int64
	ports, _, _ := unstructured.NestedSlice(svc, "spec", "ports")
	for _, port := range ports {
		if n := intOf(asMap(port)["nodePort"]); n > 0 {
			out = append(out, n)
		}
	}
	if n := intOf(nestedField(svc, "spec", "healthCheckNodePort")); n > 0 {
		out = append(out, n)
	}
	return out
}

// managedFields are an object's managed-fields entries, but the placeholder the API server makes
// when an object without any (made before 1.18) is first applied server-side: it owns every field
// then there, allocations too, and says nothing of who set them.
func managedFields(obj map[string]any) []map[string]any {
	list, _ := nestedField(obj, "metadata", "managedFields").([]any)
	out := make([]map[string]any, 0, len(list))
	for _, e := range list {
		if m, ok := e.(map[string]any); ok && m["manager"] != "before-first-apply" {
			out = append(out, m)
		}
	}
	return out
}

// portKey is a service port's key in managed fields: k:{"port":80,"protocol":"TCP"}.
func portKey(p map[string]any) string {
	protocol, _ := p["protocol"].(string)
	if protocol == "" {
		protocol = "TCP"
	}
	return fmt.Sprintf(`k:{"port":%d,"protocol":%q}`, intOf(p["port"]), protocol)
}

func portName(p map[string]any) string {
	if name, _ := p["name"].(string); name != "" {
		return name
	}
	protocol, _ := p["protocol"].(string)
	if protocol == "" {
		protocol = "TCP"
	}
	return strconv.FormatInt(intOf(p["port"]), 10) + "/" + protocol
}

// intOf reads a JSON number as the API machinery (int64) or encoding/json (float64) decoded it.
func intOf(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case int:
		return int64(n)
	case int32:
		return int64(n)
	case float64:
		return int64(n)
	case json.Number:
		i, _ := n.Int64()
		return i
	case string:
		i, _ := strconv.ParseInt(n, 10, 64)
		return i
	}
	return 0
}

func nestedField(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	return v
}
