package supervisor

import (
	"bytes"
	"encoding/binary"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/headend"
	"github.com/gatehouse-dev/gatehouse/internal/sysio"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
	"golang.org/x/sys/unix"
)

// Complete heads only (docs/DESIGN.md §2.4): a worker receives a connection
// only when its input holds a complete request head, one no parser would
// accept, or one over the size caps. The dispatcher finds the end of a head
// by looking at bytes (headend.Scan) and interprets nothing. When a worker
// can take the connection now, the first look reads the input out, and a
// head that arrived whole, as it almost always does, goes in the Dispatch as
// carried bytes: the worker need not read the socket. Otherwise the first
// look is a recv(MSG_PEEK), and a complete head waits for its slot in the
// socket. A head that did not arrive whole is read into a buffer of its own
// (at most headend.MaxHead bytes, counted in headBytes) and travels to the
// worker as carried bytes, so each later wake-up reads only the new bytes.
// A connection of a TLS listener is looked at the same way, one TLS record
// instead of a head (readTLS).

const (
	// stressDivisor shrinks the first-byte and head timeouts in stress mode
	// (postscreen's stress mode).
	stressDivisor = 5
	// stressAfter is how long pressure lasts before stress mode starts, and
	// calmAfter how long it must be gone before it ends.
	stressAfter = time.Second
	calmAfter   = 10 * time.Second
	// stressMinFirstByte is the shortest first-byte timeout stress mode
	// sets: a legitimate client whose request is delayed by a busy network
	// or machine must still get in (postscreen's stress greet wait is 2 s).
	stressMinFirstByte = 2 * time.Second
)

// firstByteTimeout is the live first-byte timeout, shrunk in stress mode.
func (d *dispatcher) firstByteTimeout() time.Duration {
	t := d.cfg.Limits.FirstByteTimeout
	if d.stress {
		return min(t, max(t/stressDivisor, stressMinFirstByte))
	}
	return t
}

// headTimeout is the live head deadline, shrunk in stress mode.
func (d *dispatcher) headTimeout() time.Duration {
	if d.stress {
		return headend.Deadline / stressDivisor
	}
	return headend.Deadline
}

// Deadlines are computed from when each list's entries joined, with the live
// timeout, so every list stays sorted when stress mode changes the timeout.
func (d *dispatcher) freshDeadline(c *conn) time.Time {
	return c.accepted.time().Add(d.firstByteTimeout())
}
func (d *dispatcher) headDeadline(c *conn) time.Time { return c.hd.firstByte.Add(d.headTimeout()) }
func gapDeadline(_ *dispatcher, c *conn) time.Time   { return c.hd.lastByte.Add(headend.Gap) }

// readHead looks at the input of a readable fresh, idle or head connection.
// It dispatches the connection when its head is decided and otherwise keeps
// it parked in state head.
func (d *dispatcher) readHead(c *conn, now time.Time) {
	if c.tls {
		d.readTLS(c, now)
		return
	}
	if c.state != stateHead {
		// When a worker can take the connection now, its input is taken
		// out of the socket and travels in the Dispatch as carried bytes:
		// the worker answers without reading the socket first, and a
		// head that is not complete is already out. Otherwise it is only
		// peeked, and waits in the socket, not here.
		take := d.canDispatchNow(c)
		n := d.input(c, d.peekBuf, !take)
		if n == 0 {
			return
		}
		if c.state == stateIdle && emptyLines(d.peekBuf[:n]) {
			// RFC 9112 §2.2: empty lines after a request are ignored; the
			// connection stays idle under its keep-alive timeout.
			if !take {
				sysio.Recv(c.fd, d.peekBuf[:n], 0)
			}
			d.arm(c)
			return
		}
		if st, _ := headend.Scan(d.peekBuf[:n], 0); st != headend.Incomplete || n >= headend.MaxHead {
			if st == headend.Complete && closingHead(d.peekBuf[:n]) {
				c.flags |= flagClosing
			}
			if take {
				c.carried = d.peekBuf[:n]
				if n < len(d.peekBuf) {
					c.flags |= flagDrained
				}
			}
			d.tryDispatch(c, now)
			if take && c.state == stateWaiting {
				// Not dispatched after all: the bytes are its own now,
				// and what the socket holds will have changed.
				c.carried = bytes.Clone(c.carried)
				c.flags &^= flagDrained
			}
			return
		}
		if !take {
			// Part of a head: take it out of the socket, so later
			// wake-ups read only what is new.
			var err error
			n, err = sysio.Recv(c.fd, d.peekBuf[:n], 0)
			if err != nil || n <= 0 {
				d.closeConn(c)
				return
			}
		}
		d.startHead(c, d.peekBuf[:n], now)
		d.arm(c)
		return
	}
	// A client that closed or reset mid-head gets no answer.
	n := d.input(c, d.peekBuf[:headend.MaxHead-len(c.hd.buf)], false)
	if n == 0 {
		return
	}
	d.growHead(c, d.peekBuf[:n])
	if d.headDecided(c, now) {
		return
	}
	c.hd.lastByte = now
	d.lists[listGapTimers].remove(c)
	d.lists[listGapTimers].push(c)
	d.arm(c)
}

// emptyLines reports whether b is at most four empty lines (CRLF pairs), as
// a client may send after a request.
func emptyLines(b []byte) bool {
	if len(b) == 0 || len(b) > 8 || len(b)%2 != 0 {
		return false
	}
	for i := 0; i < len(b); i += 2 {
		if b[i] != '\r' || b[i+1] != '\n' {
			return false
		}
	}
	return true
}

// canDispatchNow reports whether tryDispatch would hand plain connection c
// to a worker at once.
func (d *dispatcher) canDispatchNow(c *conn) bool {
	return !c.tls && c.kept == nil && !d.overShare(c.client) && d.pickWorker(false) != nil
}

// headDecided scans c's held head and dispatches c with it as carried bytes
// when it is decided. It reports whether it did.
func (d *dispatcher) headDecided(c *conn, now time.Time) bool {
	st, resume := headend.Scan(c.hd.buf, c.hd.scan)
	if st == headend.Incomplete && len(c.hd.buf) < headend.MaxHead {
		c.hd.scan = resume
		return false
	}
	c.carried = d.dropHead(c)
	d.tryDispatch(c, now)
	return true
}

// timeout408 closes a connection whose head deadline or gap passed, with a
// 408 written without blocking, as the canned 503 is.
func (d *dispatcher) timeout408(c *conn, now time.Time) {
	sysio.Send(c.fd, d.canned.RequestTimeout.At(now))
	unix.Shutdown(c.fd, unix.SHUT_WR)
	d.linger(c, now)
}

// underPressure reports whether admission is close to a bound: incomplete
// connections near max_queued_connections, descriptors near the reserve,
// held heads near their budget, or a connection closed to make room lately.
func (d *dispatcher) underPressure(now time.Time) bool {
	if q := d.cfg.Limits.MaxQueuedConnections; q > 0 && d.queued >= q*3/4 {
		return true
	}
	if d.fdLimit > 0 && d.fdBase+d.conns.len()+d.upstreams.HeldFDs()+d.fdReserve >= d.fdLimit*7/8 {
		return true
	}
	return d.headBytes >= headBudget*3/4 || now.Sub(d.evictedAt) < time.Second
}

// updateStress turns stress mode on after stressAfter of pressure and off
// after calmAfter without it.
func (d *dispatcher) updateStress(now time.Time) {
	if d.underPressure(now) {
		d.lastPressure = now
		if d.pressureSince.IsZero() {
			d.pressureSince = now
		}
		if !d.stress && now.Sub(d.pressureSince) >= stressAfter {
			d.stress = true
			d.stressEntered++
			d.log.Warn("admission under sustained pressure: stress mode on",
				"first_byte_timeout", d.firstByteTimeout(), "head_timeout", d.headTimeout())
		}
		return
	}
	d.pressureSince = time.Time{}
	if d.stress && now.Sub(d.lastPressure) >= calmAfter {
		d.stress = false
		d.log.Info("admission pressure over: stress mode off",
			"first_byte_timeout", d.firstByteTimeout(), "head_timeout", d.headTimeout())
	}
}

// headSnapshot adds the state of incomplete heads and admission to s.
func (d *dispatcher) headSnapshot(s *view.Snapshot) {
	s.HeadBytes = d.headBytes
	s.Stress = d.stress
	s.FirstByteTimeout = d.firstByteTimeout()
	s.HeadTimeout = d.headTimeout()
	s.Counters["timeout_head"] = d.timeoutHead
	s.Counters["timeout_head_gap"] = d.timeoutGap
	s.Counters["incomplete_evicted"] = d.incompleteEvicted
	s.Counters["stress_entered"] = d.stressEntered
	s.Counters["heads_buffered"] = d.headsBuffered
	for _, r := range refusedReasons {
		s.Counters["refused_"+r] = d.c.refused[r]
	}
}

// readTLS looks at a readable parked connection of a TLS listener: it is
// dispatched once a complete record is buffered (the record header and
// length are peeked, nothing more): a new connection's ClientHello, so the
// handshake starts on a worker that never waits for it, or a kept-alive
// connection's next record, to the worker holding its TLS state. Until then
// the connection stays parked under its timer (first byte, keep-alive), and
// SO_RCVLOWAT keeps it quiet until the record's last byte arrives.
func (d *dispatcher) readTLS(c *conn, now time.Time) {
	n := d.input(c, d.peekBuf[:recordMax+recordHeader], true)
	if n == 0 {
		return
	}
	b := d.peekBuf[:n]
	switch {
	case c.kept != nil && (b[0] < recordChangeCipherSpec || b[0] > recordApplicationData):
		// Between requests any record may come, never anything else.
		d.c.tlsNotTLS++
		d.closeConn(c)
		return
	case c.kept == nil && b[0] != recordHandshake:
		d.notTLS(c, b[0], now)
		return
	}
	need := recordHeader
	if n >= recordHeader {
		length := int(binary.BigEndian.Uint16(b[3:5]))
		if b[1] != 3 || length == 0 || length > recordMax {
			d.c.tlsNotTLS++
			d.closeConn(c)
			return
		}
		need += length
	}
	if n < need {
		if err := unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_RCVLOWAT, need); err == nil {
			c.flags |= flagLowat
		}
		d.arm(c)
		return
	}
	if c.flags&flagLowat != 0 {
		// The worker's poller must see every byte.
		unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1)
		c.flags &^= flagLowat
	}
	if c.kept == nil {
		// A dispatch now chooses the certificate from these bytes
		// (openHandshake) instead of peeking at them again.
		d.hello, d.helloLen = c, n
	}
	d.tryDispatch(c, now)
	d.hello = nil
}

// notTLS closes a connection to a TLS listener that does not start with a
// handshake record: plain HTTP (a request line starts with a letter) gets a
// plaintext 400 that says so first.
func (d *dispatcher) notTLS(c *conn, first byte, now time.Time) {
	if !('A' <= first && first <= 'Z') {
		d.c.tlsNotTLS++
		d.closeConn(c)
		return
	}
	d.c.tlsPlainHTTP++
	sysio.Send(c.fd, d.canned.PlainToTLS.At(now))
	unix.Shutdown(c.fd, unix.SHUT_WR)
	d.linger(c, now)
}
