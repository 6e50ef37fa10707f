package rules

import (
	"reflect"
	"testing"
)

func TestService(t *testing.T) {
	const mf = `"managedFields":[{"manager":"kubectl","operation":"Apply","fieldsV1":{"f:spec":{"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{"f:nodePort":{},"f:port":{}},"k:{\"port\":53,\"protocol\":\"UDP\"}":{"f:port":{}}}}}}]`
	const hc = `"managedFields":[{"manager":"helm","operation":"Update","fieldsV1":{"f:spec":{"f:healthCheckNodePort":{}}}}]`
	runCases(t, []ruleCase{
		{"the API server's own", "exclude", "services", `{"metadata":{"namespace":"default","name":"kubernetes"}}`, "publishes its own"},
		{"a user's service moves", "exclude", "services", `{"metadata":{"namespace":"default","name":"web"}}`, ""},
		{"service IPs and node ports", "normalize", "services",
			`{"metadata":{"name":"s"},"spec":{"clusterIP":"10.0.0.1","clusterIPs":["10.0.0.1"],"type":"NodePort","ports":[{"port":80,"nodePort":30080}]}}`,
			`{"metadata":{"name":"s"},"spec":{"type":"NodePort","ports":[{"port":80}]}}`},
		{"node ports kubectl apply chose (last-applied configuration) stay, by name or value", "normalize", "services",
			`{"metadata":{"name":"s","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"spec\":{\"type\":\"NodePort\",\"ports\":[{\"name\":\"http\",\"port\":80,\"nodePort\":30080},{\"name\":\"https\",\"port\":443},{\"port\":9000,\"nodePort\":30900}]}}"}},"spec":{"type":"NodePort","ports":[{"name":"http","port":80,"nodePort":30080},{"name":"https","port":443,"nodePort":31443},{"port":9000,"nodePort":30900}]}}`,
			`{"metadata":{"name":"s","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"spec\":{\"type\":\"NodePort\",\"ports\":[{\"name\":\"http\",\"port\":80,\"nodePort\":30080},{\"name\":\"https\",\"port\":443},{\"port\":9000,\"nodePort\":30900}]}}"}},"spec":{"type":"NodePort","ports":[{"name":"http","port":80,"nodePort":30080},{"name":"https","port":443},{"port":9000,"nodePort":30900}]}}`},
		{"node ports a field manager set stay (server-side apply, create)", "normalize", "services",
			`{"metadata":{"name":"s",` + mf + `},"spec":{"type":"NodePort","ports":[{"port":80,"protocol":"TCP","nodePort":30080},{"port":53,"protocol":"UDP","nodePort":31053}]}}`,
			`{"metadata":{"name":"s",` + mf + `},"spec":{"type":"NodePort","ports":[{"port":80,"protocol":"TCP","nodePort":30080},{"port":53,"protocol":"UDP"}]}}`},
		{"a cluster IP kubectl apply chose stays", "normalize", "services",
			`{"metadata":{"name":"nfs","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"spec\":{\"clusterIP\":\"10.0.0.11\"}}"}},"spec":{"clusterIP":"10.0.0.11","clusterIPs":["10.0.0.11"]}}`,
			`{"metadata":{"name":"nfs","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"spec\":{\"clusterIP\":\"10.0.0.11\"}}"}},"spec":{"clusterIP":"10.0.0.11"}}`},
		{"a cluster IP a field manager set stays", "normalize", "services",
			`{"metadata":{"name":"dns","managedFields":[{"manager":"kubectl","operation":"Apply","fieldsV1":{"f:spec":{"f:clusterIP":{}}}}]},"spec":{"clusterIP":"10.0.0.12","clusterIPs":["10.0.0.12"]}}`,
			`{"metadata":{"name":"dns","managedFields":[{"manager":"kubectl","operation":"Apply","fieldsV1":{"f:spec":{"f:clusterIP":{}}}}]},"spec":{"clusterIP":"10.0.0.12"}}`},
		{"a dual-stack Service's chosen IP stays, its other family's allocated one goes", "normalize", "services",
			`{"metadata":{"name":"nfs","managedFields":[{"manager":"kubectl","operation":"Apply","fieldsV1":{"f:spec":{"f:clusterIP":{}}}}]},"spec":{"clusterIP":"10.0.0.11","clusterIPs":["10.0.0.11","fd00::1b"],"ipFamilyPolicy":"PreferDualStack"}}`,
			`{"metadata":{"name":"nfs","managedFields":[{"manager":"kubectl","operation":"Apply","fieldsV1":{"f:spec":{"f:clusterIP":{}}}}]},"spec":{"clusterIP":"10.0.0.11","ipFamilyPolicy":"PreferDualStack"}}`},
		{"both families' IPs chosen stay", "normalize", "services",
			`{"metadata":{"name":"nfs","managedFields":[{"manager":"kubectl","operation":"Apply","fieldsV1":{"f:spec":{"f:clusterIP":{},"f:clusterIPs":{}}}}]},"spec":{"clusterIP":"10.0.0.11","clusterIPs":["10.0.0.11","fd00::1b"]}}`,
			`{"metadata":{"name":"nfs","managedFields":[{"manager":"kubectl","operation":"Apply","fieldsV1":{"f:spec":{"f:clusterIP":{},"f:clusterIPs":{}}}}]},"spec":{"clusterIP":"10.0.0.11","clusterIPs":["10.0.0.11","fd00::1b"]}}`},
		{"an IP owned by the first server-side apply's placeholder was allocated", "normalize", "services",
			`{"metadata":{"name":"old","managedFields":[{"manager":"before-first-apply","operation":"Update","fieldsV1":{"f:spec":{"f:clusterIP":{}}}}]},"spec":{"clusterIP":"10.0.0.77","clusterIPs":["10.0.0.77"]}}`,
			`{"metadata":{"name":"old","managedFields":[{"manager":"before-first-apply","operation":"Update","fieldsV1":{"f:spec":{"f:clusterIP":{}}}}]},"spec":{}}`},
		{"an empty cluster IP in the last-applied configuration chose none", "normalize", "services",
			`{"metadata":{"name":"s","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"spec\":{\"clusterIP\":\"\"}}"}},"spec":{"clusterIP":"10.0.0.78","clusterIPs":["10.0.0.78"]}}`,
			`{"metadata":{"name":"s","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"spec\":{\"clusterIP\":\"\"}}"}},"spec":{}}`},
		{"headless stays", "normalize", "services",
			`{"metadata":{"name":"h"},"spec":{"clusterIP":"None","clusterIPs":["None"]}}`,
			`{"metadata":{"name":"h"},"spec":{"clusterIP":"None","clusterIPs":["None"]}}`},
		{"health check node port: allocated dropped", "normalize", "services",
			`{"metadata":{"name":"s"},"spec":{"type":"LoadBalancer","externalTrafficPolicy":"Local","healthCheckNodePort":32000,"ports":[{"port":80,"nodePort":30001}]}}`,
			`{"metadata":{"name":"s"},"spec":{"type":"LoadBalancer","externalTrafficPolicy":"Local","ports":[{"port":80}]}}`},
		{"health check node port: chosen kept, with the load balancer's addresses", "normalize", "services",
			`{"metadata":{"name":"s",` + hc + `},"spec":{"type":"LoadBalancer","externalTrafficPolicy":"Local","healthCheckNodePort":32000,"loadBalancerIP":"198.51.100.7","externalIPs":["198.51.100.8"],"loadBalancerSourceRanges":["203.0.113.0/24"],"ports":[{"port":80,"nodePort":30001}]}}`,
			`{"metadata":{"name":"s",` + hc + `},"spec":{"type":"LoadBalancer","externalTrafficPolicy":"Local","healthCheckNodePort":32000,"loadBalancerIP":"198.51.100.7","externalIPs":["198.51.100.8"],"loadBalancerSourceRanges":["203.0.113.0/24"],"ports":[{"port":80}]}}`},
		{"external name", "normalize", "services",
			`{"metadata":{"name":"s"},"spec":{"type":"ExternalName","externalName":"db.example.com"}}`,
			`{"metadata":{"name":"s"},"spec":{"type":"ExternalName","externalName":"db.example.com"}}`},
		{"headless service keeps None", "normalize", "services",
			`{"metadata":{"name":"s"},"spec":{"clusterIP":"None","clusterIPs":["None"]}}`,
			`{"metadata":{"name":"s"},"spec":{"clusterIP":"None","clusterIPs":["None"]}}`},
	})
}

// TestServiceLive: a live Service's normalized form gets the node ports the target allocated back.
func TestServiceLive(t *testing.T) {
	norm := decode(t, `{"spec":{"ports":[{"port":80},{"port":443}]}}`)
	live := decode(t, `{"spec":{"ports":[{"port":80,"nodePort":30080},{"port":443}],"healthCheckNodePort":32000}}`)
	For("services").Live(norm, live)
	if want := decode(t, `{"spec":{"ports":[{"port":80,"nodePort":30080},{"port":443}],"healthCheckNodePort":32000}}`); !reflect.DeepEqual(norm, want) {
		t.Errorf("live form %v, want %v", norm, want)
	}
}

func TestHeldNodePorts(t *testing.T) {
	svc := decode(t, `{"spec":{"ports":[{"port":80,"nodePort":30080},{"port":443}],"healthCheckNodePort":32000}}`)
	if got := HeldNodePorts(svc); !reflect.DeepEqual(got, []int64{30080, 32000}) {
		t.Errorf("HeldNodePorts = %v", got)
	}
}

func TestChosenNodePortsOf(t *testing.T) {
	for _, tc := range []struct {
		name, svc string
		want      []NodePort
	}{
		{"allocated by the API server", `{"metadata":{"name":"s","namespace":"a"},"spec":{"type":"NodePort","ports":[{"port":80,"nodePort":31234}]}}`, nil},
		{"kubectl apply, named port", `{"metadata":{"name":"s","namespace":"a","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"spec\":{\"ports\":[{\"name\":\"http\",\"port\":80,\"nodePort\":30080}]}}"}},"spec":{"ports":[{"name":"http","port":80,"nodePort":30080},{"name":"metrics","port":9090,"nodePort":31999}]}}`,
			[]NodePort{{Namespace: "a", Service: "s", Port: "http", NodePort: 30080}}},
		{"server-side apply, unnamed port", `{"metadata":{"name":"s","namespace":"a","managedFields":[{"manager":"kubectl","operation":"Apply","fieldsV1":{"f:spec":{"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{"f:nodePort":{}}}}}}]},"spec":{"ports":[{"port":80,"protocol":"TCP","nodePort":30080}]}}`,
			[]NodePort{{Namespace: "a", Service: "s", Port: "80/TCP", NodePort: 30080}}},
		{"another manager's fields without the port", `{"metadata":{"name":"s","namespace":"a","managedFields":[{"manager":"kubectl-create","operation":"Update","fieldsV1":{"f:spec":{"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{"f:port":{}}}}}}]},"spec":{"ports":[{"port":80,"protocol":"TCP","nodePort":30080}]}}`, nil},
		{"health check port chosen", `{"metadata":{"name":"s","namespace":"a","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"spec\":{\"healthCheckNodePort\":32100}}"}},"spec":{"type":"LoadBalancer","externalTrafficPolicy":"Local","healthCheckNodePort":32100,"ports":[{"port":80,"nodePort":31000}]}}`,
			[]NodePort{{Namespace: "a", Service: "s", Port: "healthCheckNodePort", NodePort: 32100}}},
		{"last-applied configuration that is not JSON", `{"metadata":{"name":"s","namespace":"a","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{"}},"spec":{"ports":[{"port":80,"nodePort":31000}]}}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ChosenNodePortsOf(decode(t, tc.svc)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ChosenNodePortsOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A Service made again gets its cluster IP anew, a NodePort's its node ports, a LoadBalancer's
// its address outside too: only the first is made again.
func TestServiceRemake(t *testing.T) {
	remake := For("services").Remake
	for _, tc := range []struct {
		typ  string
		want bool
	}{{"", true}, {"ClusterIP", true}, {"NodePort", false}, {"LoadBalancer", false}} {
		live := map[string]any{"spec": map[string]any{"clusterIP": "10.96.0.20"}}
		if tc.typ != "" {
			live["spec"].(map[string]any)["type"] = tc.typ
		}
		want := map[string]any{"spec": map[string]any{"clusterIP": "None"}}
		if why := remake(live, want); (why == "") != tc.want {
			t.Errorf("type %q: Remake says %q, want made again: %v", tc.typ, why, tc.want)
		}
	}
}

func TestHeadlessChange(t *testing.T) {
	svc := func(ip string) map[string]any {
		switch ip {
		case "":
			return map[string]any{"spec": map[string]any{}}
		case "ExternalName":
			return map[string]any{"spec": map[string]any{"type": "ExternalName", "externalName": "api.example.com"}}
		}
		return map[string]any{"spec": map[string]any{"clusterIP": ip}}
	}
	fixed := For("services").Fixed
	for _, tc := range []struct{ want, live, diff string }{
		{"", "10.96.0.20", ""},
		{"None", "None", ""},
		{"10.96.0.30", "10.96.0.20", ""}, // a chosen IP compares as any field does
		{"", "None", `spec.clusterIP: backup an allocated IP, target "None" (headless)`},
		{"None", "10.96.0.20", `spec.clusterIP: backup "None" (headless), target an allocated IP`},
		{"None", "ExternalName", ""}, // changed in place
		{"ExternalName", "None", ""},
	} {
		if got := fixed(svc(tc.want), svc(tc.live)); got != tc.diff {
			t.Errorf("backup %q, target %q: %q, want %q", tc.want, tc.live, got, tc.diff)
		}
	}
}
