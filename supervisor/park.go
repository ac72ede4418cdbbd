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
	// headBudget bounds the bytes held in incomplete heads; over it the
	// heaviest client's oldest incomplete connection is closed.
	headBudget = 64 << 20
	// connInterest parks a connection: one readiness report, then quiet
	// until re-armed.
	connInterest = poll.In | poll.OneShot
)

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

// setState moves c from its state to s, and does all the bookkeeping of
// connection states: it takes c off the lists and counts of the state it
// leaves and puts it on those of s, with the deadline of s (from now).
// Only where s continues the old state's wait does c keep its timer:
// proxy → fresh (the first-byte timeout runs on, as does c's place among
// its client's incomplete connections) and waiting → waiting (moved
// between the pool's queue and its client's, under the same
// no_worker_timeout). closeConn leaves a state the same way (leaveState).
//
// What setState needs from its caller: for at_worker, c.worker (dispatch);
// for head, the head's first bytes in c.hd.buf (startHead). A connection
// leaving at_worker has had its round released already (done releases it
// first, so that pump can use the slot).
//
// Sub-states carried as flags rather than states, and who moves them:
//   - fresh: counted in queued (max_queued_connections) from accept until
//     its first request: set on entering fresh or proxy from new, cleared
//     (unqueue) on a plain connection's first dispatch, at the first Done
//     that served a request (a TLS connection's head is not seen), or at
//     close.
//   - round: how a connection at_worker is accounted (pool, body,
//     bodyWait, spent, stream, and upgrade within stream); setRound moves
//     it, and setState enters pool and releases it (release).
//   - kept: a worker holds a copy of the descriptor (affinity.go: keptBy,
//     takeKept, forget); any state but at_worker.
//   - hot: a worker waits for a kept-alive connection's next request
//     without returning it; to the dispatcher it is at_worker in round
//     pool (affinity.go).
//   - lowat: SO_RCVLOWAT raised on a parked TLS connection (tls.go).
func (d *dispatcher) setState(c *conn, s connState, now time.Time) {
	if moves[c.state]&(1<<s) == 0 {
		d.badMoves++
		d.logLimited(hclog.Error, "bad-move", "connection state change not permitted", "from", c.state, "to", s)
	}
	from := c.state
	d.leaveState(c, s)
	c.state = s
	l := d.cfg.Limits
	switch s {
	case stateFresh, stateProxy:
		if from == stateNew {
			c.fresh = true
			d.queued++
			c.client.incomplete.push(c)
			d.lists[listFreshTimers].push(c)
		}
	case stateIdle:
		d.idle++
		c.deadline = monoOf(now.Add(l.KeepAliveIdleTimeout))
		d.lists[listIdleTimers].push(c)
	case stateWaiting:
		// The queue tryDispatch chose, by the same rule.
		q := &d.lists[listWaiting]
		if d.overShare(c.client) {
			q = &c.client.waiting
		}
		q.push(c)
		if c.tlist != listWaitTimers {
			c.deadline = monoOf(now.Add(l.NoWorkerTimeout))
			d.lists[listWaitTimers].push(c)
		}
	case stateAtWorker:
		if !c.tls {
			// A plain connection is dispatched with its first head
			// complete: it has sent its first request, and a long
			// answer (a stream, an upload) must not hold a place of
			// max_queued_connections, where it would have newcomers
			// evict each other.
			d.unqueue(c)
		} else {
			c.worker.tls++
		}
		d.enterRound(c, roundPool)
	case stateLinger:
		c.deadline = monoOf(now.Add(lingerTimeout))
		d.lists[listLingerTimers].push(c)
	case stateHead:
		// Room is made before c joins its client's incomplete
		// connections, so c itself is never the one closed.
		in := c.hd.buf
		for d.headBytes+len(in) > headBudget && d.evictIncomplete("head buffer budget") {
		}
		c.hd.buf, c.hd.firstByte, c.hd.lastByte = nil, now, now
		d.growHead(c, in)
		d.lists[listGapTimers].push(c)
		d.lists[listHeadTimers].push(c)
		c.client.incomplete.push(c)
		d.headsBuffered++
	}
}

// leaveState takes c off the lists and counts of its state, but for those
// state to continues (setState); to is stateClosed when c is being closed.
func (d *dispatcher) leaveState(c *conn, to connState) {
	from := c.state
	if !(from == stateProxy && to == stateFresh || from == stateWaiting && to == stateWaiting) {
		if c.tlist == listIdleTimers {
			d.idle--
		}
		d.leaveTimer(c)
		d.leaveIncomplete(c)
	}
	d.leaveQueue(c)
	if from == stateHead || to == stateClosed {
		d.dropHead(c)
	}
	if to == stateClosed {
		if c.worker != nil {
			d.release(c)
		}
		d.unqueue(c)
	}
}

// unqueue takes c out of the queued count, if it is in it.
func (d *dispatcher) unqueue(c *conn) {
	if c.fresh {
		c.fresh = false
		d.queued--
	}
}

// startHead parks c in state head holding in, the first bytes of its next
// request. The caller arms c or dispatches it.
func (d *dispatcher) startHead(c *conn, in []byte, now time.Time) {
	c.hd = &headState{buf: in}
	d.setState(c, stateHead, now)
}

// growHead appends in to c's head, keeping headBytes in step.
func (d *dispatcher) growHead(c *conn, in []byte) {
	d.headBytes -= cap(c.hd.buf)
	c.hd.buf = append(c.hd.buf, in...)
	d.headBytes += cap(c.hd.buf)
}

// dropHead forgets c's incomplete head, if any, and returns its bytes.
func (d *dispatcher) dropHead(c *conn) []byte {
	var h []byte
	if c.hd != nil {
		h = c.hd.buf
		d.headBytes -= cap(h)
		c.hd = nil
	}
	if c.qlist == listHeadTimers {
		d.lists[listHeadTimers].remove(c)
	}
	if c.tlist == listGapTimers {
		d.lists[listGapTimers].remove(c)
	}
	return h
}

// evictIncomplete makes room (docs/DESIGN.md §2.2): it closes the oldest
// connection that has not completed a head of the client key holding the
// most of them. The newcomer is likelier legitimate than a connection that
// has been dribbling for seconds. It reports whether it closed one.
func (d *dispatcher) evictIncomplete(why string) bool {
	var heaviest *client
	for _, cl := range d.clients {
		if cl.incomplete.n == 0 || heaviest != nil && cl.incomplete.n < heaviest.incomplete.n {
			continue
		}
		// Between clients holding as many, the one whose oldest
		// incomplete connection has waited longest.
		if heaviest == nil || cl.incomplete.n > heaviest.incomplete.n ||
			incompleteSince(cl.incomplete.first()).Before(incompleteSince(heaviest.incomplete.first())) {
			heaviest = cl
		}
	}
	if heaviest == nil {
		return false
	}
	c := heaviest.incomplete.first()
	d.incompleteEvicted++
	d.evictedAt = d.s.now()
	d.logLimited(hclog.Debug, "evict-incomplete-"+why, "closing the oldest incomplete connection of the heaviest client", "reason", why)
	d.closeConn(c)
	return true
}

// incompleteSince is when c started waiting for its head: its first byte in
// state head, else its accept.
func incompleteSince(c *conn) time.Time {
	if c.hd != nil {
		return c.hd.firstByte
	}
	return c.accepted.time()
}

// input peeks at (peek) or reads up to len(buf) bytes of c's input. It
// returns 0 when this wake-up is over: nothing there yet (c is re-armed), or
// the peer closed or reset the connection (c is closed and counted).
func (d *dispatcher) input(c *conn, buf []byte, peek bool) int {
	var n int
	var err error
	if peek {
		n, err = sysio.Recv(c.fd, buf, unix.MSG_PEEK)
	} else {
		n, err = sysio.Recv(c.fd, buf, 0)
	}
	switch {
	case err == unix.EAGAIN || err == unix.EINTR:
		d.arm(c)
		return 0
	case err != nil || n == 0:
		d.c.peerClosed++
		d.closeConn(c)
		return 0
	}
	return n
}
