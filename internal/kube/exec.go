// Package kube is the Kubernetes plumbing several ferry packages share: exec and port-forward
// streams to pods.
package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/gorilla/websocket"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
)

// ExecRequest names a command to run in a pod and its streams. Stdin may be nil.
type ExecRequest struct {
	Namespace, Pod, Container string
	Command                   []string
	Stdin                     io.Reader
	Stdout, Stderr            io.Writer
}

// Exec runs the command in the pod and streams its input and output, over WebSocket with a SPDY
// fallback as kubectl does. It returns when the command ends; a non-zero exit is an error.
func Exec(ctx context.Context, cfg *rest.Config, client kubernetes.Interface, req ExecRequest) error {
	opts := &corev1.PodExecOptions{
		Container: req.Container, Command: req.Command,
		Stdin: req.Stdin != nil, Stdout: req.Stdout != nil, Stderr: req.Stderr != nil,
	}
	u := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(req.Namespace).Name(req.Pod).
		SubResource("exec").VersionedParams(opts, scheme.ParameterCodec).URL()
	spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", u)
	if err != nil {
		return fmt.Errorf("exec in pod %s/%s: %w", req.Namespace, req.Pod, err)
	}
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
	if err != nil {
		return fmt.Errorf("exec in pod %s/%s: %w", req.Namespace, req.Pod, err)
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return err
	}
	err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr})
	if err != nil {
		return fmt.Errorf("exec %q in pod %s/%s: %w", req.Command, req.Namespace, req.Pod, err)
	}
	return nil
}

// ExecAttempts bounds how often ferry runs what a broken connection cut short (ConnectionBroke),
// the first run included.
const ExecAttempts = 3

// ConnectionBroke tells an exec whose connection broke off in transit — reset, closed without
// WebSocket's closing handshake, or its heartbeat unanswered for a minute (an API server answers
// no ping while it waits on the other end) — from a command that failed or an exec that was
// refused. An API server restarting, a load balancer or a kubelet dropping its streams all end
// an exec so. The command may still be running in the pod: only what is safe to run twice may be
// run again.
func ConnectionBroke(err error) bool {
	var closed *websocket.CloseError
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.As(err, &closed) && closed.Code == websocket.CloseAbnormalClosure
}
