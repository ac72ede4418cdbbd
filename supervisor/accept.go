package supervisor

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/supervisor/internal/poll"
	"github.com/gatehouse-dev/gatehouse/supervisor/limits"
	"github.com/gatehouse-dev/gatehouse/supervisor/sockets"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

const (
	// acceptBatch bounds accepts per listener event so one busy listener
	// cannot starve the rest of the loop.
	acceptBatch = 64
)

// openListeners makes the listening sockets of cfg in configuration order,
// adopting those named in inherited (sockets.Open), and numbers them. Its
// errors are ErrBind.
func openListeners(cfg *config.Config, inherited map[string]int) ([]listener, error) {
	ls, err := sockets.Open(cfg.Listeners, inherited)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBind, err)
	}
	out := make([]listener, 0, len(ls))
	for i, l := range ls {
		out = append(out, listener{id: uint64(i), name: l.Name, fd: l.FD, cfgAddr: l.CfgAddr, addr: l.Addr, deferred: l.Deferred})
	}
	return out, nil
}

// armListeners adds or removes every listener from the poller.
func (d *dispatcher) armListeners(on bool) {
	if on == d.acceptArmed {
		return
	}
	for _, l := range d.listeners {
		if on {
			if err := d.add(l.fd, kindListener, l.id, poll.In); err != nil {
				d.log.Error("arming listener", "listener", l.name, "error", err)
			}
		} else {
			d.del(l.fd)
		}
	}
	d.acceptArmed = on
}

// accept takes new connections from listener i and admits them before a byte
// is read (docs/DESIGN.md §2.2).
func (d *dispatcher) accept(id uint64, now time.Time) {
	i := slices.IndexFunc(d.listeners, func(l listener) bool { return l.id == id })
	if d.stopping || d.acceptHeld() || i < 0 {
		// An event of this batch for a listener disarmed meanwhile (a
		// stop, an upgrade's hand-over) accepts nothing.
		return
	}
	l := d.listeners[i]
	proxy := d.proxyListener(l.name)
	tls := d.tlsListener(l.name)
	for n := 0; n < acceptBatch; n++ {
		if d.fdLimit > 0 && d.fdBase+d.conns.len()+d.upstreams.HeldFDs()+d.fdReserve >= d.fdLimit &&
			!d.evictIdle("descriptor reserve") && !d.evictIncomplete("descriptor reserve") {
			d.pauseAccept(now, "descriptor reserve reached and no idle or incomplete connection to close")
			return
		}
		fd, peer, err := sockets.Accept(l.fd)
		switch err {
		case nil:
		case unix.EAGAIN:
			return
		case unix.EINTR, unix.ECONNABORTED, unix.EPROTO:
			continue
		case unix.EMFILE, unix.ENFILE, unix.ENOBUFS, unix.ENOMEM:
			// Out of descriptors: make room from the idle keep-alive
			// connections, oldest first, as nginx does; never spin.
			d.c.acceptErrors++
			if !d.evictIdle("descriptors exhausted") && !d.evictIncomplete("descriptors exhausted") {
				d.pauseAccept(now, err.Error())
				return
			}
			continue
		default:
			d.c.acceptErrors++
			d.logLimited(hclog.Warn, "accept", "accept failed", "listener", l.name, "error", err)
			return
		}
		d.admit(fd, l.id, peer, proxy, tls, l.deferred, now)
	}
}

func (d *dispatcher) pauseAccept(now time.Time, why string) {
	d.c.acceptPauses++
	d.acceptPause = now.Add(acceptPause)
	d.armListeners(false)
	d.logLimited(hclog.Warn, "accept-pause", "accepting paused", "reason", why, "for", acceptPause)
}

// admit applies the admission caps to an accepted descriptor and parks it.
// Only the per-client cap (and, on a proxy_protocol listener, an untrusted
// peer) refuses a newcomer; the queued-connection cap makes room instead, by
// closing the oldest incomplete connection of the heaviest client. A
// connection from a deferring listener (deferred) is looked at at once, as
// if the poller had reported it readable: its first bytes are almost always
// a complete head or ClientHello, dispatched in this wake-up, and it is
// registered with the poller only if it must wait (arm).
func (d *dispatcher) admit(fd int, listener uint64, peer netip.AddrPort, proxy, tls, deferred bool, now time.Time) {
	key := limits.ClientKey(peer.Addr(), d.cfg.IPv6ClientPrefixLength)
	cl := d.clients[key]
	if cl == nil {
		cl = newClient(key, d.trusted(peer.Addr()), &d.conns)
	}
	refuse := ""
	switch {
	case !cl.trusted && d.penalties.Penalized(key, now):
		refuse = refusedPenalty
	case proxy && !cl.trusted:
		refuse = refusedProxyUntrusted
	case !cl.trusted && cl.conns >= d.cfg.Limits.MaxConnectionsPerClient:
		refuse = refusedPerClient
	}
	if q := d.cfg.Limits.MaxQueuedConnections; refuse == "" && q > 0 && d.queued >= q {
		// One newcomer, one connection closed. When every queued
		// connection has a complete request none is: they are served or
		// answered 503 within no_worker_timeout.
		d.evictIncomplete("max_queued_connections")
	}
	if refuse != "" {
		unix.Close(fd)
		d.c.refused[refuse]++
		// The address stays out of the log line (docs/DESIGN.md §2.2).
		d.logLimited(hclog.Debug, "refused-"+refuse, "connection refused", "reason", refuse)
		return
	}
	c := d.conns.alloc()
	if c == nil {
		unix.Close(fd)
		d.c.acceptErrors++
		d.logLimited(hclog.Warn, "conn-table-full", "connection table full", "connections", d.conns.len())
		return
	}
	c.fd, c.client, c.listener, c.peer, c.accepted, c.tls = fd, cl, uint32(listener), packPeer(peer), monoOf(now), tls
	if !deferred {
		if err := d.add(fd, kindConn, c.id, connInterest); err != nil {
			d.conns.release(c)
			unix.Close(fd)
			d.logLimited(hclog.Warn, "epoll-add", "registering connection", "error", err)
			return
		}
		c.flags |= flagPolled
	}
	d.clients[key] = cl
	cl.conns++
	d.c.accepted++
	if proxy {
		d.setState(c, stateProxy, now)
	} else {
		d.setState(c, stateFresh, now)
	}
	if deferred {
		id := c.id
		d.connEvent(c, poll.Event{}, now)
		if c := d.conns.get(id); c != nil && c.state == stateAtWorker {
			d.c.acceptDispatches++
		}
	}
}

func (d *dispatcher) trusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range d.cfg.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// proxyListener reports whether the listener named name reads PROXY headers
// in the live configuration.
func (d *dispatcher) proxyListener(name string) bool {
	for _, l := range d.cfg.Listeners {
		if l.Name == name {
			return l.ProxyProtocol
		}
	}
	return false
}

// tlsListener reports whether the listener named name terminates TLS.
func (d *dispatcher) tlsListener(name string) bool {
	for _, l := range d.cfg.Listeners {
		if l.Name == name {
			return l.TLS != nil
		}
	}
	return false
}

// acceptHeld reports whether the listeners stay unarmed: during a
// hand-over, on either side.
func (d *dispatcher) acceptHeld() bool { return d.upgrade.holdAccept || d.upgrade.out != nil }

// ErrBind marks a failure to bind a listener; cmd/gatehouse maps it to its own
// exit code.
var ErrBind = errors.New("supervisor: binding listeners")
