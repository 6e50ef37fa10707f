package integration

import (
	"bufio"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/cryptobyte"
)

// resetProxy stands between ferry and an API server on 127.0.0.1 and breaks streams as an API
// server restarting, or a load balancer dropping them, does: a connection that does not offer
// HTTP/2 (an exec or port-forward: WebSocket and SPDY are HTTP/1.1; API calls go over HTTP/2) is
// reset, both ways, once it has carried after bytes (to and from the server): every every-th
// such stream, until budget resets were made. With apiWrites, the connections of API calls (HTTP/2) are reset
// instead, once they sent apiWrites bytes to the server: writes, mostly, are then in flight. It
// sees only the TLS ClientHello's ALPN, in the clear: the API server's TLS goes through it whole.
type resetProxy struct {
	ln        net.Listener
	upstream  string
	after     atomic.Int64 // read by each relay as it passes bytes
	every     int
	apiWrites int64

	mu      sync.Mutex
	budget  int
	resets  int
	crossed int // streams that carried after bytes
	streams int // connections that did not offer HTTP/2
}

func startResetProxy(t testing.TB, upstream string, after int64, every, budget int) *resetProxy {
	t.Helper()
	p := &resetProxy{upstream: upstream, every: every, budget: budget}
	p.after.Store(after)
	return startProxy(t, p)
}

// startAPIResetProxy starts a resetProxy that resets the connections of API calls once they sent
// apiWrites bytes, budget times.
func startAPIResetProxy(t testing.TB, upstream string, apiWrites int64, budget int) *resetProxy {
	t.Helper()
	return startProxy(t, &resetProxy{upstream: upstream, apiWrites: apiWrites, every: 1, budget: budget})
}

func startProxy(t testing.TB, p *resetProxy) *resetProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.ln = ln
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { p.serve(c.(*net.TCPConn)) })
		}
	})
	return p
}

// URL is the proxy's https:// URL.
func (p *resetProxy) URL() string { return "https://" + p.ln.Addr().String() }

// counts returns the streams the proxy saw and how many it reset.
func (p *resetProxy) counts() (streams, resets int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.streams, p.resets
}

func (p *resetProxy) serve(client *net.TCPConn) {
	defer client.Close()
	conn, err := net.DialTimeout("tcp", p.upstream, 10*time.Second)
	if err != nil {
		return
	}
	server := conn.(*net.TCPConn)
	defer server.Close()
	in := bufio.NewReaderSize(client, 1<<16)
	client.SetReadDeadline(time.Now().Add(10 * time.Second))
	stream := !slices.Contains(clientHelloALPN(in), "h2")
	client.SetReadDeadline(time.Time{})
	if stream {
		p.mu.Lock()
		p.streams++
		p.mu.Unlock()
	}
	// A stream's bytes both ways count: a backup's data comes from the API server, a restore's
	// goes to it. An API connection's count only what it sends.
	var carried atomic.Int64
	relay := func(dst *net.TCPConn, src io.Reader, toServer bool) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
				if p.passes(&carried, int64(n), stream, toServer) && p.take() {
					// SO_LINGER 0: close sends RST, and each peer's next read fails with ECONNRESET.
					client.SetLinger(0)
					server.SetLinger(0)
					client.Close()
					server.Close()
					return
				}
			}
			if err != nil {
				dst.CloseWrite()
				return
			}
		}
	}
	done := make(chan struct{})
	go func() { relay(server, in, true); close(done) }()
	relay(client, server, false)
	<-done
}

// passes adds n bytes relayed to what the connection carried, and says whether they took it
// past the point where it may be reset.
func (p *resetProxy) passes(carried *atomic.Int64, n int64, stream, toServer bool) bool {
	limit, counts := p.after.Load(), stream && p.apiWrites == 0
	if p.apiWrites > 0 {
		limit, counts = p.apiWrites, !stream && toServer
	}
	if !counts {
		return false
	}
	total := carried.Add(n)
	return total >= limit && total-n < limit
}

// arm starts counting anew: every every-th stream to carry after bytes from now on is reset,
// budget times at most.
func (p *resetProxy) arm(every, budget int) {
	p.armAfter(p.after.Load(), every, budget)
}

// armAfter arms the proxy (arm) to reset streams once they carried after bytes.
func (p *resetProxy) armAfter(after int64, every, budget int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.after.Store(after)
	p.every, p.budget, p.resets, p.crossed, p.streams = every, budget, 0, 0, 0
}

// take counts a stream that carried after bytes, and says whether it is to be reset.
func (p *resetProxy) take() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.crossed++
	if p.resets == p.budget || p.crossed%p.every != 0 {
		return false
	}
	p.resets++
	return true
}

// clientHelloALPN peeks at the TLS ClientHello at the start of r (its first record) and returns
// the protocols its ALPN extension offers; nil when it has none or is not one.
func clientHelloALPN(r *bufio.Reader) []string {
	header, err := r.Peek(5)
	if err != nil || header[0] != 22 { // a handshake record
		return nil
	}
	record, err := r.Peek(5 + (int(header[3])<<8 | int(header[4])))
	if err != nil {
		return nil
	}
	s := cryptobyte.String(record[5:])
	var msgType uint8
	var hello, sessionID, suites, compression, exts cryptobyte.String
	if !s.ReadUint8(&msgType) || msgType != 1 || !s.ReadUint24LengthPrefixed(&hello) ||
		!hello.Skip(2+32) || !hello.ReadUint8LengthPrefixed(&sessionID) ||
		!hello.ReadUint16LengthPrefixed(&suites) || !hello.ReadUint8LengthPrefixed(&compression) ||
		!hello.ReadUint16LengthPrefixed(&exts) {
		return nil
	}
	for !exts.Empty() {
		var typ uint16
		var data cryptobyte.String
		if !exts.ReadUint16(&typ) || !exts.ReadUint16LengthPrefixed(&data) {
			return nil
		}
		if typ != 16 { // application_layer_protocol_negotiation
			continue
		}
		var list cryptobyte.String
		if !data.ReadUint16LengthPrefixed(&list) {
			return nil
		}
		var protos []string
		for !list.Empty() {
			var proto cryptobyte.String
			if !list.ReadUint8LengthPrefixed(&proto) {
				return nil
			}
			protos = append(protos, string(proto))
		}
		return protos
	}
	return nil
}
