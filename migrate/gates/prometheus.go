package gates

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/ferrykube/ferry/plans/config"
	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// prometheusGate runs an instant query; every sample must lie within the thresholds. No samples,
// NaN or an unreachable Prometheus tell nothing about green: the measurement is inconclusive.
type prometheusGate struct {
	name string
	cfg  config.PrometheusGate
	api  promv1.API
}

func newPrometheus(name string, cfg config.PrometheusGate, opts Options) (*prometheusGate, error) {
	c, err := api.NewClient(api.Config{Address: cfg.Address, Client: opts.HTTPClient})
	if err != nil {
		return nil, fmt.Errorf("gate %s: prometheus address %q: %w", name, cfg.Address, err)
	}
	return &prometheusGate{name: name, cfg: cfg, api: promv1.NewAPI(c)}, nil
}

func (g *prometheusGate) Name() string { return g.name }

func (g *prometheusGate) Measure(ctx context.Context) Measurement {
	now := time.Now()
	m := Measurement{Gate: g.name, At: now}
	val, _, _, err := g.api.Query(ctx, g.cfg.Query, now)
	if err != nil {
		m.Inconclusive = true
		m.Detail = fmt.Sprintf("query %q at %s: %v", g.cfg.Query, g.cfg.Address, err)
		return m
	}
	var samples []float64
	switch v := val.(type) {
	case model.Vector:
		for _, s := range v {
			samples = append(samples, float64(s.Value))
		}
	case *model.Scalar:
		samples = append(samples, float64(v.Value))
	default:
		m.Inconclusive = true
		m.Detail = fmt.Sprintf("query %q answered a %s; want an instant vector or a scalar", g.cfg.Query, val.Type())
		return m
	}
	var bad []string
	worst, seen := math.NaN(), 0
	for _, s := range samples {
		if math.IsNaN(s) {
			continue
		}
		seen++
		switch {
		case g.cfg.Max != nil && s > *g.cfg.Max:
			bad = append(bad, fmt.Sprintf("%g > max %g", s, *g.cfg.Max))
		case g.cfg.Min != nil && s < *g.cfg.Min:
			bad = append(bad, fmt.Sprintf("%g < min %g", s, *g.cfg.Min))
		}
		if math.IsNaN(worst) || g.cfg.Max != nil && s > worst || g.cfg.Max == nil && s < worst {
			worst = s
		}
	}
	if seen == 0 {
		m.Inconclusive = true
		m.Detail = fmt.Sprintf("query %q: no data", g.cfg.Query)
		return m
	}
	m.Value = worst
	m.OK = len(bad) == 0
	if m.OK {
		m.Detail = fmt.Sprintf("query %q: %d samples within the thresholds (worst %g)", g.cfg.Query, seen, worst)
	} else {
		m.Detail = fmt.Sprintf("query %q: %s", g.cfg.Query, strings.Join(bad, ", "))
	}
	return m
}
