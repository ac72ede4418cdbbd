package supervisor

import (
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/sysio"
	"github.com/gatehouse-dev/gatehouse/supervisor/internal/proxyproto"
	"github.com/gatehouse-dev/gatehouse/supervisor/limits"
	"github.com/hashicorp/go-hclog"
)

// PROXY protocol (docs/DESIGN.md §2.3): on a listener with proxy_protocol =
// true, a connection from a trusted balancer starts in state proxy; the
// dispatcher peeks its PROXY header, consumes exactly the header's bytes, and
// re-keys the connection to the client the header names, so per-client caps
// and shares apply to real clients behind the balancer. The header must
// arrive within the first-byte timeout; a malformed one closes the
// connection. A connection from any other peer is refused at accept.

// readProxy reads the PROXY header of a readable connection in state proxy.
func (d *dispatcher) readProxy(c *conn, now time.Time) {
	buf := d.peekBuf[:proxyproto.MaxLen]
	n := d.input(c, buf, true)
	if n == 0 {
		return
	}
	h, hlen, err := proxyproto.Parse(buf[:n])
	if err == proxyproto.ErrIncomplete {
		d.arm(c)
		return
	}
	if err != nil {
		d.c.refused[refusedProxyMalformed]++
		d.logLimited(hclog.Warn, "proxy-malformed", "closing a connection with a malformed PROXY header", "error", err)
		d.closeConn(c)
		return
	}
	// Consume exactly the header: the request behind it stays in the socket.
	if m, err := sysio.Recv(c.fd, buf[:hlen], 0); err != nil || m != hlen {
		d.closeConn(c)
		return
	}
	d.setState(c, stateFresh, now)
	if h.Command == proxyproto.Proxy && h.Source.IsValid() {
		c.peer = packPeer(h.Source)
		if !d.rekey(c) {
			return
		}
	}
	// Whatever followed the header is looked at now; an empty socket waits
	// for its first byte under the rest of the first-byte timeout.
	if hlen < n {
		d.readHead(c, now)
		return
	}
	d.arm(c)
}

// rekey moves c from the balancer's client record to the one of its peer
// address, under that client's cap. It reports false if it closed c.
func (d *dispatcher) rekey(c *conn) bool {
	key := limits.ClientKey(c.peer.addrPort().Addr(), d.cfg.IPv6ClientPrefixLength)
	old := c.client
	if old.key == key {
		return true
	}
	cl := d.clients[key]
	if cl == nil {
		cl = newClient(key, d.trusted(c.peer.addrPort().Addr()), &d.conns)
	}
	if !cl.trusted && cl.conns >= d.cfg.Limits.MaxConnectionsPerClient {
		d.c.refused[refusedPerClient]++
		d.logLimited(hclog.Debug, "refused-"+refusedPerClient, "connection refused", "reason", refusedPerClient, "via", "proxy_protocol")
		d.closeConn(c)
		return false
	}
	d.leaveIncomplete(c)
	old.conns--
	if old.conns == 0 && old.out == 0 {
		delete(d.clients, old.key)
	}
	d.clients[key] = cl
	cl.conns++
	c.client = cl
	cl.incomplete.push(c)
	return true
}
