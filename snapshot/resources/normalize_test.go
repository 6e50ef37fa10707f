package resources

import (
	"encoding/json"
	"testing"
)

func parse(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestNormalize(t *testing.T) {
	for _, tc := range []struct {
		name, gr, in, want string
	}{
		{"server-set metadata and status", "configmaps",
			`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"n","uid":"u","resourceVersion":"7","creationTimestamp":"t","managedFields":[{}],"labels":{"a":"b"},"ownerReferences":[{"kind":"X","name":"x","uid":"u2"}]},"data":{"k":"v"},"status":{"x":1}}`,
			`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"n","labels":{"a":"b"},"ownerReferences":[{"kind":"X","name":"x"}]},"data":{"k":"v"}}`},
		{"service IPs and node ports", "services",
			`{"metadata":{"name":"s"},"spec":{"clusterIP":"10.0.0.1","clusterIPs":["10.0.0.1"],"type":"NodePort","ports":[{"port":80,"nodePort":30080}]}}`,
			`{"metadata":{"name":"s"},"spec":{"type":"NodePort","ports":[{"port":80}]}}`},
		{"node ports kubectl apply chose (last-applied configuration) stay, by name or value", "services",
			`{"metadata":{"name":"s","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"spec\":{\"type\":\"NodePort\",\"ports\":[{\"name\":\"http\",\"port\":80,\"nodePort\":30080},{\"name\":\"https\",\"port\":443},{\"port\":9000,\"nodePort\":30900}]}}"}},"spec":{"type":"NodePort","ports":[{"name":"http","port":80,"nodePort":30080},{"name":"https","port":443,"nodePort":31443},{"port":9000,"nodePort":30900}]}}`,
			`{"metadata":{"name":"s","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"spec\":{\"type\":\"NodePort\",\"ports\":[{\"name\":\"http\",\"port\":80,\"nodePort\":30080},{\"name\":\"https\",\"port\":443},{\"port\":9000,\"nodePort\":30900}]}}"}},"spec":{"type":"NodePort","ports":[{"name":"http","port":80,"nodePort":30080},{"name":"https","port":443},{"port":9000,"nodePort":30900}]}}`},
		{"node ports a field manager set stay (server-side apply, create)", "services",
			`{"metadata":{"name":"s","managedFields":[{"manager":"kubectl","operation":"Apply","fieldsV1":{"f:spec":{"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{"f:nodePort":{},"f:port":{}},"k:{\"port\":53,\"protocol\":\"UDP\"}":{"f:port":{}}}}}}]},"spec":{"type":"NodePort","ports":[{"port":80,"protocol":"TCP","nodePort":30080},{"port":53,"protocol":"UDP","nodePort":31053}]}}`,
			`{"metadata":{"name":"s"},"spec":{"type":"NodePort","ports":[{"port":80,"protocol":"TCP","nodePort":30080},{"port":53,"protocol":"UDP"}]}}`},
		{"health check node port: allocated dropped", "services",
			`{"metadata":{"name":"s"},"spec":{"type":"LoadBalancer","externalTrafficPolicy":"Local","healthCheckNodePort":32000,"ports":[{"port":80,"nodePort":30001}]}}`,
			`{"metadata":{"name":"s"},"spec":{"type":"LoadBalancer","externalTrafficPolicy":"Local","ports":[{"port":80}]}}`},
		{"health check node port: chosen kept, with the load balancer's addresses", "services",
			`{"metadata":{"name":"s","managedFields":[{"manager":"helm","operation":"Update","fieldsV1":{"f:spec":{"f:healthCheckNodePort":{}}}}]},"spec":{"type":"LoadBalancer","externalTrafficPolicy":"Local","healthCheckNodePort":32000,"loadBalancerIP":"198.51.100.7","externalIPs":["198.51.100.8"],"loadBalancerSourceRanges":["203.0.113.0/24"],"ports":[{"port":80,"nodePort":30001}]}}`,
			`{"metadata":{"name":"s"},"spec":{"type":"LoadBalancer","externalTrafficPolicy":"Local","healthCheckNodePort":32000,"loadBalancerIP":"198.51.100.7","externalIPs":["198.51.100.8"],"loadBalancerSourceRanges":["203.0.113.0/24"],"ports":[{"port":80}]}}`},
		{"external name", "services",
			`{"metadata":{"name":"s"},"spec":{"type":"ExternalName","externalName":"db.example.com"}}`,
			`{"metadata":{"name":"s"},"spec":{"type":"ExternalName","externalName":"db.example.com"}}`},
		{"headless service keeps None", "services",
			`{"metadata":{"name":"s"},"spec":{"clusterIP":"None","clusterIPs":["None"]}}`,
			`{"metadata":{"name":"s"},"spec":{"clusterIP":"None","clusterIPs":["None"]}}`},
		{"claim binding", "persistentvolumeclaims",
			`{"metadata":{"name":"p","annotations":{"pv.kubernetes.io/bind-completed":"yes","keep":"me"}},"spec":{"volumeName":"pv-1","storageClassName":"standard"}}`,
			`{"metadata":{"name":"p","annotations":{"keep":"me"}},"spec":{"storageClassName":"standard"}}`},
		{"job controller uid", "jobs.batch",
			`{"metadata":{"name":"j","labels":{"batch.kubernetes.io/controller-uid":"u","job-name":"j"}},"spec":{"selector":{"matchLabels":{"batch.kubernetes.io/controller-uid":"u"}},"template":{"metadata":{"labels":{"controller-uid":"u","job-name":"j"}}}}}`,
			`{"metadata":{"name":"j","labels":{"job-name":"j"}},"spec":{"selector":{"matchLabels":{}},"template":{"metadata":{"labels":{"job-name":"j"}}}}}`},
		{"daemon set's template generation", "daemonsets.apps",
			`{"metadata":{"name":"d","annotations":{"deprecated.daemonset.template.generation":"3","kubernetes.io/change-cause":"v3"}}}`,
			`{"metadata":{"name":"d","annotations":{"kubernetes.io/change-cause":"v3"}}}`},
		{"pod node", "pods",
			`{"metadata":{"name":"p"},"spec":{"nodeName":"n1","priority":0,"containers":[]}}`,
			`{"metadata":{"name":"p"},"spec":{"containers":[]}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := parse(t, tc.in)
			got, _ := json.Marshal(Normalize(tc.gr, in))
			want, _ := json.Marshal(parse(t, tc.want))
			if string(got) != string(want) {
				t.Fatalf("Normalize:\n got %s\nwant %s", got, want)
			}
			if again, _ := json.Marshal(parse(t, tc.in)); string(again) != mustJSON(t, in) {
				t.Fatal("Normalize changed its input")
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestDigestIgnoresServerFieldsOnly(t *testing.T) {
	a := parse(t, `{"kind":"ConfigMap","metadata":{"name":"c","uid":"1","resourceVersion":"1"},"data":{"k":"v"}}`)
	b := parse(t, `{"kind":"ConfigMap","metadata":{"name":"c","uid":"2","resourceVersion":"9"},"data":{"k":"v"}}`)
	c := parse(t, `{"kind":"ConfigMap","metadata":{"name":"c","uid":"2","resourceVersion":"9"},"data":{"k":"w"}}`)
	da, _ := Digest("configmaps", a)
	db, _ := Digest("configmaps", b)
	dc, _ := Digest("configmaps", c)
	if da != db || da == dc {
		t.Fatalf("digests: same content %s/%s, changed data %s", da, db, dc)
	}
}
