package supervisor

import (
	"fmt"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
	"github.com/hashicorp/go-hclog"
)

// Complete bodies before the pool (docs/DESIGN.md §3.3). A worker that read a
// head with a body to buffer sends BodyStart: the connection leaves the pool
// (its slot and share are released, so other requests run meanwhile) and
// charges the body budget instead, per client and global: one connection at
// once, and the bytes as they arrive. The worker receives the body under the
// minimum body rate and reports what it received every step (BodyProgress):
// the charge grows to it when the budget has room, and the body is refused
// otherwise, so a body is charged what its client sent, never what its head
// declared. Then BodyDone: the budget is released and the connection waits,
// under the share and the pool like any request, for a slot; the BodyReply
// that grants it comes then, or a refusal after no_worker_timeout. The
// connection stays at its worker throughout (the worker holds the
// descriptor); only its accounting moves.
//
// roundState (conn.go) draws the states; round.go moves the counts.

// checkBodyStart checks a BodyStart's fields; the frame table has checked
// that the worker holds the connection in the pool. A body received outside
// the pool is at most max_body_bytes (the worker's own: a draining worker
// may have been started with another).
func checkBodyStart(d *dispatcher, w *workerProc, f *proto.Frame, c *conn) string {
	if n := f.GetBodyStart().GetLength(); n <= 0 || n > w.spec.cfg.Limits.MaxBodyBytes {
		return fmt.Sprintf("BodyStart with length %d, outside 1..max_body_bytes", n)
	}
	return ""
}

// bodyStart takes c out of the pool and charges the body budget one
// connection, or refuses when the budget has no room for it. No bytes are
// charged yet: none may have arrived.
func (d *dispatcher) bodyStart(w *workerProc, id uint64, c *conn, n int64, now time.Time) {
	w.slots.Release()
	cl, l := c.client, d.cfg.Limits
	fits := d.bodyConns < l.BodyBufferConnections &&
		(cl.trusted || cl.bodyConns < l.BodyBufferConnectionsPerClient)
	if !fits {
		d.bodyRefused++
		d.logLimited(hclog.Warn, "body-budget", "request body refused: the body budget is full")
		d.send(w, &proto.Frame{Id: id, Body: &proto.Frame_BodyReply{BodyReply: &proto.BodyReply{}}}, -1)
		return
	}
	d.bodiesBuffered++
	// The slot goes back to the pool now, as for a finished round.
	d.setRound(c, roundBody, uint64(n))
	d.send(w, &proto.Frame{Id: id, Body: &proto.Frame_BodyReply{BodyReply: &proto.BodyReply{Ok: true}}}, -1)
	d.pump(c.client, now)
}

// checkBodyProgress checks a BodyProgress's count: more than the charge
// (bytes received only grow), at most the length BodyStart gave.
func checkBodyProgress(d *dispatcher, w *workerProc, f *proto.Frame, c *conn) string {
	if n := f.GetBodyProgress().GetReceived(); n <= c.body.charged || n > c.body.declared() {
		return fmt.Sprintf("BodyProgress of %d bytes, outside %d+1..%d", n, c.body.charged, c.body.declared())
	}
	return ""
}

// bodyProgress grows c's charge to the received bytes when the budget, the
// global one and its client's, has room for the growth; otherwise the body
// is refused (the worker answers 503 and closes) and the charge stays
// until Done. The body that wants more than is free is the one refused:
// those that fit keep theirs.
func (d *dispatcher) bodyProgress(w *workerProc, id uint64, c *conn, received int64) {
	w.slots.Release()
	cl, l := c.client, d.cfg.Limits
	more := received - c.body.charged
	fits := d.bodyBytes+more <= l.BodyBufferBytes &&
		(cl.trusted || cl.bodyBytes+more <= l.BodyBufferBytesPerClient)
	if fits {
		d.chargeBody(c, received)
	} else {
		d.bodyRefused++
		d.logLimited(hclog.Warn, "body-budget", "request body refused: the body budget is full")
	}
	d.send(w, &proto.Frame{Id: id, Body: &proto.Frame_BodyReply{BodyReply: &proto.BodyReply{Ok: fits}}}, -1)
}

// bodyDone releases c's body budget and asks for a pool slot for it; the
// request keeps its in-flight slot until the answer.
func (d *dispatcher) bodyDone(id uint64, c *conn, now time.Time) {
	c.deadline = monoOf(now.Add(d.cfg.Limits.NoWorkerTimeout))
	d.setRound(c, roundBodyWait, id)
	d.grantBody(c)
}

// bodySnapshot adds the body budget's state to s.
func (d *dispatcher) bodySnapshot(s *view.Snapshot) {
	s.BodyBytes, s.BodyConns = d.bodyBytes, d.bodyConns
	s.Counters["bodies_buffered"] = d.bodiesBuffered
	s.Counters["body_budget_refused"] = d.bodyRefused
	s.Counters["body_no_slot"] = d.bodyNoSlot
}
