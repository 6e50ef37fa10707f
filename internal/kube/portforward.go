package kube

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// PortForward forwards a free port on 127.0.0.1 to the pod's port until ctx ends or stop is
// called, and returns the local address (host:port). A tunnel that breaks (an API server
// restarting, a load balancer dropping it) is opened again for the next connection: the
// connections it carried break with it, and their clients try again.
func PortForward(ctx context.Context, cfg *rest.Config, client kubernetes.Interface, namespace, pod string, podPort int) (addr string, stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	t := &tunnel{ctx: ctx, cfg: cfg, client: client, namespace: namespace, pod: pod, podPort: podPort}
	if _, err := t.current(); err != nil {
		cancel()
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		return "", nil, fmt.Errorf("port-forward to pod %s/%s: %w", namespace, pod, err)
	}
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go t.relay(conn)
		}
	}()
	return ln.Addr().String(), cancel, nil
}

// tunnel is the port-forward a PortForward's connections go through, opened again once it broke.
type tunnel struct {
	ctx            context.Context
	cfg            *rest.Config
	client         kubernetes.Interface
	namespace, pod string
	podPort        int
	mu             sync.Mutex
	addr           string        // client-go's forwarder's local address
	broke          chan struct{} // closed when that forwarder's connection ended
}

// relay carries one local connection to the pod, through the tunnel as it is now.
func (t *tunnel) relay(conn net.Conn) {
	defer conn.Close()
	addr, err := t.current()
	if err != nil {
		return
	}
	upstream, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer upstream.Close()
	done := make(chan struct{})
	go func() {
		io.Copy(upstream, conn)
		upstream.(*net.TCPConn).CloseWrite()
		close(done)
	}()
	io.Copy(conn, upstream)
	conn.(*net.TCPConn).CloseWrite()
	<-done
}

// current returns the local address of a forwarder whose connection to the API server is up,
// opening one when there is none or the last one broke.
func (t *tunnel) current() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.broke != nil {
		select {
		case <-t.broke:
		default:
			return t.addr, nil
		}
	}
	addr, broke, err := forward(t.ctx, t.cfg, t.client, t.namespace, t.pod, t.podPort)
	if err != nil {
		return "", err
	}
	t.addr, t.broke = addr, broke
	return addr, nil
}

// forward starts client-go's forwarder from a free port on 127.0.0.1 to the pod's port, over
// WebSocket with a SPDY fallback as kubectl does; broke is closed when its connection ends.
func forward(ctx context.Context, cfg *rest.Config, client kubernetes.Interface, namespace, pod string, podPort int) (addr string, broke chan struct{}, err error) {
	u := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return "", nil, err
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, "POST", u)
	websocket, err := portforward.NewSPDYOverWebsocketDialer(u, cfg)
	if err != nil {
		return "", nil, err
	}
	dialer = portforward.NewFallbackDialer(websocket, dialer, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	ctx, cancel := context.WithCancel(ctx)
	ready := make(chan struct{})
	pf, err := portforward.NewOnAddressesWithContext(ctx, dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(podPort)}, ready, io.Discard, io.Discard)
	if err != nil {
		cancel()
		return "", nil, err
	}
	failed := make(chan error, 1)
	ended := make(chan struct{}) // not broke: a return sets that to nil
	go func() {
		failed <- pf.ForwardPorts() // before the cancel, which would hide why it failed
		cancel()                    // its listener goes with it
		close(ended)
	}()
	select {
	case <-ready:
	case err := <-failed:
		return "", nil, fmt.Errorf("port-forward to pod %s/%s port %d: %w", namespace, pod, podPort, err)
	case <-ctx.Done():
		select {
		case err := <-failed:
			return "", nil, fmt.Errorf("port-forward to pod %s/%s port %d: %w", namespace, pod, podPort, err)
		default:
			return "", nil, ctx.Err()
		}
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) != 1 {
		cancel()
		return "", nil, fmt.Errorf("port-forward to pod %s/%s: no local port: %v", namespace, pod, err)
	}
	return "127.0.0.1:" + strconv.Itoa(int(ports[0].Local)), ended, nil
}
