package kube

import (
	"context"
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// A connection dialed with limitStall ends once it stalls for stallTimeout.
func TestLimitStallSetsTheUserTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conn, err := (&net.Dialer{Control: limitStall}).DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got int
	var getErr error
	if err := raw.Control(func(fd uintptr) {
		got, getErr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
	}); err != nil || getErr != nil {
		t.Fatal(err, getErr)
	}
	if want := int(stallTimeout.Milliseconds()); got != want {
		t.Fatalf("TCP_USER_TIMEOUT %d ms, want %d", got, want)
	}
}
