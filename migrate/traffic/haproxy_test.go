package traffic

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrykube/ferry/plans/config"
)

// fakeHAProxy answers the runtime API commands the switcher sends, on a unix socket, the way
// HAProxy 2.x does in its non-interactive mode: one line of ";"-separated commands, then close.
type fakeHAProxy struct {
	mu       sync.Mutex
	backend  string
	weights  map[string]int
	admin    map[string]int // srv_admin_state bits
	commands []string
	readOnly bool
}

func startFakeHAProxy(t *testing.T) (*fakeHAProxy, string) {
	return startFakeHAProxyOn(t, "unix")
}

// startFakeHAProxyOn serves the fake on a unix socket or on 127.0.0.1 (network "tcp") and returns
// the address as ferry.yaml would give it.
func startFakeHAProxyOn(t *testing.T, network string) (*fakeHAProxy, string) {
	t.Helper()
	f := &fakeHAProxy{backend: "app", weights: map[string]int{"blue": 256, "green": 0}, admin: map[string]int{"blue": 0, "green": 0}}
	sock := filepath.Join(t.TempDir(), "admin.sock")
	if network == "tcp" {
		sock = "127.0.0.1:0"
	}
	l, err := net.Listen(network, sock)
	if err != nil {
		t.Fatal(err)
	}
	sock = l.Addr().String()
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(conn).ReadString('\n')
			var out strings.Builder
			for cmd := range strings.SplitSeq(strings.TrimSpace(line), ";") {
				out.WriteString(f.run(strings.TrimSpace(cmd)))
			}
			conn.Write([]byte(out.String()))
			conn.Close()
		}
	}()
	return f, sock
}

func (f *fakeHAProxy) run(cmd string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commands = append(f.commands, cmd)
	fields := strings.Fields(cmd)
	server := func(s string) (string, bool) {
		be, srv, _ := strings.Cut(s, "/")
		_, ok := f.weights[srv]
		return srv, ok && be == f.backend
	}
	switch {
	case strings.HasPrefix(cmd, "show servers state"):
		if len(fields) > 3 && fields[3] != f.backend {
			return "Can't find backend.\n"
		}
		out := "1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight\n"
		for i, name := range []string{"blue", "green"} {
			out += fmt.Sprintf("3 %s %d %s 127.0.0.1 2 %d %d 256\n", f.backend, i+1, name, f.admin[name], f.weights[name])
		}
		return out + "\n"
	case strings.HasPrefix(cmd, "get weight"):
		srv, ok := server(fields[2])
		if !ok {
			return "No such server.\n"
		}
		return fmt.Sprintf("%d (initial 256)\n", f.weights[srv])
	case strings.HasPrefix(cmd, "set weight"):
		if f.readOnly {
			return "Permission denied\n"
		}
		srv, ok := server(fields[2])
		if !ok {
			return "No such server.\n"
		}
		f.weights[srv], _ = strconv.Atoi(fields[3])
		return ""
	case strings.HasPrefix(cmd, "set server") && len(fields) == 5 && fields[3] == "state":
		srv, ok := server(fields[2])
		if !ok {
			return "No such server.\n"
		}
		f.admin[srv] = map[string]int{"ready": 0, "drain": 0x08, "maint": 0x01}[fields[4]]
		return ""
	}
	return "Unknown command.\n"
}

func (f *fakeHAProxy) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.commands
	f.commands = nil
	return out
}

func newTestHAProxy(t *testing.T, sock, backend string) Switcher {
	t.Helper()
	sw, err := New(context.Background(), config.Traffic{Type: config.TrafficHAProxy,
		HAProxy: &config.HAProxyTraffic{Address: sock, Backend: backend, BlueServer: "blue", GreenServer: "green"}},
		Options{PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return sw
}

func TestHAProxyShiftsAndRestores(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) { testHAProxyShiftsAndRestores(t, network) })
	}
}

func testHAProxyShiftsAndRestores(t *testing.T, network string) {
	fake, sock := startFakeHAProxyOn(t, network)
	sw := newTestHAProxy(t, sock, "app")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sw.Preflight(ctx); err != nil {
		t.Fatal(err)
	}
	saved, err := sw.Save(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		green             int
		blueW, greenW     int
		blueAdm, greenAdm int
	}{{10, 230, 26, 0, 0}, {50, 128, 128, 0, 0}, {100, 0, 256, 0x08, 0}} {
		fake.log()
		if err := sw.Apply(ctx, Green(tc.green)); err != nil {
			t.Fatal(err)
		}
		if err := sw.WaitSettled(ctx, Green(tc.green)); err != nil {
			t.Fatal(err)
		}
		cmds := fake.log()
		// The server that gains traffic is changed first: never both out of rotation.
		if first := cmds[1]; !strings.Contains(first, "app/green") {
			t.Errorf("to %d%% green the first change was %q, want green's (commands %q)", tc.green, first, cmds)
		}
		if fake.weights["blue"] != tc.blueW || fake.weights["green"] != tc.greenW || fake.admin["blue"] != tc.blueAdm || fake.admin["green"] != tc.greenAdm {
			t.Errorf("%d%% green: weights %v admin %v", tc.green, fake.weights, fake.admin)
		}
		if got, err := sw.Current(ctx); err != nil || got != Green(tc.green) {
			t.Errorf("Current = %v, %v; want %v", got, err, Green(tc.green))
		}
	}
	if err := sw.Restore(ctx, saved); err != nil {
		t.Fatal(err)
	}
	if fake.weights["blue"] != 256 || fake.weights["green"] != 0 || fake.admin["blue"] != 0 || fake.admin["green"] != 0 {
		t.Fatalf("after Restore: weights %v admin %v, want blue 256 ready and green 0 ready as saved", fake.weights, fake.admin)
	}
	if got, _ := sw.Current(ctx); got != Green(0) {
		t.Fatalf("after Restore: %v", got)
	}
}

func TestHAProxyPreflightNamesWhatIsWrong(t *testing.T) {
	fake, sock := startFakeHAProxy(t)
	ctx := context.Background()
	if err := newTestHAProxy(t, sock, "web").Preflight(ctx); err == nil || !strings.Contains(err.Error(), "Can't find backend") {
		t.Errorf("unknown backend: %v", err)
	}
	sw, _ := New(ctx, config.Traffic{Type: config.TrafficHAProxy, HAProxy: &config.HAProxyTraffic{Address: sock, Backend: "app", BlueServer: "blue", GreenServer: "green2"}}, Options{})
	if err := sw.Preflight(ctx); err == nil || !strings.Contains(err.Error(), "no server green2") {
		t.Errorf("unknown server: %v", err)
	}
	fake.readOnly = true
	if err := newTestHAProxy(t, sock, "app").Preflight(ctx); err == nil || !strings.Contains(err.Error(), "level admin") {
		t.Errorf("read-only socket: %v", err)
	}
	if err := newTestHAProxy(t, filepath.Join(t.TempDir(), "none.sock"), "app").Preflight(ctx); err == nil || !strings.Contains(err.Error(), "none.sock") {
		t.Errorf("no socket: %v", err)
	}
	if err := newTestHAProxy(t, sock, "app").Apply(ctx, Split{Blue: 60, Green: 60}); err == nil {
		t.Error("a split over 100 % was applied")
	}
}
