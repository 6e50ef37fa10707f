package kube

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/httpstream/spdy"
	streamprotocol "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// An API server (or a proxy before it) that does not upgrade to SPDY gets the exec over WebSocket.
func TestExecFallsBackToWebSocketWhenSPDYIsNotUpgraded(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+strings.ToLower(r.Header.Get("Upgrade")))
		mu.Unlock()
		// Neither is upgraded: what matters is that both were asked, SPDY first.
		http.Error(w, "no upgrade here", http.StatusBadRequest)
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = Exec(context.Background(), cfg, client, ExecRequest{Namespace: "a", Pod: "p", Command: []string{"true"}, Stdout: &strings.Builder{}})
	if err == nil {
		t.Fatal("exec through a server that upgrades nothing succeeded")
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"POST spdy/3.1", "GET websocket"}; strings.Join(seen, ", ") != strings.Join(want, ", ") {
		t.Fatalf("the server was asked %q, want %q", seen, want)
	}
	if ConnectionBroke(err) {
		t.Errorf("a refused upgrade counts as a broken connection: %v", err)
	}
}

// spdyExecServer answers an exec over SPDY (protocol v4) with output on stdout, then, when
// withStatus, the command's status, and ends the streams.
func spdyExecServer(t *testing.T, withStatus bool) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "spdy/3.1") {
			http.Error(w, "SPDY only", http.StatusBadRequest)
			return
		}
		if _, err := httpstream.Handshake(r, w, []string{streamprotocol.StreamProtocolV4Name}); err != nil {
			return
		}
		streams := make(chan httpstream.Stream, 4)
		conn := spdy.NewResponseUpgrader().UpgradeResponse(w, r, func(s httpstream.Stream, _ <-chan struct{}) error {
			streams <- s
			return nil
		})
		if conn == nil {
			return
		}
		defer conn.Close()
		byType := map[string]httpstream.Stream{}
		for len(byType) < 3 { // error, stdout, stderr
			select {
			case s := <-streams:
				byType[s.Headers().Get(corev1.StreamType)] = s
			case <-time.After(10 * time.Second):
				t.Error("the client opened no error, stdout and stderr streams")
				return
			}
		}
		byType[corev1.StreamTypeStdout].Write([]byte("output"))
		if withStatus {
			byType[corev1.StreamTypeError].Write([]byte(`{"metadata":{},"status":"Success"}`))
		}
		for _, s := range byType {
			s.Close()
		}
	}))
}

// A SPDY exec whose streams end before the command's status broke off; one with it is whole.
func TestSPDYExecWithoutItsStatusBrokeOff(t *testing.T) {
	for _, withStatus := range []bool{true, false} {
		srv := spdyExecServer(t, withStatus)
		cfg := &rest.Config{Host: srv.URL}
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		var dialed atomic.Int32
		control := func(network, address string, c syscall.RawConn) error {
			dialed.Add(1)
			return limitStall(network, address, c)
		}
		err = execDialing(context.Background(), cfg, client, ExecRequest{Namespace: "a", Pod: "p", Command: []string{"cat"}, Stdout: &out, Stderr: io.Discard}, control)
		srv.Close()
		if dialed.Load() == 0 {
			t.Errorf("with status %v: the SPDY connection was not dialed with the stall limit", withStatus)
		}
		if out.String() != "output" {
			t.Errorf("with status %v: stdout %q, want %q", withStatus, out.String(), "output")
		}
		if withStatus && err != nil {
			t.Errorf("exec with its status: %v", err)
		}
		if !withStatus && (!errors.Is(err, errNoStatus) || !ConnectionBroke(err)) {
			t.Errorf("exec without its status: %v, want it to have broken off", err)
		}
	}
}
