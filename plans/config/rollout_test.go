package config

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
)

func TestTrafficAndRolloutErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"unknown type", "traffic: {type: nginx}\n", `traffic.type: "nginx"`},
		{"missing block", "traffic: {type: haproxy}\n", "traffic.haproxy: missing"},
		{"other block", "traffic: {type: exec, exec: {command: [x]}, webhook: {url: 'http://x'}}\n", "traffic.webhook: set, but traffic.type is exec"},
		{"haproxy backend", "traffic: {type: haproxy, haproxy: {address: /run/h.sock, blueServer: b, greenServer: g}}\n", "traffic.haproxy.backend: missing"},
		{"route53 target", "traffic:\n  type: route53\n  route53: {hostedZoneID: Z1, recordName: a.example., recordType: A, blue: {setIdentifier: b, values: [192.0.2.1]}, green: {setIdentifier: g}}\n", "traffic.route53.green: needs values or an aliasTarget"},
		{"gateway namespace", "traffic: {type: gateway-api, gatewayAPI: {namespace: Bad, route: r, blueBackend: {name: b}, greenBackend: {name: g}}}\n", "traffic.gatewayAPI.namespace"},
		{"webhook url", "traffic: {type: webhook, webhook: {url: 'ftp://x'}}\n", "traffic.webhook.url"},
		{"steps", "rollout: {steps: [50, 10, 100]}\n", "rollout.steps[1]: 10"},
		{"last step", "rollout: {steps: [10, 50]}\n", "rollout.steps: [10 50]: the last step must be 100"},
		{"soak", "rollout: {soak: soon}\n", `"soon" is not a duration`},
		{"budget", "rollout: {failureBudget: -1}\n", "rollout.failureBudget"},
		{"gate type", "rollout: {gates: [{name: a, type: ping}]}\n", `rollout.gates[0].type: "ping"`},
		{"gate block", "rollout: {gates: [{name: a, type: http}]}\n", "rollout.gates[0].http: missing"},
		{"gate name twice", "rollout: {gates: [{name: a, type: http, http: {url: 'http://x'}}, {name: a, type: http, http: {url: 'http://x'}}]}\n", `rollout.gates[1].name: "a" used twice`},
		{"ratio", "rollout: {gates: [{name: a, type: http, http: {url: 'http://x', minSuccessRatio: 2}}]}\n", "rollout.gates[0].http.minSuccessRatio"},
		{"prometheus threshold", "rollout: {gates: [{name: p, type: prometheus, prometheus: {address: 'http://p:9090', query: up}}]}\n", "rollout.gates[0].prometheus: needs max or min"},
		{"kubernetes namespaces", "rollout: {gates: [{name: k, type: kubernetes, kubernetes: {selector: 'a in (b'}}]}\n", "rollout.gates[0].kubernetes.namespaces: missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("ferry.yaml", []byte(tc.yaml))
			if err == nil || !badinput.Is(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseConfig(%q) = %v, want a bad-input error naming %q", tc.yaml, err, tc.want)
			}
		})
	}
}

const rolloutYAML = `
traffic:
  type: route53
  route53:
    hostedZoneID: Z123
    recordName: app.example.com.
    recordType: A
    blue: {setIdentifier: blue, values: [192.0.2.10]}
    green: {setIdentifier: green, aliasTarget: {hostedZoneID: Z2, dnsName: lb.example.com.}}
rollout:
  steps: [25, 100]
  soak: 2m
  failureBudget: 0
  gates:
  - {name: front, type: http, http: {url: "https://app.example.com/healthz", maxLatencyP99: 300ms}}
  - {name: errors, type: prometheus, prometheus: {address: "http://prometheus:9090", query: "sum(rate(errors[1m]))", max: 0.5}}
  - {name: green, type: kubernetes, kubernetes: {context: green, namespaces: [kubeflow]}}
`

func TestRolloutParsesDefaultsAndRoundTrips(t *testing.T) {
	cfg, err := ParseConfig("ferry.yaml", []byte(rolloutYAML))
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Rollout.WithDefaults()
	if r.Soak.D() != 2*time.Minute || r.Interval.D() != DefaultInterval || *r.FailureBudget != 0 || len(r.Steps) != 2 {
		t.Fatalf("rollout with defaults: %+v", r)
	}
	if h := r.Gates[0].HTTP; h.MinSuccessRatio != 0.99 || h.Requests != 10 || h.MaxLatencyP99.D() != 300*time.Millisecond {
		t.Fatalf("http gate with defaults: %+v", h)
	}
	if d := (Rollout{}).WithDefaults(); *d.FailureBudget != 2 || d.Soak.D() != time.Minute || len(d.Steps) != 3 {
		t.Fatalf("empty rollout with defaults: %+v", d)
	}
	// The plan stores the configuration as JSON: durations stay readable and come back equal.
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"soak":"2m0s"`) {
		t.Fatalf("JSON %s: want the soak as a duration string", data)
	}
	var back Config
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.Rollout.Soak != cfg.Rollout.Soak || back.Traffic.Route53.Green.AliasTarget.DNSName != "lb.example.com." {
		t.Fatalf("round trip: %+v", back.Rollout)
	}
}

func TestMergeTakesTrafficAndRolloutFromOver(t *testing.T) {
	base := Config{Traffic: &Traffic{Type: TrafficExec, Exec: &ExecTraffic{Command: []string{"a"}}}, Rollout: &Rollout{Steps: []int{100}}}
	over := Config{Traffic: &Traffic{Type: TrafficWebhook, Webhook: &WebhookTraffic{URL: "http://127.0.0.1:1"}}}
	m := base.Merge(over)
	if m.Traffic.Type != TrafficWebhook || m.Rollout == nil || m.Rollout.Steps[0] != 100 {
		t.Fatalf("merged: %+v %+v", m.Traffic, m.Rollout)
	}
}
