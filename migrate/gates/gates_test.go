package gates

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrykube/ferry/plans/config"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

// scripted is a gate whose measurements follow a script: 'o' passes, 'x' fails, '?' is
// inconclusive; the last letter repeats.
type scripted struct {
	name   string
	script string
	n      atomic.Int32
}

func (g *scripted) Name() string { return g.name }

func (g *scripted) Measure(context.Context) Measurement {
	i := int(g.n.Add(1)) - 1
	c := g.script[min(i, len(g.script)-1)]
	return Measurement{OK: c == 'o', Inconclusive: c == '?', Detail: fmt.Sprintf("look %d: %c", i, c)}
}

// run evaluates on a fake clock, stepping it whenever Evaluate waits, and returns the verdict and
// the fake time it took.
func run(t *testing.T, ctx context.Context, gs []Gate, soak, interval time.Duration, budget int) (Verdict, time.Duration) {
	t.Helper()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	done := make(chan Verdict, 1)
	go func() { done <- evaluate(ctx, clk, gs, soak, interval, budget) }()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case v := <-done:
			return v, clk.Since(start)
		case <-deadline:
			t.Fatal("Evaluate did not finish")
		default:
		}
		if clk.HasWaiters() {
			clk.Step(interval)
		} else {
			time.Sleep(time.Millisecond)
		}
	}
}

func TestEvaluate(t *testing.T) {
	for _, tc := range []struct {
		name         string
		scripts      []string
		budget       int
		want         string // passed, failed or inconclusive
		measurements int
		took         time.Duration
		reason       string
	}{
		{"all pass", []string{"o", "o"}, 2, "passed", 14, time.Minute, "14 measurements of 2 gates"},
		{"failures within the budget", []string{"oxoxo"}, 2, "passed", 7, time.Minute, "2 failed (budget 2)"},
		{"fails fast past the budget", []string{"oxxx"}, 2, "failed", 4, 30 * time.Second, "gate g0 failed: look 3: x (3 failed measurements, budget 2)"},
		{"no budget", []string{"x"}, 0, "failed", 1, 0, "gate g0 failed"},
		{"one gate never conclusive", []string{"o", "?"}, 2, "inconclusive", 14, time.Minute, "gate g1 gave no conclusive measurement"},
		{"inconclusive looks count for nothing", []string{"??????o"}, 0, "passed", 7, time.Minute, "0 failed"},
		{"no gates", nil, 2, "passed", 0, time.Minute, "0 measurements of 0 gates"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var gs []Gate
			for i, s := range tc.scripts {
				gs = append(gs, &scripted{name: fmt.Sprintf("g%d", i), script: s})
			}
			v, took := run(t, context.Background(), gs, time.Minute, 10*time.Second, tc.budget)
			got := map[bool]string{true: "passed"}[v.Passed] + map[bool]string{true: "failed"}[v.Failed] + map[bool]string{true: "inconclusive"}[v.Inconclusive]
			if got != tc.want || len(v.Measurements) != tc.measurements || took != tc.took || !strings.Contains(v.Reason, tc.reason) {
				t.Fatalf("verdict %s after %s with %d measurements (%s); want %s after %s with %d, reason %q",
					got, took, len(v.Measurements), v.Reason, tc.want, tc.took, tc.measurements, tc.reason)
			}
		})
	}
}

func TestEvaluateStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	v, _ := run(t, ctx, []Gate{&scripted{name: "g", script: "o"}}, time.Minute, 10*time.Second, 2)
	if !v.Inconclusive || !strings.Contains(v.Reason, "canceled") {
		t.Fatalf("verdict %+v, want inconclusive naming the cancellation", v)
	}
}

func TestHTTPGate(t *testing.T) {
	var status atomic.Int32
	status.Store(http.StatusOK)
	var delay atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Duration(delay.Load()))
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	g, err := New(config.Gate{Name: "front", Type: config.GateHTTP, HTTP: &config.HTTPGate{URL: srv.URL, Requests: 5, MaxLatencyP99: config.Duration(50 * time.Millisecond)}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if m := g.Measure(ctx); !m.OK || m.Value != 1 || !strings.Contains(m.Detail, "5/5 succeeded") {
		t.Errorf("a healthy server: %+v", m)
	}
	status.Store(http.StatusServiceUnavailable)
	if m := g.Measure(ctx); m.OK || m.Inconclusive || m.Value != 0 || !strings.Contains(m.Detail, "503") {
		t.Errorf("a server answering 503: %+v", m)
	}
	status.Store(http.StatusOK)
	delay.Store(int64(80 * time.Millisecond))
	if m := g.Measure(ctx); m.OK || m.Value != 1 || !strings.Contains(m.Detail, "max 50ms") {
		t.Errorf("a slow server: %+v", m)
	}
	delay.Store(0)
	only := NewHTTPForTest(t, srv.URL, []int{204})
	if m := only.Measure(ctx); m.OK {
		t.Errorf("200 when only 204 is expected: %+v", m)
	}
	srv.Close()
	if m := g.Measure(ctx); m.OK || m.Inconclusive || !strings.Contains(m.Detail, "last failure") {
		t.Errorf("a server that is gone: %+v", m)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if m := g.Measure(cctx); !m.Inconclusive {
		t.Errorf("a measurement cut short by its context must be inconclusive: %+v", m)
	}
}

func NewHTTPForTest(t *testing.T, url string, expect []int) Gate {
	g, err := New(config.Gate{Name: "only-204", Type: config.GateHTTP, HTTP: &config.HTTPGate{URL: url, ExpectStatus: expect, Requests: 1}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestPrometheusGate(t *testing.T) {
	var answer atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/query" || r.FormValue("query") != "sum(rate(http_errors[1m]))" {
			http.Error(w, "unexpected "+r.URL.String(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, answer.Load().(string))
	}))
	defer srv.Close()
	vector := func(vals ...string) string {
		var rs []string
		for i, v := range vals {
			rs = append(rs, fmt.Sprintf(`{"metric":{"pod":"p%d"},"value":[1767225600,"%s"]}`, i, v))
		}
		return `{"status":"success","data":{"resultType":"vector","result":[` + strings.Join(rs, ",") + `]}}`
	}
	maxErr := 0.5
	g, err := New(config.Gate{Name: "errors", Type: config.GatePrometheus, Prometheus: &config.PrometheusGate{Address: srv.URL, Query: "sum(rate(http_errors[1m]))", Max: &maxErr}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		answer           string
		ok, inconclusive bool
		value            float64
		detail           string
	}{
		{vector("0.1", "0.3"), true, false, 0.3, "2 samples within the thresholds"},
		{vector("0.1", "0.7"), false, false, 0.7, "0.7 > max 0.5"},
		{vector(), false, true, 0, "no data"},
		{vector("NaN"), false, true, 0, "no data"},
		{`{"status":"success","data":{"resultType":"scalar","result":[1767225600,"0.2"]}}`, true, false, 0.2, "1 samples"},
		{`{"status":"error","errorType":"bad_data","error":"parse error"}`, false, true, 0, "parse error"},
	} {
		answer.Store(tc.answer)
		m := g.Measure(ctx)
		if m.OK != tc.ok || m.Inconclusive != tc.inconclusive || m.Value != tc.value || !strings.Contains(m.Detail, tc.detail) {
			t.Errorf("answer %s: %+v; want ok %v inconclusive %v value %v detail %q", tc.answer, m, tc.ok, tc.inconclusive, tc.value, tc.detail)
		}
	}
	srv.Close()
	if m := g.Measure(ctx); !m.Inconclusive {
		t.Errorf("Prometheus unreachable: %+v, want inconclusive", m)
	}
}

func TestKubernetesGate(t *testing.T) {
	two := int32(2)
	ready := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "app", Generation: 3, Labels: map[string]string{"tier": "front"}},
		Spec: appsv1.DeploymentSpec{Replicas: &two}, Status: appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2, ReadyReplicas: 2}}
	db := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "app", Generation: 1},
		Spec: appsv1.StatefulSetSpec{Replicas: &two}, Status: appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: 2, ReadyReplicas: 1}}
	client := fake.NewClientset(ready, db)
	ctx := context.Background()
	all := NewKubernetes("green", config.KubernetesGate{Namespaces: []string{"app"}}, client)
	if m := all.Measure(ctx); m.OK || m.Inconclusive || m.Value != 0.5 || !strings.Contains(m.Detail, "statefulset app/db (1/2 ready)") {
		t.Errorf("a statefulset half ready: %+v", m)
	}
	front := NewKubernetes("front", config.KubernetesGate{Namespaces: []string{"app"}, Selector: "tier=front"}, client)
	if m := front.Measure(ctx); !m.OK || !strings.Contains(m.Detail, "1 workloads ready") {
		t.Errorf("the ready deployment alone: %+v", m)
	}
	empty := NewKubernetes("none", config.KubernetesGate{Namespaces: []string{"other"}}, client)
	if m := empty.Measure(ctx); !m.Inconclusive {
		t.Errorf("no workloads: %+v, want inconclusive", m)
	}
}
