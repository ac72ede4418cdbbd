package e2e

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// proxyV2 is a PROXY protocol v2 header for a TCP over IPv4 connection from
// src to dst.
func proxyV2(src, dst netip.AddrPort) []byte {
	b := []byte("\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c")
	b = append(b, src.Addr().AsSlice()...)
	b = append(b, dst.Addr().AsSlice()...)
	b = binary.BigEndian.AppendUint16(b, src.Port())
	return binary.BigEndian.AppendUint16(b, dst.Port())
}

// TestProxyProtocol runs a listener with proxy_protocol = true behind a
// "balancer" on 127.0.0.5 (trusted). Clients behind it are keyed by the
// header's source address, so each gets its own share; an untrusted peer is
// refused; a truncated header is closed at the first-byte deadline and a
// malformed one at once.
func TestProxyProtocol(t *testing.T) {
	h := start(t, `
listener "lb" {
  address        = "127.0.0.1:0"
  proxy_protocol = true
}
trusted_proxies = ["127.0.0.5/32"]
workers {
  count       = 1
  concurrency = 4
}
limits {
  first_byte_timeout = "2s"
}
route "/ok" {
  respond {
    body = "ok\n"
  }
}
route "/stream" {
  request_buffering = false
  respond {
    body = "streamed\n"
  }
}
`)
	lb := h.sup.Addrs()[1].String()
	dst := netip.MustParseAddrPort(lb)
	alice := netip.MustParseAddrPort("192.0.2.1:40000")
	bob := netip.MustParseAddrPort("192.0.2.2:40000")

	// via opens a connection from the balancer carrying a v2 header for src,
	// then sends rest.
	via := func(src netip.AddrPort, v1 bool, rest string) *net.TCPConn {
		c := dialFrom(t, "127.0.0.5", lb)
		t.Cleanup(func() { c.Close() })
		hdr := proxyV2(src, dst)
		if v1 {
			hdr = []byte(fmt.Sprintf("PROXY TCP4 %s %s %d %d\r\n", src.Addr(), dst.Addr(), src.Port(), dst.Port()))
		}
		if _, err := c.Write(append(hdr, rest...)); err != nil {
			t.Fatal(err)
		}
		return c
	}

	// A plain request behind the balancer is answered, and keyed by the
	// header's source.
	c := via(alice, false, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if resp, body, err := readResponse(bufio.NewReader(c), "GET"); err != nil || resp.StatusCode != 200 || body != "ok\n" {
		t.Fatalf("request behind the balancer: %v %v %q", err, resp, body)
	}
	s := h.snapshot()
	if s.Client("192.0.2.1").Conns != 1 || s.Client("127.0.0.5").Conns != 0 {
		t.Errorf("clients after a v2 header: alice %+v, balancer %+v; want the connection keyed by alice", s.Client("192.0.2.1"), s.Client("127.0.0.5"))
	}

	// Separate shares (pool 4, share 1): alice's slow body, streamed to its
	// handler, holds her one slot, so her next request waits; bob's,
	// through the same balancer (in v1 text this time), is answered at once.
	hold := via(alice, false, "POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nx")
	h.waitFor("alice's slow body at a worker", 10*time.Second, func(s view.Snapshot) bool {
		return s.Client("192.0.2.1").Out == 1
	})
	queued := via(alice, true, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
	h.waitFor("alice's second request waiting for her share", 10*time.Second, func(s view.Snapshot) bool {
		return s.Client("192.0.2.1").Waiting == 1
	})
	b := via(bob, true, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
	b.SetReadDeadline(time.Now().Add(10 * time.Second))
	if resp, _, err := readResponse(bufio.NewReader(b), "GET"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("bob behind the same balancer: %v %v", err, resp)
	}
	s = h.snapshot()
	if s.Client("192.0.2.1").Waiting != 1 {
		t.Errorf("alice's second request no longer waits: %+v", s.Client("192.0.2.1"))
	}
	if _, err := hold.Write([]byte("123456789")); err != nil {
		t.Fatal(err)
	}
	queued.SetReadDeadline(time.Now().Add(10 * time.Second))
	if resp, _, err := readResponse(bufio.NewReader(queued), "GET"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("alice's second request after her first finished: %v %v", err, resp)
	}

	before := h.snapshot()
	// An untrusted peer is refused at accept.
	u := dialFrom(t, "127.0.0.6", lb)
	defer u.Close()
	u.Write(append(proxyV2(alice, dst), "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n"...))
	if err := expectNoResponse(u, 5*time.Second); err != nil {
		t.Errorf("untrusted peer: %v", err)
	}
	// A malformed header is closed at once.
	m := dialFrom(t, "127.0.0.5", lb)
	defer m.Close()
	m.Write([]byte("PROXY TCP4 192.0.2.1 nonsense\r\nGET /ok HTTP/1.1\r\nHost: x\r\n\r\n"))
	if err := expectNoResponse(m, 5*time.Second); err != nil {
		t.Errorf("malformed header: %v", err)
	}
	// A truncated header is closed at its deadline (first_byte_timeout).
	tr := dialFrom(t, "127.0.0.5", lb)
	defer tr.Close()
	tr.Write(proxyV2(alice, dst)[:20])
	if err := expectNoResponse(tr, 10*time.Second); err != nil {
		t.Errorf("truncated header: %v", err)
	}
	after := h.snapshot()
	for _, k := range []string{"refused_proxy_untrusted", "refused_proxy_malformed", "timeout_first_byte"} {
		if after.Counters[k] != before.Counters[k]+1 {
			t.Errorf("%s: %d, want %d", k, after.Counters[k], before.Counters[k]+1)
		}
	}
	if after.Counters["dispatches"] != before.Counters["dispatches"] {
		t.Errorf("a refused PROXY connection reached a worker")
	}
}

// expectNoResponse checks that c is closed within limit without a byte
// from the server.
func expectNoResponse(c net.Conn, limit time.Duration) error {
	c.SetReadDeadline(time.Now().Add(limit))
	b := make([]byte, 64)
	n, err := c.Read(b)
	switch {
	case n > 0:
		return fmt.Errorf("got %q, want the connection closed without an answer", b[:n])
	case err == io.EOF || errors.Is(err, syscall.ECONNRESET):
		return nil
	default:
		return fmt.Errorf("not closed within %v: %v", limit, err)
	}
}
