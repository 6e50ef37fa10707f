// Package gates decides whether a traffic step may go on: health checks (HTTP probes, a
// Prometheus query against a threshold, Kubernetes readiness) measured again and again while the
// step soaks, judged against a failure budget.
package gates

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/plans/config"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// Measurement is one look of one gate. Inconclusive means the gate could not tell (no data, its
// source unreachable); it counts neither for nor against the step.
type Measurement struct {
	Gate         string    `json:"gate"`
	OK           bool      `json:"ok"`
	Inconclusive bool      `json:"inconclusive,omitempty"`
	Value        float64   `json:"value"`
	Detail       string    `json:"detail"`
	At           time.Time `json:"at"`
}

// Gate measures one health signal.
type Gate interface {
	Name() string
	// Measure never fails: what goes wrong is a failed or inconclusive Measurement.
	Measure(ctx context.Context) Measurement
}

// Options carries what gates need from the caller.
type Options struct {
	// RESTConfig returns the client configuration of a kubeconfig context (kubernetes gates).
	RESTConfig func(context string) (*rest.Config, error)
	// HTTPClient sends the HTTP gates' probes; nil means a client without keep-alive reuse limits
	// beyond the gate's own per-request timeout.
	HTTPClient *http.Client
	Logger     *slog.Logger
}

// New builds the gate cfg describes; it does not measure yet.
func New(cfg config.Gate, opts Options) (Gate, error) {
	cfg = cfg.WithDefaults()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	switch cfg.Type {
	case config.GateHTTP:
		if cfg.HTTP == nil {
			return nil, badinput.Errorf("gate %s: http: missing", cfg.Name)
		}
		return newHTTP(cfg.Name, *cfg.HTTP, opts), nil
	case config.GatePrometheus:
		if cfg.Prometheus == nil {
			return nil, badinput.Errorf("gate %s: prometheus: missing", cfg.Name)
		}
		return newPrometheus(cfg.Name, *cfg.Prometheus, opts)
	case config.GateKubernetes:
		if cfg.Kubernetes == nil {
			return nil, badinput.Errorf("gate %s: kubernetes: missing", cfg.Name)
		}
		return newKubernetes(cfg.Name, *cfg.Kubernetes, opts)
	}
	return nil, badinput.Errorf("gate %s: type %q: want http, prometheus or kubernetes", cfg.Name, cfg.Type)
}

// Verdict is what the measurements of one step say. Exactly one of Passed, Failed and
// Inconclusive is set; Reason says why in a sentence.
type Verdict struct {
	Passed       bool          `json:"passed,omitempty"`
	Failed       bool          `json:"failed,omitempty"`
	Inconclusive bool          `json:"inconclusive,omitempty"`
	Measurements []Measurement `json:"measurements"`
	Reason       string        `json:"reason"`
}

// Evaluate measures every gate at once every interval for the soak time (at the start, then until
// soak has passed). It fails as soon as more than failureBudget measurements have failed, and is
// inconclusive when some gate never gave a conclusive result, or when ctx ends first.
func Evaluate(ctx context.Context, gs []Gate, soak, interval time.Duration, failureBudget int) Verdict {
	return evaluate(ctx, clock.RealClock{}, gs, soak, interval, failureBudget)
}

func evaluate(ctx context.Context, clk clock.Clock, gs []Gate, soak, interval time.Duration, failureBudget int) Verdict {
	if interval <= 0 {
		interval = config.DefaultInterval
	}
	var v Verdict
	failed := 0
	conclusive := map[string]bool{}
	start := clk.Now()
	for round := 0; ; round++ {
		ms := measureAll(ctx, clk, gs, interval)
		var crossed *Measurement // the failure that spent the budget
		for i, m := range ms {
			v.Measurements = append(v.Measurements, m)
			if m.Inconclusive {
				continue
			}
			conclusive[m.Gate] = true
			if !m.OK {
				failed++
				if failed > failureBudget && crossed == nil {
					crossed = &ms[i]
				}
			}
		}
		if crossed != nil {
			v.Failed = true
			v.Reason = fmt.Sprintf("gate %s failed: %s (%d failed measurements, budget %d)", crossed.Gate, crossed.Detail, failed, failureBudget)
			return v
		}
		if ctx.Err() != nil {
			v.Inconclusive = true
			v.Reason = fmt.Sprintf("stopped after %s of the %s soak: %v", clk.Since(start).Round(time.Second), soak, context.Cause(ctx))
			return v
		}
		// Measure again while the next look still falls within the soak time.
		next := start.Add(time.Duration(round+1) * interval)
		if next.Sub(start) > soak {
			break
		}
		t := clk.NewTimer(next.Sub(clk.Now()))
		select {
		case <-ctx.Done():
			t.Stop()
			v.Inconclusive = true
			v.Reason = fmt.Sprintf("stopped after %s of the %s soak: %v", clk.Since(start).Round(time.Second), soak, context.Cause(ctx))
			return v
		case <-t.C():
		}
	}
	for _, g := range gs {
		if !conclusive[g.Name()] {
			v.Inconclusive = true
			v.Reason = fmt.Sprintf("gate %s gave no conclusive measurement in %s: %s", g.Name(), soak, lastDetail(v.Measurements, g.Name()))
			return v
		}
	}
	v.Passed = true
	v.Reason = fmt.Sprintf("%d measurements of %d gates over %s, %d failed (budget %d)", len(v.Measurements), len(gs), soak, failed, failureBudget)
	return v
}

// measureAll measures every gate concurrently, each within the interval (at least 5 s), so that a
// hanging source cannot stall the step; results keep the gates' order.
func measureAll(ctx context.Context, clk clock.Clock, gs []Gate, interval time.Duration) []Measurement {
	ms := make([]Measurement, len(gs))
	var wg sync.WaitGroup
	for i, g := range gs {
		wg.Go(func() {
			mctx, cancel := context.WithTimeout(ctx, max(interval, 5*time.Second))
			defer cancel()
			m := g.Measure(mctx)
			m.Gate = g.Name()
			if m.At.IsZero() {
				m.At = clk.Now()
			}
			ms[i] = m
		})
	}
	wg.Wait()
	return ms
}

func lastDetail(ms []Measurement, gate string) string {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].Gate == gate {
			return ms[i].Detail
		}
	}
	return "never measured"
}
