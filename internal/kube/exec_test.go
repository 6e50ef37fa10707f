package kube

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"

	"github.com/gorilla/websocket"
)

func TestConnectionBroke(t *testing.T) {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		// As client-go's WebSocket executor wraps them.
		{fmt.Errorf(`exec ["mysqldump"] in pod a/p: error reading from error stream: next reader: %w`, reset), true},
		// The client's heartbeat found no pong for a minute: the API server waited on the pod.
		{fmt.Errorf("exec in pod a/m: error reading from error stream: next reader: %w",
			&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}), true},
		// The API server went away without WebSocket's closing handshake.
		{fmt.Errorf("exec in pod a/p: next reader: %w", &websocket.CloseError{Code: websocket.CloseAbnormalClosure, Text: "unexpected EOF"}), true},
		{fmt.Errorf("exec in pod a/p: %w", &websocket.CloseError{Code: websocket.CloseNormalClosure}), false},
		{fmt.Errorf(`exec ["mysql"] in pod a/p: command terminated with exit code 1`), false},
		{errors.New("pods \"p\" is forbidden: User cannot create resource \"pods/exec\""), false},
		// A SPDY exec whose streams ended before the command's status.
		{fmt.Errorf(`exec ["ferry" "mover" "pack"] in pod a/m: %w`, errNoStatus), true},
		// A tar or a listing that ends before its end marker.
		{fmt.Errorf("volume a/b: %w", io.ErrUnexpectedEOF), true},
		// An S3 request through a port-forward whose tunnel broke.
		{fmt.Errorf("put: %w", &url.Error{Op: "Put", URL: "http://127.0.0.1:1/b/k", Err: &net.OpError{Op: "readfrom", Net: "tcp", Err: net.ErrClosed}}), true},
		// minio-go's word for a request whose connection closed before an answer.
		{fmt.Errorf("put: %w", &url.Error{Op: "Put", URL: "http://127.0.0.1:1/b/k", Err: errors.New("Connection closed by foreign host http://127.0.0.1:1/b/k. Retry again.")}), true},
		// What a second run would meet again.
		{&url.Error{Op: "Get", URL: "https://127.0.0.1:1/", Err: &tls.CertificateVerificationError{Err: errors.New("x509: unknown authority")}}, false},
		{&url.Error{Op: "Get", URL: "https://api.example:1/", Err: &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "api.example"}}}, false},
		{Final(fmt.Errorf("load: %w; and put it back: %w", reset, reset)), false},
		{errors.New("mover pod a/m was deleted"), false},
		{fmt.Errorf("put: %w", errors.New("storage full")), false},
		{nil, false},
	} {
		if got := ConnectionBroke(tc.err); got != tc.want {
			t.Errorf("ConnectionBroke(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
