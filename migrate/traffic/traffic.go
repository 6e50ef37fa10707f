// Package traffic moves request traffic between blue and green behind one interface, whatever
// sits in front of them: HAProxy, Route 53 weighted records, a Gateway API HTTPRoute, or a command
// or webhook of the user's. A switcher saves what it found before the first change, so that a
// rollback puts traffic back exactly as it was.
package traffic

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/plans/config"
	"k8s.io/client-go/rest"
)

// Split is how request traffic is divided, in percent; Blue and Green sum to 100.
type Split struct{ Blue, Green int }

// Green returns the split sending percent of the traffic to green.
func Green(percent int) Split { return Split{Blue: 100 - percent, Green: percent} }

func (s Split) String() string { return fmt.Sprintf("blue %d%% / green %d%%", s.Blue, s.Green) }

// Valid reports whether both shares lie in 0–100 and sum to 100.
func (s Split) Valid() error {
	if s.Blue < 0 || s.Green < 0 || s.Blue+s.Green != 100 {
		return badinput.Errorf("traffic split %d/%d: want two percents from 0 to 100 summing to 100", s.Blue, s.Green)
	}
	return nil
}

// State is what a switcher saved before changing anything; opaque JSON, kept in the run's journal.
type State json.RawMessage

// MarshalJSON keeps the state as the JSON it is.
func (s State) MarshalJSON() ([]byte, error) {
	if len(s) == 0 {
		return []byte("null"), nil
	}
	return s, nil
}

// UnmarshalJSON keeps a copy of the JSON.
func (s *State) UnmarshalJSON(data []byte) error {
	*s = append((*s)[:0], data...)
	return nil
}

// Switcher changes how traffic is split between blue and green.
type Switcher interface {
	// Name says which switcher and what it drives, for logs and reports.
	Name() string
	// Preflight checks that the front is reachable and that what the configuration names exists.
	Preflight(ctx context.Context) error
	// Current reads the split in force.
	Current(ctx context.Context) (Split, error)
	// Save returns everything Restore needs to put traffic back exactly as it is now.
	Save(ctx context.Context) (State, error)
	// Apply asks for split s; WaitSettled then waits until it is in effect.
	Apply(ctx context.Context, s Split) error
	WaitSettled(ctx context.Context, s Split) error
	// Restore puts back what Save returned, and waits until it is in effect.
	Restore(ctx context.Context, st State) error
}

// Options carries what switchers need from the caller.
type Options struct {
	// RESTConfig returns the client configuration of a kubeconfig context (gateway-api).
	RESTConfig func(context string) (*rest.Config, error)
	// HTTPClient sends webhooks; nil means one with a 30 s timeout.
	HTTPClient *http.Client
	// AWSConfig replaces the standard AWS configuration chain (route53); tests point it at a fake.
	AWSConfig *aws.Config
	// Logger receives what switchers do; nil discards it.
	Logger *slog.Logger
	// PollInterval is how often WaitSettled looks (default 1 s).
	PollInterval time.Duration
	// Stdout and Stderr receive the exec switcher's command output; nil discards it.
	Stdout, Stderr io.Writer
	// Secrets resolves the references of secret settings (webhook headers).
	Secrets config.Resolver
}

func (o Options) withDefaults() Options {
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second
	}
	return o
}

// New builds the switcher cfg names. It does not reach the front yet: call Preflight.
func New(ctx context.Context, cfg config.Traffic, opts Options) (Switcher, error) {
	opts = opts.withDefaults()
	switch cfg.Type {
	case config.TrafficHAProxy:
		if cfg.HAProxy == nil {
			return nil, badinput.Errorf("traffic.haproxy: missing")
		}
		return newHAProxy(*cfg.HAProxy, opts), nil
	case config.TrafficRoute53:
		if cfg.Route53 == nil {
			return nil, badinput.Errorf("traffic.route53: missing")
		}
		return newRoute53(ctx, *cfg.Route53, opts)
	case config.TrafficGatewayAPI:
		if cfg.GatewayAPI == nil {
			return nil, badinput.Errorf("traffic.gatewayAPI: missing")
		}
		return newGateway(*cfg.GatewayAPI, opts)
	case config.TrafficExec:
		if cfg.Exec == nil || len(cfg.Exec.Command) == 0 {
			return nil, badinput.Errorf("traffic.exec.command: missing")
		}
		return newExec(*cfg.Exec, opts), nil
	case config.TrafficWebhook:
		if cfg.Webhook == nil {
			return nil, badinput.Errorf("traffic.webhook: missing")
		}
		return newWebhook(ctx, *cfg.Webhook, opts)
	}
	return nil, badinput.Errorf("traffic.type %q: want haproxy, route53, gateway-api, exec or webhook", cfg.Type)
}

// poll calls check every interval until it reports done, fails, or ctx ends; the error then says
// what was last seen.
func poll(ctx context.Context, interval time.Duration, what string, check func(ctx context.Context) (done bool, seen string, err error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		done, seen, err := check(ctx)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not settled (%s): %w", what, seen, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// splitOf turns two weights into percents; all-zero weights have no meaning of their own and are
// an error for the caller to name.
func splitOf(blue, green int) (Split, bool) {
	if blue+green == 0 {
		return Split{}, false
	}
	g := (200*green + blue + green) / (2 * (blue + green)) // rounded
	return Green(g), true
}
