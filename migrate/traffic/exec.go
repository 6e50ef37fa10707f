package traffic

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/ferrykube/ferry/plans/config"
)

// pushed is a switcher that only sends splits: a command or a webhook of the user's. It cannot
// read the front, so the split in force is the last one it sent; until then, blue's 100 %. The
// command or webhook returning successfully means the change is in effect.
type pushed struct {
	name string
	send func(ctx context.Context, s Split) error
	last Split
}

type pushedState struct {
	Blue  int `json:"blue"`
	Green int `json:"green"`
}

func (p *pushed) Name() string                           { return p.name }
func (p *pushed) Current(context.Context) (Split, error) { return p.last, nil }

func (p *pushed) Save(context.Context) (State, error) {
	data, err := json.Marshal(pushedState(p.last))
	return State(data), err
}

func (p *pushed) Apply(ctx context.Context, s Split) error {
	if err := s.Valid(); err != nil {
		return err
	}
	if err := p.send(ctx, s); err != nil {
		return err
	}
	p.last = s
	return nil
}

func (p *pushed) WaitSettled(context.Context, Split) error { return nil }

func (p *pushed) Restore(ctx context.Context, st State) error {
	var saved pushedState
	if err := json.Unmarshal(st, &saved); err != nil {
		return fmt.Errorf("%s: saved state: %w", p.name, err)
	}
	return p.Apply(ctx, Split(saved))
}

// splitJSON is the one line a command reads on stdin and a webhook receives.
func splitJSON(s Split) []byte {
	data, _ := json.Marshal(pushedState(s))
	return append(data, '\n')
}

type execSwitcher struct {
	*pushed
	cfg  config.ExecTraffic
	opts Options
}

func newExec(cfg config.ExecTraffic, opts Options) *execSwitcher {
	e := &execSwitcher{cfg: cfg, opts: opts}
	e.pushed = &pushed{name: "exec " + strings.Join(cfg.Command, " "), last: Green(0), send: e.run}
	return e
}

// Preflight checks that the command exists; running it would change traffic.
func (e *execSwitcher) Preflight(context.Context) error {
	if _, err := exec.LookPath(e.cfg.Command[0]); err != nil {
		return fmt.Errorf("traffic.exec.command %q: %w", e.cfg.Command[0], err)
	}
	return nil
}

func (e *execSwitcher) run(ctx context.Context, s Split) error {
	cmd := exec.CommandContext(ctx, e.cfg.Command[0], e.cfg.Command[1:]...)
	cmd.Env = append(os.Environ(), "FERRY_BLUE_WEIGHT="+strconv.Itoa(s.Blue), "FERRY_GREEN_WEIGHT="+strconv.Itoa(s.Green))
	cmd.Stdin = bytes.NewReader(splitJSON(s))
	var stderr bytes.Buffer
	cmd.Stdout = e.opts.Stdout
	cmd.Stderr = &stderr
	if e.opts.Stderr != nil {
		cmd.Stderr = io.MultiWriter(&stderr, e.opts.Stderr)
	}
	e.opts.Logger.Info("exec: sending the split", "command", e.cfg.Command, "split", s.String())
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 500 {
			msg = "..." + msg[len(msg)-500:]
		}
		return fmt.Errorf("traffic command %q for %v: %w: %s", e.cfg.Command, s, err, msg)
	}
	return nil
}

type webhookSwitcher struct {
	*pushed
	cfg     config.WebhookTraffic
	headers map[string]string // resolved from cfg's references; never logged
	opts    Options
}

// newWebhook resolves the headers' references now, so that a missing one stops the run before
// any traffic moves.
func newWebhook(ctx context.Context, cfg config.WebhookTraffic, opts Options) (*webhookSwitcher, error) {
	headers, err := opts.Secrets.ResolveAll(ctx, "traffic.webhook.headers", cfg.Headers)
	if err != nil {
		return nil, err
	}
	w := &webhookSwitcher{cfg: cfg, headers: headers, opts: opts}
	w.pushed = &pushed{name: "webhook " + cfg.URL, last: Green(0), send: w.post}
	return w, nil
}

// Preflight has nothing to check without sending a split: the URL was checked with ferry.yaml.
func (w *webhookSwitcher) Preflight(context.Context) error { return nil }

func (w *webhookSwitcher) post(ctx context.Context, s Split) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.cfg.URL, bytes.NewReader(splitJSON(s)))
	if err != nil {
		return fmt.Errorf("traffic webhook %s: %w", w.cfg.URL, err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range w.headers {
		req.Header.Set(k, v)
	}
	w.opts.Logger.Info("webhook: sending the split", "url", w.cfg.URL, "split", s.String())
	resp, err := w.opts.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("traffic webhook %s: %w", w.cfg.URL, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 500))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("traffic webhook %s for %v: %s: %s", w.cfg.URL, s, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}
