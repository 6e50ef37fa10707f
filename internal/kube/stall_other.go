//go:build !linux

package kube

import "syscall"

// limitStall does nothing here: TCP_USER_TIMEOUT is Linux's. A stalled SPDY connection then
// ends when TCP gives up on it.
func limitStall(network, address string, c syscall.RawConn) error { return nil }
