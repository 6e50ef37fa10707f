package config

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/labels"
)

// Traffic says how ferry moves request traffic from blue to green: one switcher, chosen by Type,
// configured by the block of the same name.
type Traffic struct {
	Type       string             `yaml:"type" json:"type"` // haproxy, route53, gateway-api, exec or webhook
	HAProxy    *HAProxyTraffic    `yaml:"haproxy,omitempty" json:"haproxy,omitempty"`
	Route53    *Route53Traffic    `yaml:"route53,omitempty" json:"route53,omitempty"`
	GatewayAPI *GatewayAPITraffic `yaml:"gatewayAPI,omitempty" json:"gatewayAPI,omitempty"`
	Exec       *ExecTraffic       `yaml:"exec,omitempty" json:"exec,omitempty"`
	Webhook    *WebhookTraffic    `yaml:"webhook,omitempty" json:"webhook,omitempty"`
}

// Traffic switcher types.
const (
	TrafficHAProxy    = "haproxy"
	TrafficRoute53    = "route53"
	TrafficGatewayAPI = "gateway-api"
	TrafficExec       = "exec"
	TrafficWebhook    = "webhook"
)

// HAProxyTraffic shifts traffic with the weights of two servers of one backend, through HAProxy's
// runtime API (a `stats socket ... level admin`).
type HAProxyTraffic struct {
	// Address is the runtime API: a unix socket's path, or host:port.
	Address     string `yaml:"address" json:"address"`
	Backend     string `yaml:"backend" json:"backend"`
	BlueServer  string `yaml:"blueServer" json:"blueServer"`
	GreenServer string `yaml:"greenServer" json:"greenServer"`
}

// Route53Traffic shifts traffic with two weighted record sets of one name and type.
type Route53Traffic struct {
	HostedZoneID string `yaml:"hostedZoneID" json:"hostedZoneID"`
	RecordName   string `yaml:"recordName" json:"recordName"`
	RecordType   string `yaml:"recordType" json:"recordType"` // A, AAAA, CNAME...
	// TTL of the weighted records (default: the simple record's when converting it, else 60).
	TTL   int64         `yaml:"ttl,omitempty" json:"ttl,omitempty"`
	Blue  Route53Target `yaml:"blue" json:"blue"`
	Green Route53Target `yaml:"green" json:"green"`
	// Region and Profile select AWS credentials; they come from the standard chain otherwise.
	Region  string `yaml:"region,omitempty" json:"region,omitempty"`
	Profile string `yaml:"profile,omitempty" json:"profile,omitempty"`
}

// Route53Target is one side's weighted record: values, or an alias.
type Route53Target struct {
	SetIdentifier string        `yaml:"setIdentifier" json:"setIdentifier"`
	Values        []string      `yaml:"values,omitempty" json:"values,omitempty"`
	AliasTarget   *Route53Alias `yaml:"aliasTarget,omitempty" json:"aliasTarget,omitempty"`
}

// Route53Alias points a record at an AWS resource (a load balancer) instead of values.
type Route53Alias struct {
	HostedZoneID         string `yaml:"hostedZoneID" json:"hostedZoneID"`
	DNSName              string `yaml:"dnsName" json:"dnsName"`
	EvaluateTargetHealth bool   `yaml:"evaluateTargetHealth,omitempty" json:"evaluateTargetHealth,omitempty"`
}

// GatewayAPITraffic shifts traffic with the weights of two backendRefs of an HTTPRoute in a front
// cluster.
type GatewayAPITraffic struct {
	// Context is the kubeconfig context of the cluster holding the route.
	Context      string         `yaml:"context" json:"context"`
	Namespace    string         `yaml:"namespace" json:"namespace"`
	Route        string         `yaml:"route" json:"route"`
	BlueBackend  GatewayBackend `yaml:"blueBackend" json:"blueBackend"`
	GreenBackend GatewayBackend `yaml:"greenBackend" json:"greenBackend"`
}

// GatewayBackend names a backendRef of the route; Port, when set, must match too.
type GatewayBackend struct {
	Name string `yaml:"name" json:"name"`
	Port int    `yaml:"port,omitempty" json:"port,omitempty"`
}

// ExecTraffic runs a command with the split in FERRY_BLUE_WEIGHT and FERRY_GREEN_WEIGHT and as one
// JSON line on stdin.
type ExecTraffic struct {
	Command []string `yaml:"command" json:"command"`
}

// WebhookTraffic POSTs {"blue":N,"green":M} to URL and expects a 2xx answer.
type WebhookTraffic struct {
	URL string `yaml:"url" json:"url"`
	// Headers are sent with each request. Their values are given by reference (SecretValue):
	// they are often credentials, and ferry.yaml is stored with every backup and run.
	Headers map[string]SecretValue `yaml:"headers,omitempty" json:"headers,omitempty"`
}

// Rollout says how traffic moves: the steps, how long each is watched, and the gates that decide.
type Rollout struct {
	// Steps are percents of traffic on green, rising, ending at 100 (default 10, 50, 100).
	Steps []int `yaml:"steps,omitempty" json:"steps,omitempty"`
	// Soak is how long each step lasts before the next, watched by the gates when there are any
	// (default 1m); Interval the time between measurements (default 10s).
	Soak     Duration `yaml:"soak,omitempty" json:"soak,omitempty"`
	Interval Duration `yaml:"interval,omitempty" json:"interval,omitempty"`
	// FailureBudget is how many failed measurements a step tolerates (default 2).
	FailureBudget *int   `yaml:"failureBudget,omitempty" json:"failureBudget,omitempty"`
	Gates         []Gate `yaml:"gates,omitempty" json:"gates,omitempty"`
}

// Rollout defaults; the steps are 10, 50 and 100 %.
const (
	DefaultSoak          = time.Minute
	DefaultInterval      = 10 * time.Second
	DefaultFailureBudget = 2
)

// WithDefaults fills the fields left empty, gates' included.
func (r Rollout) WithDefaults() Rollout {
	if len(r.Steps) == 0 {
		r.Steps = []int{10, 50, 100}
	}
	if r.Soak == 0 {
		r.Soak = Duration(DefaultSoak)
	}
	if r.Interval == 0 {
		r.Interval = Duration(DefaultInterval)
	}
	if r.FailureBudget == nil {
		b := DefaultFailureBudget
		r.FailureBudget = &b
	}
	gates := make([]Gate, len(r.Gates))
	for i, g := range r.Gates {
		gates[i] = g.WithDefaults()
	}
	r.Gates = gates
	return r
}

// Gate is a health check that decides whether a traffic step may go on.
type Gate struct {
	Name       string          `yaml:"name" json:"name"`
	Type       string          `yaml:"type" json:"type"` // http, prometheus or kubernetes
	HTTP       *HTTPGate       `yaml:"http,omitempty" json:"http,omitempty"`
	Prometheus *PrometheusGate `yaml:"prometheus,omitempty" json:"prometheus,omitempty"`
	Kubernetes *KubernetesGate `yaml:"kubernetes,omitempty" json:"kubernetes,omitempty"`
}

// Gate types.
const (
	GateHTTP       = "http"
	GatePrometheus = "prometheus"
	GateKubernetes = "kubernetes"
)

// HTTPGate sends Requests GETs to URL per measurement; it passes when at least MinSuccessRatio of
// them answer with an expected status and, when MaxLatencyP99 is set, their p99 latency is below it.
type HTTPGate struct {
	URL string `yaml:"url" json:"url"`
	// ExpectStatus lists the accepted status codes (default any 2xx or 3xx).
	ExpectStatus    []int    `yaml:"expectStatus,omitempty" json:"expectStatus,omitempty"`
	MinSuccessRatio float64  `yaml:"minSuccessRatio,omitempty" json:"minSuccessRatio,omitempty"` // default 0.99
	MaxLatencyP99   Duration `yaml:"maxLatencyP99,omitempty" json:"maxLatencyP99,omitempty"`
	Requests        int      `yaml:"requests,omitempty" json:"requests,omitempty"` // default 10
	Timeout         Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`   // per request, default 5s
}

// PrometheusGate runs an instant query; every sample must lie within Min and Max.
type PrometheusGate struct {
	Address string   `yaml:"address" json:"address"`
	Query   string   `yaml:"query" json:"query"`
	Max     *float64 `yaml:"max,omitempty" json:"max,omitempty"`
	Min     *float64 `yaml:"min,omitempty" json:"min,omitempty"`
}

// KubernetesGate passes when every Deployment and StatefulSet it selects is ready.
type KubernetesGate struct {
	// Context is the kubeconfig context of the cluster (usually green's).
	Context    string   `yaml:"context,omitempty" json:"context,omitempty"`
	Namespaces []string `yaml:"namespaces" json:"namespaces"`
	Selector   string   `yaml:"selector,omitempty" json:"selector,omitempty"`
}

// WithDefaults fills the gate's empty fields.
func (g Gate) WithDefaults() Gate {
	if g.HTTP != nil {
		h := *g.HTTP
		if h.MinSuccessRatio == 0 {
			h.MinSuccessRatio = 0.99
		}
		if h.Requests == 0 {
			h.Requests = 10
		}
		if h.Timeout == 0 {
			h.Timeout = Duration(5 * time.Second)
		}
		g.HTTP = &h
	}
	return g
}

// Duration is a time.Duration written as "1m30s" in ferry.yaml and JSON.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as a string such as "1m0s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a string such as "90s".
func (d *Duration) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("duration: want a string such as \"30s\" or \"2m\": %w", err)
	}
	return d.parse(s)
}

// MarshalYAML writes d as a string such as "1m0s".
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// UnmarshalYAML reads a string such as "90s".
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a duration such as 30s or 2m", n.Line)
	}
	if err := d.parse(n.Value); err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	return nil
}

func (d *Duration) parse(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration such as 30s or 2m", s)
	}
	*d = Duration(v)
	return nil
}

// validate reports each wrong field of the traffic block through bad.
func (t *Traffic) validate(bad func(field, format string, args ...any)) {
	blocks := map[string]bool{TrafficHAProxy: t.HAProxy != nil, TrafficRoute53: t.Route53 != nil, TrafficGatewayAPI: t.GatewayAPI != nil,
		TrafficExec: t.Exec != nil, TrafficWebhook: t.Webhook != nil}
	field := map[string]string{TrafficHAProxy: "traffic.haproxy", TrafficRoute53: "traffic.route53", TrafficGatewayAPI: "traffic.gatewayAPI",
		TrafficExec: "traffic.exec", TrafficWebhook: "traffic.webhook"}
	if _, ok := blocks[t.Type]; !ok {
		bad("traffic.type", "%q: want haproxy, route53, gateway-api, exec or webhook", t.Type)
		return
	}
	if !blocks[t.Type] {
		bad(field[t.Type], "missing: traffic.type %s needs it", t.Type)
		return
	}
	for _, typ := range []string{TrafficHAProxy, TrafficRoute53, TrafficGatewayAPI, TrafficExec, TrafficWebhook} {
		if typ != t.Type && blocks[typ] {
			bad(field[typ], "set, but traffic.type is %s", t.Type)
		}
	}
	missing := func(f, v string) {
		if strings.TrimSpace(v) == "" {
			bad(f, "missing")
		}
	}
	switch t.Type {
	case TrafficHAProxy:
		h := t.HAProxy
		missing("traffic.haproxy.address", h.Address)
		missing("traffic.haproxy.backend", h.Backend)
		missing("traffic.haproxy.blueServer", h.BlueServer)
		missing("traffic.haproxy.greenServer", h.GreenServer)
		if h.BlueServer != "" && h.BlueServer == h.GreenServer {
			bad("traffic.haproxy.greenServer", "%q is blueServer too", h.GreenServer)
		}
	case TrafficRoute53:
		r := t.Route53
		missing("traffic.route53.hostedZoneID", r.HostedZoneID)
		missing("traffic.route53.recordName", r.RecordName)
		missing("traffic.route53.recordType", r.RecordType)
		if r.TTL < 0 {
			bad("traffic.route53.ttl", "%d: must not be negative", r.TTL)
		}
		for _, side := range []struct {
			name   string
			target Route53Target
		}{{"blue", r.Blue}, {"green", r.Green}} {
			f, target := "traffic.route53."+side.name, side.target
			missing(f+".setIdentifier", target.SetIdentifier)
			switch {
			case len(target.Values) == 0 && target.AliasTarget == nil:
				bad(f, "needs values or an aliasTarget")
			case len(target.Values) > 0 && target.AliasTarget != nil:
				bad(f, "has both values and an aliasTarget: want one")
			case target.AliasTarget != nil:
				missing(f+".aliasTarget.hostedZoneID", target.AliasTarget.HostedZoneID)
				missing(f+".aliasTarget.dnsName", target.AliasTarget.DNSName)
			}
		}
		if r.Blue.SetIdentifier != "" && r.Blue.SetIdentifier == r.Green.SetIdentifier {
			bad("traffic.route53.green.setIdentifier", "%q is blue's too", r.Green.SetIdentifier)
		}
	case TrafficGatewayAPI:
		g := t.GatewayAPI
		if !dnsLabel.MatchString(g.Namespace) {
			bad("traffic.gatewayAPI.namespace", "%q is not a namespace name", g.Namespace)
		}
		missing("traffic.gatewayAPI.route", g.Route)
		for _, side := range []struct {
			name string
			b    GatewayBackend
		}{{"blueBackend", g.BlueBackend}, {"greenBackend", g.GreenBackend}} {
			missing("traffic.gatewayAPI."+side.name+".name", side.b.Name)
			if side.b.Port < 0 || side.b.Port > 65535 {
				bad("traffic.gatewayAPI."+side.name+".port", "%d: want a port from 1 to 65535", side.b.Port)
			}
		}
		if g.BlueBackend.Name != "" && g.BlueBackend == g.GreenBackend {
			bad("traffic.gatewayAPI.greenBackend", "same as blueBackend")
		}
	case TrafficExec:
		if len(t.Exec.Command) == 0 || t.Exec.Command[0] == "" {
			bad("traffic.exec.command", "missing")
		}
		if i, what, found := credentialIn(t.Exec.Command); found {
			bad(fmt.Sprintf("traffic.exec.command[%d]", i), "holds %s, which would be stored in plaintext with every backup and run: let the command read it from its environment (ferry passes its own on), e.g. $TOKEN in a script", what)
		}
	case TrafficWebhook:
		checkURL(bad, "traffic.webhook.url", t.Webhook.URL)
		names := make([]string, 0, len(t.Webhook.Headers))
		for k := range t.Webhook.Headers {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			f := "traffic.webhook.headers." + k
			if !headerName.MatchString(k) {
				bad(f, "%q is not an HTTP header's name", k)
			}
			t.Webhook.Headers[k].validate(f, bad)
		}
	}
}

// headerName is an HTTP header field name (RFC 9110's token).
var headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// checkURL reports a URL that is not http or https, or that carries a password: ferry.yaml is
// stored with every backup and run, so credentials go in headers, by reference. The message
// shows the URL only when it holds none.
func checkURL(bad func(field, format string, args ...any), field, raw string) {
	if what, found := urlCredential(raw); found {
		bad(field, "holds %s, which would be stored in plaintext with every backup and run: give credentials in a header by reference (traffic.webhook.headers) instead", what)
		return
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		if strings.Contains(raw, "@") {
			raw = "(not shown: it may hold credentials)"
		}
		bad(field, "%q: want an http or https URL", raw)
	}
}

// validate reports each wrong field of the rollout block through bad.
func (r *Rollout) validate(bad func(field, format string, args ...any)) {
	prev := 0
	for i, s := range r.Steps {
		if s <= prev || s > 100 {
			bad(fmt.Sprintf("rollout.steps[%d]", i), "%d: want rising percents from 1 to 100", s)
		}
		prev = s
	}
	if len(r.Steps) > 0 && r.Steps[len(r.Steps)-1] != 100 {
		bad("rollout.steps", "%v: the last step must be 100", r.Steps)
	}
	if r.Soak < 0 {
		bad("rollout.soak", "%s: must not be negative", r.Soak)
	}
	if r.Interval < 0 {
		bad("rollout.interval", "%s: must not be negative", r.Interval)
	}
	if r.FailureBudget != nil && *r.FailureBudget < 0 {
		bad("rollout.failureBudget", "%d: must not be negative", *r.FailureBudget)
	}
	names := map[string]bool{}
	for i, g := range r.Gates {
		f := fmt.Sprintf("rollout.gates[%d]", i)
		switch {
		case g.Name == "":
			bad(f+".name", "missing")
		case names[g.Name]:
			bad(f+".name", "%q used twice", g.Name)
		}
		names[g.Name] = true
		blocks := map[string]bool{GateHTTP: g.HTTP != nil, GatePrometheus: g.Prometheus != nil, GateKubernetes: g.Kubernetes != nil}
		if _, ok := blocks[g.Type]; !ok {
			bad(f+".type", "%q: want http, prometheus or kubernetes", g.Type)
			continue
		}
		if !blocks[g.Type] {
			bad(f+"."+g.Type, "missing: type %s needs it", g.Type)
			continue
		}
		for _, typ := range []string{GateHTTP, GatePrometheus, GateKubernetes} {
			if typ != g.Type && blocks[typ] {
				bad(f+"."+typ, "set, but type is %s", g.Type)
			}
		}
		switch g.Type {
		case GateHTTP:
			h := g.HTTP
			checkURL(bad, f+".http.url", h.URL)
			for j, code := range h.ExpectStatus {
				if code < 100 || code > 599 {
					bad(fmt.Sprintf("%s.http.expectStatus[%d]", f, j), "%d is not an HTTP status", code)
				}
			}
			if h.MinSuccessRatio < 0 || h.MinSuccessRatio > 1 {
				bad(f+".http.minSuccessRatio", "%v: want a ratio from 0 to 1", h.MinSuccessRatio)
			}
			if h.Requests < 0 {
				bad(f+".http.requests", "%d: must not be negative", h.Requests)
			}
			if h.MaxLatencyP99 < 0 || h.Timeout < 0 {
				bad(f+".http", "durations must not be negative")
			}
		case GatePrometheus:
			p := g.Prometheus
			checkURL(bad, f+".prometheus.address", p.Address)
			if strings.TrimSpace(p.Query) == "" {
				bad(f+".prometheus.query", "missing")
			}
			if p.Max == nil && p.Min == nil {
				bad(f+".prometheus", "needs max or min")
			}
			if p.Max != nil && p.Min != nil && *p.Min > *p.Max {
				bad(f+".prometheus.min", "%v is above max %v", *p.Min, *p.Max)
			}
		case GateKubernetes:
			k := g.Kubernetes
			if len(k.Namespaces) == 0 {
				bad(f+".kubernetes.namespaces", "missing")
			}
			for j, ns := range k.Namespaces {
				if !dnsLabel.MatchString(ns) {
					bad(fmt.Sprintf("%s.kubernetes.namespaces[%d]", f, j), "%q is not a namespace name", ns)
				}
			}
			if _, err := labels.Parse(k.Selector); err != nil {
				bad(f+".kubernetes.selector", "%v", err)
			}
		}
	}
}
