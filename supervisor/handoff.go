package supervisor

import (
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/headend"
	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/hashicorp/go-hclog"
)

// tryDispatch hands a readable connection to a worker under both bounds: the
// client's share and the pool. Over either, it waits outside the poller,
// oldest first, and its no-worker timer runs (docs/DESIGN.md §2.5).
func (d *dispatcher) tryDispatch(c *conn, now time.Time) {
	cl := c.client
	if !cl.trusted && d.penalties.Penalized(cl.key, now) {
		// Connections opened before the penalty are refused too.
		d.c.refused[refusedPenalty]++
		d.closeConn(c)
		return
	}
	if d.overShare(cl) {
		d.setState(c, stateWaiting, now)
		cl.waits++
		d.c.shareWaits++
		return
	}
	w := d.pickWorker(c.tls && c.kept == nil)
	if c.kept != nil {
		w = d.affine(c, w, now)
	}
	if w == nil {
		d.setState(c, stateWaiting, now)
		d.c.poolWaits++
		return
	}
	d.dispatch(w, c, now)
}

// dispatch sends c to w. Admission is counted here, explicitly, never
// inferred from the state of a pool.
func (d *dispatcher) dispatch(w *workerProc, c *conn, now time.Time) {
	c.worker = w
	w.handed = true
	d.setState(c, stateAtWorker, now)
	d.c.dispatches++
	m := &d.dispatchMsg
	m.Reset()
	m.ConnId = c.id
	m.HasFd = c.kept == nil
	m.Listener = uint32(c.listener)
	m.Carried = c.carried
	m.Drained = c.flags&flagDrained != 0
	c.flags &^= flagDrained
	m.Requests = c.requests
	m.AcceptedUnixNano = c.accepted.time().UnixNano()
	m.Tls = c.tls
	// By name, which reloads keep: the worker applies that listener's
	// certificates, hsts and https_redirect.
	m.ListenerName = d.listenerName(uint64(c.listener))
	if c.tls && c.kept == nil {
		d.openHandshake(w, c, m)
	}
	if c.client.trusted {
		d.deriveRateKey(c)
	}
	b, err := d.dispatchEnc.Encode(m, c.peer.addrPort(), c.client.key)
	m.Carried = nil
	c.carried = nil
	if err != nil {
		// Only a Dispatch the dispatcher built wrong is refused.
		d.workerGone(w, err.Error(), true)
		return
	}
	fd, owned := c.fd, false
	closing := c.flags&flagClosing != 0
	c.flags &^= flagClosing
	switch {
	case c.kept != nil:
		d.takeKept(c)
		fd = -1
	case closing:
		// The connection ends with this round: its descriptor goes to
		// the worker for good, closed here once sent (closingHead). A
		// registration would outlive it, so it goes first.
		if c.flags&flagPolled != 0 {
			d.del(fd)
		}
		c.flags &^= flagPolled
		c.fd, owned = -1, true
		d.c.closingDispatches++
	}
	d.sendEncoded(w, b, fd, owned)
}

// pump dispatches waiting connections after slots were released: first the
// pool's queue, oldest first, then the head of the client's own queue, which
// now fits its share (it joins the pool's queue if no slot is left).
func (d *dispatcher) pump(cl *client, now time.Time) {
	d.pumpBodies()
	// Each turn takes a connection out of the queue, so this ends.
	for d.lists[listWaiting].first() != nil {
		c := d.nextWaiting(now)
		if c == nil {
			break
		}
		d.lists[listWaiting].remove(c)
		d.tryDispatch(c, now)
	}
	if cl != nil && cl.waiting.first() != nil && !d.overShare(cl) {
		c := cl.waiting.pop()
		d.tryDispatch(c, now)
	}
}

// grantBody gives c, whose body is complete, a pool slot at its worker when
// the share and the pool allow, and tells the worker. The worker's own
// concurrency is not checked: the connection is already there.
func (d *dispatcher) grantBody(c *conn) bool {
	cl := c.client
	if d.out >= d.pool || d.overShare(cl) {
		return false
	}
	d.setRound(c, roundPool, 0)
	return true
}

// pumpBodies grants slots to waiting complete bodies, oldest first among
// those whose client is under its share. They go before new dispatches:
// their requests are further along.
func (d *dispatcher) pumpBodies() {
	for c := d.lists[listBodyWaiting].first(); c != nil && d.out < d.pool; {
		next := d.lists[listBodyWaiting].next(c)
		d.grantBody(c)
		c = next
	}
}

// checkDone checks a Done's fields; the frame table has checked that the
// worker holds the connection. Everything is checked before the slots are
// released: the connection is still the worker's, so a kill closes it.
func checkDone(d *dispatcher, w *workerProc, f *proto.Frame, c *conn) string {
	m := f.GetDone()
	switch {
	case m.GetKept() && (m.GetDisposition() != proto.Disposition_KEEP_ALIVE || c.tls && len(m.GetCarried()) > 0):
		return "Done keeps a connection that is not kept alive, or carries a TLS connection's plaintext"
	case m.GetKept() && !c.tls && w.kept >= w.spec.cfg.Workers.MaxKeptConnections:
		return "Done keeps more connections than workers.max_kept_connections"
	case m.GetPending() && (!m.GetKept() || !c.tls):
		return "Done reports input pending in a TLS connection it does not keep"
	case len(m.GetCarried()) > ipc.MaxCarried:
		return "Done carries more than the carried-bytes cap"
	case m.GetOutcome() < 0 || int(m.GetOutcome()) >= len(d.c.outcomes):
		return "Done with an unknown outcome"
	case m.GetHandback() < 0 || int(m.GetHandback()) >= len(d.c.handbacks):
		return "Done with an unknown handback"
	case m.GetHotRequests() > m.GetRequests()-min(m.GetRequests(), c.requests):
		return "Done reports more hot requests than requests"
	case len(m.GetResponseStatus()) > int(m.GetRequests()-min(m.GetRequests(), c.requests))+1:
		return "Done reports more responses than requests"
	case len(m.GetResponseStatus()) != len(m.GetResponseMicros()):
		return "Done reports response statuses and times that do not pair"
	case m.GetRequests() < c.requests:
		return "Done lowers the request count"
	case m.GetDisposition() != proto.Disposition_KEEP_ALIVE && m.GetDisposition() != proto.Disposition_CLOSE && m.GetDisposition() != proto.Disposition_LINGER:
		return "Done without a disposition"
	}
	return ""
}

// done takes a connection back from a worker (docs/DESIGN.md §2.8): the slots are
// released first, then it is re-parked, re-dispatched with its carried input,
// lingered or closed.
func (d *dispatcher) done(w *workerProc, c *conn, m *proto.Done, now time.Time) {
	served := uint64(m.GetRequests() - c.requests)
	w.served += served
	w.rounds++
	d.c.requests += served
	if max := uint64(w.spec.cfg.Workers.MaxRoundsPerWorker); max > 0 && w.rounds >= max && !w.retiring {
		// Recycled: replaced before it leaves.
		w.retiring = true
		d.log.Info("recycling worker", "worker", w.slot, "pid", w.pid, "rounds", w.rounds)
		defer d.roll(now)
	}
	c.requests = m.GetRequests()
	if c.requests > 0 {
		// A TLS connection's first head is not seen at dispatch.
		d.unqueue(c)
	}
	d.c.outcomes[m.GetOutcome()]++
	d.countHot(m)
	for i, status := range m.GetResponseStatus() {
		d.c.observe(status, m.GetResponseMicros()[i])
	}
	if m.GetOutcome() == proto.Outcome_PEER_RESET {
		d.logLimited(hclog.Debug, "peer-reset", "client reset a connection mid-round")
	}
	d.release(c)
	if m.GetKept() {
		// w keeps its copy (and a TLS connection's state): the next
		// request goes there without a descriptor (affinity,
		// docs/DESIGN.md §2.7). Otherwise the worker closed its copy
		// before Done.
		d.keptBy(c, w)
	}
	d.pump(c.client, now)
	if c.fd < 0 {
		// Given up at dispatch (closingHead): whatever the worker says,
		// nothing is left here to park or linger with.
		d.closeConn(c)
		return
	}
	switch m.GetDisposition() {
	case proto.Disposition_KEEP_ALIVE:
		switch {
		case d.stopping:
			d.closeConn(c)
		case d.handDone(c, m, now):
		case m.GetPending():
			d.tryDispatch(c, now)
		case len(m.GetCarried()) > 0:
			d.nextRequest(c, m.GetCarried(), now)
		default:
			d.park(c, now)
		}
	case proto.Disposition_CLOSE:
		d.closeConn(c)
	case proto.Disposition_LINGER:
		if d.stopping {
			d.closeConn(c)
		} else {
			d.linger(c, now)
		}
	}
}

// nextRequest routes a connection whose worker returned carried input: to a
// worker when the input holds a decided head, else to state head to wait for
// the rest under the same rule as a new request.
func (d *dispatcher) nextRequest(c *conn, carried []byte, now time.Time) {
	if headend.Decided(carried) {
		c.carried = append([]byte(nil), carried...)
		d.tryDispatch(c, now)
		return
	}
	d.startHead(c, carried, now)
	d.arm(c)
}
