package supervisor

import (
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/sysio"
	"github.com/gatehouse-dev/gatehouse/supervisor/internal/poll"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

const (
	// lingerTimeout bounds how long a closed-for-writing connection's input is
	// discarded before the descriptor is closed (nginx: lingering_timeout).
	lingerTimeout = 2 * time.Second
	lingerBuf     = 16 << 10
	// connInterest parks a connection: one readiness report, then quiet
	// until re-armed.
	connInterest = poll.In | poll.OneShot
)

// connEvent handles readiness of a parked or lingering connection. The
// registration is one-shot, so it stays quiet until re-armed.
func (d *dispatcher) connEvent(c *conn, ev poll.Event, now time.Time) {
	switch c.state {
	case stateLinger:
		d.discard(c)
		return
	case stateProxy:
		d.readProxy(c, now)
		return
	case stateFresh, stateIdle, stateHead:
	default:
		return
	}
	if ev.HangUp {
		// The peer closed or reset. If nothing is left to read, close here
		// rather than spend a worker round on it.
		var b [1]byte
		n, err := sysio.Recv(c.fd, b[:], unix.MSG_PEEK)
		if n <= 0 && err != unix.EAGAIN {
			d.c.peerClosed++
			d.logLimited(hclog.Debug, "peer-closed", "client closed a connection before a request")
			d.closeConn(c)
			return
		}
	}
	d.readHead(c, now)
}

// discard reads and drops what a lingering connection still sends.
func (d *dispatcher) discard(c *conn) {
	for i := 0; i < 4; i++ {
		n, err := sysio.Recv(c.fd, d.scratch, 0)
		if err == unix.EAGAIN {
			d.arm(c)
			return
		}
		if n <= 0 || err != nil {
			d.closeConn(c)
			return
		}
	}
	d.arm(c)
}

// arm re-arms c's one-shot registration, or registers c with the poller if
// it never was (a connection accepted with its input, flagPolled).
func (d *dispatcher) arm(c *conn) {
	if c.flags&flagPolled == 0 {
		if err := d.add(c.fd, kindConn, c.id, connInterest); err != nil {
			d.logLimited(hclog.Warn, "epoll-add", "registering connection", "error", err)
			d.closeConn(c)
			return
		}
		c.flags |= flagPolled
		return
	}
	if err := d.mod(c.fd, kindConn, c.id, connInterest); err != nil {
		d.logLimited(hclog.Warn, "epoll-mod", "re-arming connection", "error", err)
		d.closeConn(c)
		return
	}
}

// park holds a kept-alive connection until its next request or its idle
// timeout. Over keep_alive_max_connections the oldest idle one is closed.
func (d *dispatcher) park(c *conn, now time.Time) {
	if d.idle >= d.cfg.Limits.KeepAliveMaxConnections {
		d.evictIdle("keep_alive_max_connections")
	}
	d.setState(c, stateIdle, now)
	d.arm(c)
}

// evictIdle closes the oldest idle kept-alive connection, if any. The
// Keep-Alive timeout hint is advisory (RFC 9112 §9.3), so this is allowed.
func (d *dispatcher) evictIdle(why string) bool {
	c := d.lists[listIdleTimers].first()
	if c == nil {
		return false
	}
	d.c.idleEvicted++
	// Making room under keep_alive_max_connections is routine; running out
	// of descriptors is for the operator to look at.
	level := hclog.Warn
	if why == "keep_alive_max_connections" {
		level = hclog.Debug
	}
	d.logLimited(level, "evict-"+why, "closing oldest idle connection", "reason", why)
	d.closeConn(c)
	return true
}

func (d *dispatcher) linger(c *conn, now time.Time) {
	d.setState(c, stateLinger, now)
	d.arm(c)
}

// closeConn forgets a connection, shuts it down and closes the dispatcher's
// descriptor. It deregisters before closing: a registration outliving its
// descriptor would be stale for good while a worker still holds a duplicate.
// shutdown(SHUT_RDWR) acts on the connection, not the descriptor: the client
// gets its FIN now, and a copy a compromised worker kept with dup() can
// neither read nor inject another byte (close alone would leave the
// connection open while any copy lives). A closing connection's descriptor
// was given up at its dispatch (c.fd is -1): only the record goes.
func (d *dispatcher) closeConn(c *conn) {
	d.leaveState(c, stateClosed)
	if c.fd >= 0 {
		if c.flags&flagPolled != 0 {
			d.del(c.fd)
		}
		unix.Shutdown(c.fd, unix.SHUT_RDWR)
		unix.Close(c.fd)
	}
	d.forget(c)
	cl := c.client
	cl.conns--
	if cl.conns == 0 && cl.out == 0 {
		delete(d.clients, cl.key)
	}
	d.conns.release(c)
	d.c.closed++
}
