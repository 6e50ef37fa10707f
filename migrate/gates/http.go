package gates

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/ferrykube/ferry/plans/config"
)

// httpGate probes a URL: Requests GETs per measurement, one after another, as a client would.
type httpGate struct {
	name   string
	cfg    config.HTTPGate
	client *http.Client
}

func newHTTP(name string, cfg config.HTTPGate, opts Options) *httpGate {
	client := opts.HTTPClient
	if client == nil {
		client = &http.Client{}
	}
	return &httpGate{name: name, cfg: cfg, client: client}
}

func (g *httpGate) Name() string { return g.name }

func (g *httpGate) expected(code int) bool {
	if len(g.cfg.ExpectStatus) == 0 {
		return code >= 200 && code < 400
	}
	return slices.Contains(g.cfg.ExpectStatus, code)
}

func (g *httpGate) Measure(ctx context.Context) Measurement {
	m := Measurement{Gate: g.name, At: time.Now()}
	var latencies []time.Duration
	ok := 0
	var lastErr string
	for range g.cfg.Requests {
		if ctx.Err() != nil {
			break
		}
		d, err := g.probe(ctx)
		if ctx.Err() != nil {
			break // our own deadline, not the server's failure
		}
		latencies = append(latencies, d)
		if err != nil {
			lastErr = err.Error()
			continue
		}
		ok++
	}
	if len(latencies) == 0 {
		m.Inconclusive = true
		m.Detail = fmt.Sprintf("GET %s: no request finished: %v", g.cfg.URL, context.Cause(ctx))
		return m
	}
	m.Value = float64(ok) / float64(len(latencies))
	p99 := percentile(latencies, 0.99)
	m.OK = m.Value >= g.cfg.MinSuccessRatio && (g.cfg.MaxLatencyP99 == 0 || p99 <= g.cfg.MaxLatencyP99.D())
	m.Detail = fmt.Sprintf("GET %s: %d/%d succeeded (want %.4g%%), p99 %s", g.cfg.URL, ok, len(latencies), 100*g.cfg.MinSuccessRatio, p99.Round(time.Microsecond))
	if g.cfg.MaxLatencyP99 > 0 {
		m.Detail += fmt.Sprintf(" (max %s)", g.cfg.MaxLatencyP99)
	}
	if lastErr != "" {
		m.Detail += "; last failure: " + lastErr
	}
	return m
}

// probe sends one GET and returns how long the whole answer took; an unexpected status is an error.
func (g *httpGate) probe(ctx context.Context) (time.Duration, error) {
	rctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout.D())
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, g.cfg.URL, nil)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	resp, err := g.client.Do(req)
	if err != nil {
		return time.Since(start), err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if err != nil {
		return d, fmt.Errorf("read the answer: %w", err)
	}
	if !g.expected(resp.StatusCode) {
		return d, fmt.Errorf("status %s", resp.Status)
	}
	return d, nil
}

// percentile is the nearest-rank percentile of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}
