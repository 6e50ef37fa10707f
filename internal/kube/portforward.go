package kube

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// PortForward forwards a free port on 127.0.0.1 to the pod's port until ctx ends or stop is
// called, and returns the local address (host:port).
func PortForward(ctx context.Context, cfg *rest.Config, client kubernetes.Interface, namespace, pod string, podPort int) (addr string, stop func(), err error) {
	u := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return "", nil, err
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, "POST", u)
	tunnel, err := portforward.NewSPDYOverWebsocketDialer(u, cfg)
	if err != nil {
		return "", nil, err
	}
	dialer = portforward.NewFallbackDialer(tunnel, dialer, func(err error) bool {
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
	go func() { failed <- pf.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-failed:
		cancel()
		return "", nil, fmt.Errorf("port-forward to pod %s/%s port %d: %w", namespace, pod, podPort, err)
	case <-ctx.Done():
		cancel()
		return "", nil, ctx.Err()
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) != 1 {
		cancel()
		return "", nil, fmt.Errorf("port-forward to pod %s/%s: no local port: %v", namespace, pod, err)
	}
	return "127.0.0.1:" + strconv.Itoa(int(ports[0].Local)), cancel, nil
}
