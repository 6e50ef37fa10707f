package kube

import (
	"errors"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// limitStall has the kernel end a TCP connection whose sent data goes unacknowledged for
// stallTimeout. A SPDY connection that stalls (a network path gone without a reset) would
// otherwise hang until TCP gives up, after a quarter of an hour; client-go's SPDY pings, every
// 5 s, keep data in flight, so this bounds it as WebSocket's heartbeat does.
func limitStall(network, _ string, c syscall.RawConn) error {
	if network != "tcp" && network != "tcp4" && network != "tcp6" {
		return nil
	}
	var setErr error
	err := c.Control(func(fd uintptr) {
		setErr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(stallTimeout/time.Millisecond))
	})
	return errors.Join(err, setErr)
}
