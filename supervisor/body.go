package supervisor

import (
	"fmt"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/hashicorp/go-hclog"
)

// Complete bodies before the pool (docs/DESIGN.md §3.3). A worker that read a
// head with a body to buffer sends BodyStart: the connection leaves the pool
// (its slot and share are released, so other requests run meanwhile) and
// charges the body budget instead, per client and global, in bytes and
// connections. The worker receives the body under the minimum body rate, then
// sends BodyDone: the budget is released and the connection waits, under the
// share and the pool like any request, for a slot; the BodyReply that grants
// it comes then, or a refusal after no_worker_timeout. The connection stays
// at its worker throughout (the worker holds the descriptor); only its
// accounting moves.
//
//	at_worker ──BodyStart ok──► body (outside the pool) ──BodyDone──► slot ──► at_worker
//	                                                          └──no slot in no_worker_timeout──► refused

// bodyBudget is the dispatcher's state for bodies received outside the pool.
// Owned by the loop.
type bodyBudget struct {
	bodyBytes int64 // charged to connections receiving a body
	bodyConns int
	// bodyWaiting holds connections whose body is complete, waiting for a
	// pool slot, oldest first (q* links); bodyWaitTimers the same by
	// no_worker_timeout (t* links).
	bodyWaiting    connList
	bodyWaitTimers connList

	bodiesBuffered uint64
	bodyRefused    uint64
	bodyNoSlot     uint64
}

// bodyState is a connection's place in the body round. Zero: in the pool.
// Its flag (conn.bodyOutside: BodyStart granted, no pool slot held, the
// budget charged) is packed with the record's other small fields.
type bodyState struct {
	charged int64  // bytes charged to the budget
	resume  uint64 // the BodyDone request waiting for a slot, 0 if none
}

// validBodyRequest checks a BodyStart or BodyDone before it takes a slot.
func (d *dispatcher) validBodyRequest(w *workerProc, f *proto.Frame) string {
	switch b := f.Body.(type) {
	case *proto.Frame_BodyStart:
		c := d.conns.get(b.BodyStart.GetConnId())
		switch {
		case c == nil || c.worker != w || c.state != stateAtWorker:
			return fmt.Sprintf("BodyStart for connection %d it does not hold", b.BodyStart.GetConnId())
		case c.bodyOutside:
			return "BodyStart twice"
		case b.BodyStart.GetLength() <= 0:
			return "BodyStart without a length"
		}
	case *proto.Frame_BodyDone:
		c := d.conns.get(b.BodyDone.GetConnId())
		switch {
		case c == nil || c.worker != w || c.state != stateAtWorker:
			return fmt.Sprintf("BodyDone for connection %d it does not hold", b.BodyDone.GetConnId())
		case !c.bodyOutside || c.body.resume != 0:
			return "BodyDone without BodyStart"
		}
	}
	return ""
}

// bodyStart takes c out of the pool and charges the body budget, or refuses
// when the budget has no room.
func (d *dispatcher) bodyStart(w *workerProc, id uint64, m *proto.BodyStart, now time.Time) {
	w.slots.Release()
	c := d.conns.get(m.GetConnId())
	cl, n, l := c.client, m.GetLength(), d.cfg.Limits
	fits := d.bodyConns < l.BodyBufferConnections && d.bodyBytes+n <= l.BodyBufferBytes &&
		(cl.trusted || cl.bodyConns < l.BodyBufferConnectionsPerClient && cl.bodyBytes+n <= l.BodyBufferBytesPerClient)
	if !fits {
		d.bodyRefused++
		d.logLimited(hclog.Warn, "body-budget", "request body refused: the body budget is full")
		d.send(w, &proto.Frame{Id: id, Body: &proto.Frame_BodyReply{BodyReply: &proto.BodyReply{}}}, -1)
		return
	}
	c.body, c.bodyOutside = bodyState{charged: n}, true
	d.bodyBytes += n
	d.bodyConns++
	cl.bodyBytes += n
	cl.bodyConns++
	d.bodiesBuffered++
	// The slot goes back to the pool now, as for a finished round.
	w.active--
	cl.out--
	d.out--
	d.send(w, &proto.Frame{Id: id, Body: &proto.Frame_BodyReply{BodyReply: &proto.BodyReply{Ok: true}}}, -1)
	d.pump(cl, now)
}

// bodyDone releases c's body budget and asks for a pool slot for it.
func (d *dispatcher) bodyDone(w *workerProc, id uint64, m *proto.BodyDone, now time.Time) {
	c := d.conns.get(m.GetConnId())
	d.uncharge(c)
	c.body.resume = id
	if d.grantBody(c) {
		return
	}
	d.bodyWaiting.push(c)
	c.deadline = monoOf(now.Add(d.cfg.Limits.NoWorkerTimeout))
	d.bodyWaitTimers.push(c)
}

// uncharge gives c's body budget back.
func (d *dispatcher) uncharge(c *conn) {
	if c.body.charged == 0 {
		return
	}
	d.bodyBytes -= c.body.charged
	d.bodyConns--
	c.client.bodyBytes -= c.body.charged
	c.client.bodyConns--
	c.body.charged = 0
}

// grantBody gives c, whose body is complete, a pool slot at its worker when
// the share and the pool allow, and tells the worker. The worker's own
// concurrency is not checked: the connection is already there.
func (d *dispatcher) grantBody(c *conn) bool {
	cl := c.client
	if d.out >= d.pool || !cl.trusted && cl.out >= d.share {
		return false
	}
	d.leaveQueue(c)
	d.leaveTimer(c)
	id := c.body.resume
	c.body, c.bodyOutside = bodyState{}, false
	c.worker.active++
	cl.out++
	d.out++
	w := c.worker
	w.slots.Release()
	d.send(w, &proto.Frame{Id: id, Body: &proto.Frame_BodyReply{BodyReply: &proto.BodyReply{Ok: true}}}, -1)
	return true
}

// pumpBodies grants slots to waiting complete bodies, oldest first among
// those whose client is under its share. They go before new dispatches:
// their requests are further along.
func (d *dispatcher) pumpBodies() {
	for c := d.bodyWaiting.first(); c != nil && d.out < d.pool; {
		next := d.bodyWaiting.next(c)
		d.grantBody(c)
		c = next
	}
}

// expireBodies refuses the slot to complete bodies that waited
// no_worker_timeout; their workers answer 503.
func (d *dispatcher) expireBodies(now time.Time) {
	for c := d.bodyWaitTimers.first(); c != nil && !now.Before(c.deadline.time()); c = d.bodyWaitTimers.first() {
		d.bodyWaitTimers.remove(c)
		d.bodyWaiting.remove(c)
		d.bodyNoSlot++
		id := c.body.resume
		c.body.resume = 0
		c.worker.slots.Release()
		d.send(c.worker, &proto.Frame{Id: id, Body: &proto.Frame_BodyReply{BodyReply: &proto.BodyReply{}}}, -1)
	}
}

// releaseBody settles a connection that leaves its worker (Done, close,
// worker death) while outside the pool: its budget and any pending slot
// request. It reports whether c was outside (and so held no slot).
func (d *dispatcher) releaseBody(c *conn) bool {
	if !c.bodyOutside {
		return false
	}
	d.uncharge(c)
	if id := c.body.resume; id != 0 {
		// The worker gave up waiting for the slot (or is gone): refuse
		// the request, so its in-flight slot is free on both ends.
		if c.qlist == listBodyWaiting {
			d.bodyWaiting.remove(c)
		}
		if c.tlist == listBodyWaitTimers {
			d.bodyWaitTimers.remove(c)
		}
		c.worker.slots.Release()
		d.send(c.worker, &proto.Frame{Id: id, Body: &proto.Frame_BodyReply{BodyReply: &proto.BodyReply{}}}, -1)
	}
	c.body, c.bodyOutside = bodyState{}, false
	c.worker = nil
	return true
}

// bodySnapshot adds the body budget's state to s.
func (d *dispatcher) bodySnapshot(s *Snapshot) {
	s.BodyBytes, s.BodyConns = d.bodyBytes, d.bodyConns
	s.Counters["bodies_buffered"] = d.bodiesBuffered
	s.Counters["body_budget_refused"] = d.bodyRefused
	s.Counters["body_no_slot"] = d.bodyNoSlot
}
