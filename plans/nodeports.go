package plans

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// lastApplied is the annotation kubectl apply (client-side) keeps the applied object in.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

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
	if cfg := u.GetAnnotations()[lastApplied]; cfg != "" {
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
		ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
		for _, port := range ports {
			if n := intOf(asMap(port)["nodePort"]); n > 0 {
				held[n] = svc.GetNamespace() + "/" + svc.GetName()
			}
		}
		if n := intOf(nestedField(svc.Object, "spec", "healthCheckNodePort")); n > 0 {
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

func managedFields(obj map[string]any) []map[string]any {
	list, _ := nestedField(obj, "metadata", "managedFields").([]any)
	out := make([]map[string]any, 0, len(list))
	for _, e := range list {
		if m, ok := e.(map[string]any); ok {
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

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}
