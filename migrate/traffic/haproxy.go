package traffic

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/ferrykube/ferry/plans/config"
)

// haproxy drives the weights of a backend's blue and green servers through HAProxy's runtime API.
// Weights run from 0 to 256; a server at 0 % is also put in drain, so that it takes no new
// connections at all, and back to ready before it gets traffic again.
type haproxy struct {
	cfg  config.HAProxyTraffic
	opts Options
}

func newHAProxy(cfg config.HAProxyTraffic, opts Options) *haproxy {
	return &haproxy{cfg: cfg, opts: opts}
}

func (h *haproxy) Name() string {
	return fmt.Sprintf("haproxy %s servers %s/%s at %s", h.cfg.Backend, h.cfg.BlueServer, h.cfg.GreenServer, h.cfg.Address)
}

// serverState is what ferry changes on a server, and so what it saves and restores.
type serverState struct {
	Weight int    `json:"weight"`
	Admin  string `json:"admin"` // ready, drain or maint
}

type haproxyState struct {
	Backend string                 `json:"backend"`
	Servers map[string]serverState `json:"servers"`
}

// command sends one line of commands (";"-separated) to the runtime API and returns the answer;
// the API answers and closes the connection in its non-interactive mode.
func (h *haproxy) command(ctx context.Context, line string) (string, error) {
	network, addr := "tcp", h.cfg.Address
	if strings.HasPrefix(addr, "/") || strings.HasPrefix(addr, "unix:") || strings.HasPrefix(addr, "unix@") {
		network, addr = "unix", strings.TrimPrefix(strings.TrimPrefix(addr, "unix:"), "unix@")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return "", fmt.Errorf("haproxy runtime API %s: %w", h.cfg.Address, err)
	}
	defer conn.Close()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(30 * time.Second)
	}
	conn.SetDeadline(deadline)
	if _, err := io.WriteString(conn, line+"\n"); err != nil {
		return "", fmt.Errorf("haproxy runtime API %s: send %q: %w", h.cfg.Address, line, err)
	}
	out, err := io.ReadAll(conn)
	if err != nil {
		return "", fmt.Errorf("haproxy runtime API %s: read the answer to %q: %w", h.cfg.Address, line, err)
	}
	return string(out), nil
}

// servers reads the backend's servers from `show servers state`, by the column names of its header.
func (h *haproxy) servers(ctx context.Context) (map[string]serverState, error) {
	out, err := h.command(ctx, "show servers state "+h.cfg.Backend)
	if err != nil {
		return nil, err
	}
	var cols []string
	found := map[string]serverState{}
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "# "):
			cols = strings.Fields(strings.TrimPrefix(line, "# "))
			continue
		case line == "" || cols == nil:
			continue
		}
		fields := strings.Fields(line)
		get := func(name string) string {
			for i, c := range cols {
				if c == name && i < len(fields) {
					return fields[i]
				}
			}
			return ""
		}
		if get("be_name") != h.cfg.Backend {
			continue
		}
		weight, err1 := strconv.Atoi(get("srv_uweight"))
		admin, err2 := strconv.Atoi(get("srv_admin_state"))
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("haproxy backend %s: unreadable server line %q", h.cfg.Backend, line)
		}
		found[get("srv_name")] = serverState{Weight: weight, Admin: adminName(admin)}
	}
	if cols == nil {
		return nil, fmt.Errorf("haproxy backend %s: %s", h.cfg.Backend, strings.TrimSpace(out))
	}
	for _, name := range []string{h.cfg.BlueServer, h.cfg.GreenServer} {
		if _, ok := found[name]; !ok {
			return nil, fmt.Errorf("haproxy backend %s has no server %s", h.cfg.Backend, name)
		}
	}
	return found, nil
}

// adminName reads srv_admin_state's bits: any maintenance bit (forced, inherited, from the
// configuration, resolution, hostname) before the drain bits.
func adminName(bits int) string {
	switch {
	case bits&(0x01|0x02|0x04|0x20|0x40) != 0:
		return "maint"
	case bits&(0x08|0x10) != 0:
		return "drain"
	}
	return "ready"
}

func (h *haproxy) Preflight(ctx context.Context) error {
	servers, err := h.servers(ctx)
	if err != nil {
		return err
	}
	if g := servers[h.cfg.GreenServer]; g.Admin == "maint" {
		h.opts.Logger.Warn("green's server is in maintenance; ferry sets it ready when it sends it traffic", "backend", h.cfg.Backend, "server", h.cfg.GreenServer)
	}
	// The weights must be settable: a read-only socket answers "Permission denied".
	out, err := h.command(ctx, fmt.Sprintf("set weight %s/%s %d", h.cfg.Backend, h.cfg.BlueServer, servers[h.cfg.BlueServer].Weight))
	if err != nil {
		return err
	}
	if strings.TrimSpace(out) != "" {
		return fmt.Errorf("haproxy %s: set weight: %s (the socket needs level admin)", h.cfg.Address, strings.TrimSpace(out))
	}
	return nil
}

func (h *haproxy) Current(ctx context.Context) (Split, error) {
	servers, err := h.servers(ctx)
	if err != nil {
		return Split{}, err
	}
	effective := func(s serverState) int {
		if s.Admin != "ready" {
			return 0
		}
		return s.Weight
	}
	s, ok := splitOf(effective(servers[h.cfg.BlueServer]), effective(servers[h.cfg.GreenServer]))
	if !ok {
		return Split{}, fmt.Errorf("haproxy backend %s: neither %s nor %s takes traffic (weight 0, drain or maintenance)", h.cfg.Backend, h.cfg.BlueServer, h.cfg.GreenServer)
	}
	return s, nil
}

func (h *haproxy) Save(ctx context.Context) (State, error) {
	servers, err := h.servers(ctx)
	if err != nil {
		return nil, err
	}
	st := haproxyState{Backend: h.cfg.Backend, Servers: map[string]serverState{
		h.cfg.BlueServer: servers[h.cfg.BlueServer], h.cfg.GreenServer: servers[h.cfg.GreenServer]}}
	data, err := json.Marshal(st)
	return State(data), err
}

// weight maps a percent onto HAProxy's 0–256.
func weight(percent int) int { return (percent*256 + 50) / 100 }

func (h *haproxy) target(s Split) map[string]serverState {
	state := func(p int) serverState {
		if p == 0 {
			return serverState{Weight: 0, Admin: "drain"}
		}
		return serverState{Weight: weight(p), Admin: "ready"}
	}
	return map[string]serverState{h.cfg.BlueServer: state(s.Blue), h.cfg.GreenServer: state(s.Green)}
}

func (h *haproxy) Apply(ctx context.Context, s Split) error {
	if err := s.Valid(); err != nil {
		return err
	}
	h.opts.Logger.Info("haproxy: setting weights", "backend", h.cfg.Backend, "split", s.String())
	return h.set(ctx, h.target(s))
}

// set changes both servers in one runtime API call: the server that gains traffic first, so that
// at no moment both are out of rotation.
func (h *haproxy) set(ctx context.Context, want map[string]serverState) error {
	current, err := h.servers(ctx)
	if err != nil {
		return err
	}
	order := []string{h.cfg.BlueServer, h.cfg.GreenServer}
	if want[h.cfg.GreenServer].Weight > current[h.cfg.GreenServer].Weight || current[h.cfg.GreenServer].Admin != "ready" && want[h.cfg.GreenServer].Admin == "ready" {
		order = []string{h.cfg.GreenServer, h.cfg.BlueServer}
	}
	var cmds []string
	for _, name := range order {
		srv := h.cfg.Backend + "/" + name
		w := want[name]
		if w.Admin == "ready" {
			cmds = append(cmds, "set server "+srv+" state ready", fmt.Sprintf("set weight %s %d", srv, w.Weight))
		} else {
			cmds = append(cmds, fmt.Sprintf("set weight %s %d", srv, w.Weight), "set server "+srv+" state "+w.Admin)
		}
	}
	out, err := h.command(ctx, strings.Join(cmds, "; "))
	if err != nil {
		return err
	}
	if msg := strings.TrimSpace(out); msg != "" {
		return fmt.Errorf("haproxy %s: %s: %s", h.cfg.Address, strings.Join(cmds, "; "), msg)
	}
	return nil
}

func (h *haproxy) WaitSettled(ctx context.Context, s Split) error {
	return h.waitFor(ctx, h.target(s))
}

// waitFor waits until `get weight` reports the wanted weights and the servers' states match.
func (h *haproxy) waitFor(ctx context.Context, want map[string]serverState) error {
	return poll(ctx, h.opts.PollInterval, "haproxy backend "+h.cfg.Backend, func(ctx context.Context) (bool, string, error) {
		var seen []string
		done := true
		for _, name := range []string{h.cfg.BlueServer, h.cfg.GreenServer} {
			out, err := h.command(ctx, "get weight "+h.cfg.Backend+"/"+name)
			if err != nil {
				return false, "", err
			}
			w, err := strconv.Atoi(strings.Fields(out + " x")[0])
			if err != nil {
				return false, "", fmt.Errorf("haproxy get weight %s/%s: %s", h.cfg.Backend, name, strings.TrimSpace(out))
			}
			seen = append(seen, fmt.Sprintf("%s weight %d", name, w))
			done = done && w == want[name].Weight
		}
		servers, err := h.servers(ctx)
		if err != nil {
			return false, "", err
		}
		for name, w := range want {
			seen = append(seen, name+" "+servers[name].Admin)
			done = done && servers[name].Admin == w.Admin
		}
		return done, strings.Join(seen, ", "), nil
	})
}

func (h *haproxy) Restore(ctx context.Context, st State) error {
	var saved haproxyState
	if err := json.Unmarshal(st, &saved); err != nil {
		return fmt.Errorf("haproxy: saved state: %w", err)
	}
	want := map[string]serverState{}
	for _, name := range []string{h.cfg.BlueServer, h.cfg.GreenServer} {
		s, ok := saved.Servers[name]
		if !ok || saved.Backend != h.cfg.Backend {
			return fmt.Errorf("haproxy: the saved state is of backend %s servers %v, not of %s/%s", saved.Backend, saved.Servers, h.cfg.Backend, name)
		}
		want[name] = s
	}
	h.opts.Logger.Info("haproxy: restoring the saved weights", "backend", h.cfg.Backend, "servers", saved.Servers)
	if err := h.set(ctx, want); err != nil {
		return err
	}
	return h.waitFor(ctx, want)
}
