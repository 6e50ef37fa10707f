package testbed

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// HAProxy is Debian's HAProxy on 127.0.0.1 in front of two HTTP servers of a test, blue and
// green, as the front of a blue-green migration: one backend whose servers start with all the
// traffic on blue (weight 256) and none on green (weight 0), and a runtime API socket at level
// admin through which ferry changes the weights.
type HAProxy struct {
	Name string `json:"name"`
	// URL is the frontend clients send requests to.
	URL string `json:"url"`
	// Socket is the runtime API's unix socket.
	Socket      string   `json:"socket"`
	Backend     string   `json:"backend"`
	BlueServer  string   `json:"blueServer"`
	GreenServer string   `json:"greenServer"`
	Process     *Process `json:"process"`
}

const haproxyConfig = `global
    stats socket %[1]s mode 600 level admin
    maxconn 4000

defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s

frontend front
    bind 127.0.0.1:%[2]d
    default_backend app

backend app
    balance roundrobin
    server blue %[3]s weight 256
    server green %[4]s weight 0
`

// StartHAProxy starts an HAProxy named name in front of blueAddr and greenAddr (host:port on
// loopback), installing Debian's haproxy first when it is missing. Stop ends it with the testbed.
func (tb *Testbed) StartHAProxy(ctx context.Context, name, blueAddr, greenAddr string) (*HAProxy, error) {
	for _, addr := range []string{blueAddr, greenAddr} {
		host, _, err := net.SplitHostPort(addr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			return nil, fmt.Errorf("haproxy %s: backend %q: want a loopback host:port", name, addr)
		}
	}
	bin, err := haproxyBin(ctx, os.Stderr)
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	h := &HAProxy{Name: name, URL: "http://127.0.0.1:" + strconv.Itoa(port), Socket: filepath.Join(tb.Dir, "haproxy-"+name+".sock"),
		Backend: "app", BlueServer: "blue", GreenServer: "green"}
	cfg := filepath.Join(tb.Dir, "haproxy-"+name+".cfg")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, haproxyConfig, h.Socket, port, blueAddr, greenAddr), 0o644); err != nil {
		return nil, err
	}
	// -db: stay in the foreground, so that the testbed's process is HAProxy itself.
	h.Process, err = startProcess("haproxy-"+name, []string{bin, "-db", "-f", cfg}, nil, filepath.Join(tb.Dir, "haproxy-"+name+".log"), nil)
	if err != nil {
		return nil, err
	}
	err = waitFor(h.Process, 30*time.Second, "answering on its runtime API", func() error {
		out, err := h.Command(ctx, "show info")
		if err == nil && !strings.Contains(out, "Name: HAProxy") {
			err = fmt.Errorf("show info answered %q", out)
		}
		return err
	})
	if err != nil {
		h.Process.stop(5 * time.Second)
		return nil, err
	}
	tb.haproxyMu.Lock()
	defer tb.haproxyMu.Unlock()
	if tb.HAProxy == nil {
		tb.HAProxy = map[string]*HAProxy{}
	}
	if old := tb.HAProxy[name]; old != nil {
		old.Process.stop(5 * time.Second)
	}
	tb.HAProxy[name] = h
	// Recorded in the state file, so that a stale testbed's HAProxy is stopped with it too.
	if err := tb.save(); err != nil {
		return nil, err
	}
	return h, nil
}

// Command sends one runtime API command line and returns HAProxy's answer.
func (h *HAProxy) Command(ctx context.Context, line string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", h.Socket)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, line+"\n"); err != nil {
		return "", err
	}
	out, err := io.ReadAll(conn)
	return string(out), err
}

// Stop ends this HAProxy before the testbed does.
func (h *HAProxy) Stop() error { return h.Process.stop(10 * time.Second) }

// MigrateConfig is a ferry.yaml for a blue-green run of the platform behind h: the kubeflow
// preset, blue's storage classes mapped to green's "standard", HAProxy moving 10, 50 and 100 % to
// green, each step soaked and watched by an HTTP gate on greenURL with the interval and budget given.
func (h *HAProxy) MigrateConfig(greenURL string, soak, interval time.Duration, failureBudget int) string {
	return fmt.Sprintf(`preset: kubeflow
storageClassMap: {gp3: standard, nfs-client: standard}
traffic:
  type: haproxy
  haproxy: {address: %q, backend: %s, blueServer: %s, greenServer: %s}
rollout:
  steps: [10, 50, 100]
  soak: %s
  interval: %s
  failureBudget: %d
  gates:
  - name: green-answers
    type: http
    http: {url: %q, requests: 5, minSuccessRatio: 1}
`, h.Socket, h.Backend, h.BlueServer, h.GreenServer, soak, interval, failureBudget, greenURL)
}
