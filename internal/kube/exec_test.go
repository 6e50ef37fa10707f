package kube

import (
	"errors"
	"fmt"
	"net"
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
		{nil, false},
	} {
		if got := ConnectionBroke(tc.err); got != tc.want {
			t.Errorf("ConnectionBroke(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
