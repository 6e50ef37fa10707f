package integration

import (
	"context"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/route53"
	r53types "github.com/aws/aws-sdk-go-v2/service/route53/types"
	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/migrate/gates"
	"github.com/ferrykube/ferry/migrate/traffic"
	"github.com/ferrykube/ferry/plans/config"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// colorServer answers its color, or 503 while failing is set: blue's or green's HTTP endpoint.
func colorServer(t testing.TB, color string, failing *atomic.Bool) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing != nil && failing.Load() {
			http.Error(w, color+" is failing", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, color)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// trafficClient sends requests to url from two goroutines, each pausing trafficPause between its
// requests, as users would, and counts the answers under the phase in force when each request
// started. Without the pause the client and HAProxy took a whole core of the machine's two, and
// every other test step ran at half speed.
type trafficClient struct {
	phase  atomic.Value // string
	mu     sync.Mutex
	counts map[string]map[string]int // phase → answer → requests
	failed []string
}

func startTrafficClient(t *testing.T, url string) *trafficClient {
	c := &trafficClient{counts: map[string]map[string]int{}}
	c.phase.Store("before")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	client := &http.Client{Timeout: 10 * time.Second}
	for range 2 {
		wg.Go(func() {
			for ctx.Err() == nil {
				phase := c.phase.Load().(string)
				answer, failure := "", ""
				resp, err := client.Get(url)
				if err == nil {
					body, rerr := io.ReadAll(resp.Body)
					resp.Body.Close()
					answer = string(body)
					if rerr != nil || resp.StatusCode != http.StatusOK {
						failure = resp.Status + " " + answer
					}
				} else if ctx.Err() == nil {
					failure = err.Error()
				}
				if ctx.Err() != nil && failure == "" && answer == "" {
					return
				}
				c.mu.Lock()
				if failure != "" {
					c.failed = append(c.failed, phase+": "+failure)
				} else {
					if c.counts[phase] == nil {
						c.counts[phase] = map[string]int{}
					}
					c.counts[phase][answer]++
				}
				c.mu.Unlock()
				select {
				case <-ctx.Done():
				case <-time.After(trafficPause):
				}
			}
		})
	}
	return c
}

// trafficPause keeps the client near 400 requests a second: every switch of the traffic still meets
// hundreds of requests.
const trafficPause = 5 * time.Millisecond

// share waits until n requests of phase were answered and returns green's share in percent.
func (c *trafficClient) share(t *testing.T, phase string, n int) float64 {
	t.Helper()
	var share float64
	waitUntil(t, "requests in phase "+phase, 60*time.Second, func(context.Context) (bool, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		got := c.counts[phase]
		total := got["blue"] + got["green"]
		share = 100 * float64(got["green"]) / float64(max(total, 1))
		return total >= n, nil
	})
	return share
}

func TestTrafficHAProxyShiftsWithoutFailedRequests(t *testing.T) {
	bed := testbed.Require(t, tb)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	blue, green := colorServer(t, "blue", nil), colorServer(t, "green", nil)
	h, err := bed.StartHAProxy(ctx, "shift", blue.Listener.Addr().String(), green.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Stop() }) // after later cleanups, which may roll back through it
	sw, err := traffic.New(ctx, config.Traffic{Type: config.TrafficHAProxy, HAProxy: &config.HAProxyTraffic{
		Address: h.Socket, Backend: h.Backend, BlueServer: h.BlueServer, GreenServer: h.GreenServer}}, traffic.Options{PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.Preflight(ctx); err != nil {
		t.Fatal(err)
	}
	saved, err := sw.Save(ctx)
	if err != nil {
		t.Fatal(err)
	}
	client := startTrafficClient(t, h.URL)
	if share := client.share(t, "before", 200); share != 0 {
		t.Fatalf("before the shift green took %.1f%% of the requests, want none", share)
	}
	for _, step := range []struct {
		green    int
		min, max float64
	}{{10, 5, 15}, {50, 40, 60}, {100, 100, 100}} {
		start := time.Now()
		if err := sw.Apply(ctx, traffic.Green(step.green)); err != nil {
			t.Fatal(err)
		}
		if err := sw.WaitSettled(ctx, traffic.Green(step.green)); err != nil {
			t.Fatal(err)
		}
		settled := time.Since(start)
		phase := traffic.Green(step.green).String()
		client.phase.Store(phase)
		share := client.share(t, phase, 400)
		t.Logf("%s: settled in %s, green answered %.1f%% of 400 requests", phase, settled.Round(time.Millisecond), share)
		if share < step.min || share > step.max {
			t.Errorf("%s: green answered %.1f%% of the requests, want %.0f–%.0f%%", phase, share, step.min, step.max)
		}
		if got, err := sw.Current(ctx); err != nil || got != traffic.Green(step.green) {
			t.Errorf("Current = %v, %v; want %v", got, err, traffic.Green(step.green))
		}
	}
	if err := sw.Restore(ctx, saved); err != nil {
		t.Fatal(err)
	}
	client.phase.Store("restored")
	if share := client.share(t, "restored", 200); share != 0 {
		t.Errorf("after Restore green took %.1f%% of the requests, want none", share)
	}
	state, err := h.Command(ctx, "show servers state "+h.Backend)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("servers after Restore:\n%s", state)
	client.mu.Lock()
	defer client.mu.Unlock()
	total := 0
	for _, c := range client.counts {
		total += c["blue"] + c["green"]
	}
	if len(client.failed) > 0 {
		t.Fatalf("%d of %d requests failed during the shift, want none; first: %s", len(client.failed), total+len(client.failed), client.failed[0])
	}
	t.Logf("%d requests, none failed", total)
}

func TestTrafficHTTPGateFailsWithinTheBudget(t *testing.T) {
	bed := testbed.Require(t, tb)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var failing atomic.Bool
	blue, green := colorServer(t, "blue", nil), colorServer(t, "green", &failing)
	h, err := bed.StartHAProxy(ctx, "gate", blue.Listener.Addr().String(), green.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Stop() }) // after later cleanups, which may roll back through it
	// The gate probes green itself, and the front once green takes all the traffic.
	var gs []gates.Gate
	for name, url := range map[string]string{"green": green.URL, "front": h.URL} {
		g, err := gates.New(config.Gate{Name: name, Type: config.GateHTTP, HTTP: &config.HTTPGate{URL: url, Requests: 20,
			MaxLatencyP99: config.Duration(time.Second)}}, gates.Options{})
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, g)
	}
	sw, err := traffic.New(ctx, config.Traffic{Type: config.TrafficHAProxy, HAProxy: &config.HAProxyTraffic{
		Address: h.Socket, Backend: h.Backend, BlueServer: h.BlueServer, GreenServer: h.GreenServer}}, traffic.Options{PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.Apply(ctx, traffic.Green(100)); err != nil {
		t.Fatal(err)
	}
	if err := sw.WaitSettled(ctx, traffic.Green(100)); err != nil {
		t.Fatal(err)
	}
	const interval, budget = 500 * time.Millisecond, 2
	v := gates.Evaluate(ctx, gs, 2*time.Second, interval, budget)
	if !v.Passed || len(v.Measurements) != 10 {
		t.Fatalf("healthy green: %+v, want passed after 5 rounds of 2 gates", v)
	}
	t.Logf("healthy: %s", v.Reason)

	failing.Store(true)
	start := time.Now()
	v = gates.Evaluate(ctx, gs, time.Minute, interval, budget)
	took := time.Since(start)
	if !v.Failed || !strings.Contains(v.Reason, "503") {
		t.Fatalf("green answering 503: %+v, want failed naming the status", v)
	}
	// Two gates fail each round: the budget of 2 holds through the first round, the second ends it.
	if len(v.Measurements) != 4 || took < interval {
		t.Errorf("failed after %d measurements in %s; want the budget spent first: 4 measurements, one interval", len(v.Measurements), took)
	}
	if limit := interval * (budget + 1); took > limit {
		t.Errorf("the gate failed after %s, want within interval × (budget+1) = %s", took, limit)
	}
	t.Logf("failing: failed after %s: %s", took.Round(time.Millisecond), v.Reason)
}

var httpRoutes = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "httproutes"}

// TestTrafficGatewayAPISettlesWhenAccepted changes an HTTPRoute's weights on green's API server
// with the Gateway API CRDs installed. No gateway controller runs on the testbed, so the test
// plays one: it accepts each generation of the route after a delay, and the switcher must wait
// for that.
func TestTrafficGatewayAPISettlesWhenAccepted(t *testing.T) {
	c, kc := clients(t, "green")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api").Output()
	if err != nil {
		t.Fatalf("find the gateway-api module: %v", err)
	}
	crd := filepath.Join(strings.TrimSpace(string(dir)), "config", "crd", "standard", "gateway.networking.k8s.io_httproutes.yaml")
	if err := c.Apply(ctx, io.Discard, crd); err != nil {
		t.Fatal(err)
	}
	_, dc, err := c.Clients()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Other tests compare what green serves: take the CRD away again.
		ax := "httproutes.gateway.networking.k8s.io"
		dc.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).Delete(context.Background(), ax, metav1.DeleteOptions{})
	})
	ns := "front-" + time.Now().Format("150405")
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	removeAfter(t, ns, kc)
	route := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
		"metadata": map[string]any{"name": "app", "namespace": ns},
		"spec": map[string]any{
			"parentRefs": []any{map[string]any{"name": "front"}},
			"rules": []any{
				map[string]any{"backendRefs": []any{
					map[string]any{"name": "app-blue", "port": int64(80), "weight": int64(1)},
					map[string]any{"name": "app-green", "port": int64(80), "weight": int64(0)},
				}},
				// A rule of blue alone is left as it is (weight 1, the API server's default).
				map[string]any{"matches": []any{map[string]any{"path": map[string]any{"type": "PathPrefix", "value": "/admin"}}},
					"backendRefs": []any{map[string]any{"name": "app-blue", "port": int64(80)}}},
			},
		},
	}}
	routes := dc.Resource(httpRoutes).Namespace(ns)
	if _, err := routes.Create(ctx, route, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The stand-in controller: accepts every new generation 300 ms after it appears.
	const delay = 300 * time.Millisecond
	ctrlCtx, stopCtrl := context.WithCancel(ctx)
	var ctrl sync.WaitGroup
	ctrl.Go(func() {
		for ctrlCtx.Err() == nil {
			r, err := routes.Get(ctrlCtx, "app", metav1.GetOptions{})
			if err == nil && acceptedGeneration(r) != r.GetGeneration() {
				time.Sleep(delay)
				unstructured.SetNestedSlice(r.Object, []any{map[string]any{
					"parentRef": map[string]any{"name": "front"}, "controllerName": "ferry.dev/test-controller",
					"conditions": []any{map[string]any{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
						"observedGeneration": r.GetGeneration(), "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}},
				}}, "status", "parents")
				routes.UpdateStatus(ctrlCtx, r, metav1.UpdateOptions{})
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	defer func() { stopCtrl(); ctrl.Wait() }()

	sw, err := traffic.New(ctx, config.Traffic{Type: config.TrafficGatewayAPI, GatewayAPI: &config.GatewayAPITraffic{
		Context: "green", Namespace: ns, Route: "app",
		BlueBackend: config.GatewayBackend{Name: "app-blue", Port: 80}, GreenBackend: config.GatewayBackend{Name: "app-green"}}},
		traffic.Options{PollInterval: 50 * time.Millisecond, RESTConfig: func(string) (*rest.Config, error) { return c.RESTConfig() }})
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.Preflight(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := sw.Current(ctx); err != nil || got != traffic.Green(0) {
		t.Fatalf("Current = %v, %v; want all on blue", got, err)
	}
	saved, err := sw.Save(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, green := range []int{10, 50, 100} {
		start := time.Now()
		if err := sw.Apply(ctx, traffic.Green(green)); err != nil {
			t.Fatal(err)
		}
		if err := sw.WaitSettled(ctx, traffic.Green(green)); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		r, err := routes.Get(ctx, "app", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		weights := routeWeights(r)
		if weights != [3]int64{int64(100 - green), int64(green), 1} || acceptedGeneration(r) != r.GetGeneration() || took < delay {
			t.Errorf("%d%% green: weights %v (want blue, green, and the blue-only rule untouched), accepted generation %d of %d, settled in %s (controller takes %s)",
				green, weights, acceptedGeneration(r), r.GetGeneration(), took, delay)
		}
	}
	if err := sw.Restore(ctx, saved); err != nil {
		t.Fatal(err)
	}
	r, err := routes.Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if w := routeWeights(r); w != [3]int64{1, 0, 1} || acceptedGeneration(r) != r.GetGeneration() {
		t.Fatalf("after Restore: weights %v at generation %d, accepted %d; want 1, 0 as saved and accepted", w, r.GetGeneration(), acceptedGeneration(r))
	}
}

// routeWeights are the first rule's two weights and the second rule's (-1 when unset).
func routeWeights(r *unstructured.Unstructured) [3]int64 {
	out := [3]int64{-1, -1, -1}
	rules, _, _ := unstructured.NestedSlice(r.Object, "spec", "rules")
	i := 0
	for _, rule := range rules {
		refs, _, _ := unstructured.NestedSlice(rule.(map[string]any), "backendRefs")
		for _, ref := range refs {
			if w, ok, _ := unstructured.NestedInt64(ref.(map[string]any), "weight"); ok && i < 3 {
				out[i] = w
			}
			i++
		}
	}
	return out
}

func acceptedGeneration(r *unstructured.Unstructured) int64 {
	parents, _, _ := unstructured.NestedSlice(r.Object, "status", "parents")
	for _, p := range parents {
		conds, _, _ := unstructured.NestedSlice(p.(map[string]any), "conditions")
		for _, c := range conds {
			cm := c.(map[string]any)
			if cm["type"] == "Accepted" && cm["status"] == "True" {
				g, _, _ := unstructured.NestedInt64(cm, "observedGeneration")
				return g
			}
		}
	}
	return -1
}

// TestTrafficRoute53AgainstMoto runs the Route 53 switcher against moto_server, an independent
// implementation of Route 53's API, when it is installed.
func TestTrafficRoute53AgainstMoto(t *testing.T) {
	bin, err := exec.LookPath("moto_server")
	if err != nil {
		t.Skip("moto_server is not installed (pip install 'moto[server]'): the Route 53 switcher is tested against the fake in migrate/traffic only")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	moto := exec.Command(bin, "-H", "127.0.0.1", "-p", strconv.Itoa(port))
	var motoLog strings.Builder
	moto.Stdout, moto.Stderr = &motoLog, &motoLog
	if err := moto.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { moto.Process.Kill(); moto.Wait() }()
	endpoint := "http://127.0.0.1:" + strconv.Itoa(port)
	waitUntil(t, "moto_server answering", 60*time.Second, func(ctx context.Context) (bool, error) {
		resp, err := http.Get(endpoint + "/moto-api/")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil, nil
	})
	awsCfg := aws.Config{Region: "us-east-1", BaseEndpoint: aws.String(endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDFERRYTEST", "secret", "")}
	r53 := route53.NewFromConfig(awsCfg)
	zone, err := r53.CreateHostedZone(ctx, &route53.CreateHostedZoneInput{Name: aws.String("example.com."), CallerReference: aws.String("ferry-test")})
	if err != nil {
		t.Fatalf("create a hosted zone in moto: %v\n%s", err, motoLog.String())
	}
	zoneID := strings.TrimPrefix(aws.ToString(zone.HostedZone.Id), "/hostedzone/")
	simple := r53types.ResourceRecordSet{Name: aws.String("app.example.com."), Type: r53types.RRTypeA, TTL: aws.Int64(1),
		ResourceRecords: []r53types.ResourceRecord{{Value: aws.String("192.0.2.10")}}}
	if _, err := r53.ChangeResourceRecordSets(ctx, &route53.ChangeResourceRecordSetsInput{HostedZoneId: aws.String(zoneID),
		ChangeBatch: &r53types.ChangeBatch{Changes: []r53types.Change{{Action: r53types.ChangeActionCreate, ResourceRecordSet: &simple}}}}); err != nil {
		t.Fatal(err)
	}

	sw, err := traffic.New(ctx, config.Traffic{Type: config.TrafficRoute53, Route53: &config.Route53Traffic{HostedZoneID: zoneID,
		RecordName: "app.example.com", RecordType: "A",
		Blue:  config.Route53Target{SetIdentifier: "blue", Values: []string{"192.0.2.10"}},
		Green: config.Route53Target{SetIdentifier: "green", Values: []string{"198.51.100.20"}}}},
		traffic.Options{AWSConfig: &awsCfg, PollInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.Preflight(ctx); err != nil {
		t.Fatal(err)
	}
	saved, err := sw.Save(ctx)
	if err != nil {
		t.Fatal(err)
	}
	records := func() map[string]string {
		out, err := r53.ListResourceRecordSets(ctx, &route53.ListResourceRecordSetsInput{HostedZoneId: aws.String(zoneID)})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, r := range out.ResourceRecordSets {
			if r.Type != r53types.RRTypeA {
				continue
			}
			w := "simple"
			if r.Weight != nil {
				w = strconv.FormatInt(*r.Weight, 10)
			}
			got[aws.ToString(r.SetIdentifier)] = w + " " + aws.ToString(r.ResourceRecords[0].Value)
		}
		return got
	}
	for _, green := range []int{10, 50, 100} {
		if err := sw.Apply(ctx, traffic.Green(green)); err != nil {
			t.Fatal(err)
		}
		if err := sw.WaitSettled(ctx, traffic.Green(green)); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"blue": strconv.Itoa(100-green) + " 192.0.2.10", "green": strconv.Itoa(green) + " 198.51.100.20"}
		if got := records(); !maps.Equal(got, want) {
			t.Errorf("%d%% green: moto holds %v, want %v", green, got, want)
		}
	}
	if err := sw.Restore(ctx, saved); err != nil {
		t.Fatal(err)
	}
	if got, want := records(), map[string]string{"": "simple 192.0.2.10"}; !maps.Equal(got, want) {
		t.Fatalf("after Restore moto holds %v, want the simple record back: %v", got, want)
	}
}

// TestTrafficKubernetesGateOnGreen measures the readiness of a Deployment on green's API server:
// ready once kwok runs its pods, failed once a rollout cannot schedule its new pods.
func TestTrafficKubernetesGateOnGreen(t *testing.T) {
	c, kc := clients(t, "green")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := "gate-" + time.Now().Format("150405")
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	removeAfter(t, ns, kc)
	two := int32(2)
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: labels}, Spec: appsv1.DeploymentSpec{
		Replicas: &two, Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web"}}}},
	}}
	if _, err := kc.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	g, err := gates.New(config.Gate{Name: "green-workloads", Type: config.GateKubernetes, Kubernetes: &config.KubernetesGate{Context: "green", Namespaces: []string{ns}}},
		gates.Options{RESTConfig: func(name string) (*rest.Config, error) {
			if name != "green" {
				t.Errorf("the gate asked for context %q", name)
			}
			return c.RESTConfig()
		}})
	if err != nil {
		t.Fatal(err)
	}
	var m gates.Measurement
	waitUntil(t, "the gate to pass once web's pods run", 60*time.Second, func(ctx context.Context) (bool, error) {
		m = g.Measure(ctx)
		return m.OK, nil
	})
	t.Logf("ready: %s", m.Detail)
	// A new template whose pods fit no node: the rollout stalls and the gate must say so.
	patch := []byte(`{"spec":{"template":{"spec":{"nodeSelector":{"ferry.dev/no-such-node":"true"}}}}}`)
	if _, err := kc.AppsV1().Deployments(ns).Patch(ctx, "web", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The stalled state is one new pod that cannot run (1/2 updated); on the way there the gate
	// fails too, for the moment the controller has not made the new pod (0/2 updated).
	stalled := "deployment " + ns + "/web (1/2 updated"
	waitUntil(t, "the gate to fail naming web's stalled rollout", 60*time.Second, func(ctx context.Context) (bool, error) {
		m = g.Measure(ctx)
		return !m.OK && !m.Inconclusive && strings.Contains(m.Detail, stalled), nil
	})
	t.Logf("stalled: %s", m.Detail)
}
