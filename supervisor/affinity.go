package supervisor

import (
	"strings"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
)

// Affinity (docs/DESIGN.md §2.7). A worker that returns a kept-alive
// connection with Done kept holds a copy of its descriptor (and a TLS
// connection's state) while the supervisor parks its own; c.kept names that
// worker. The next request goes back to it without a descriptor. Only the
// dispatcher decides when a copy is dropped: it sends Forget when it closes
// the connection or moves it to another worker, and a worker never drops a
// plain copy on its own (at its cap it keeps no more), so a Dispatch without a
// descriptor always finds its copy. w.kept counts the copies w holds in the
// dispatcher's view (plain ones; TLS ones are capped by the worker, which
// closes the oldest over workers.tls_max_idle_sessions); the worker's own
// set holds these and those whose Forget or Dispatch is still on the way, so
// an honest worker never claims more than workers.max_kept_connections.

// keeperWait is how long a readable plain connection waits in the pool's
// queue for its busy keeper while another worker has a free slot, before it
// moves there: long enough for one of the keeper's rounds to end under
// load, short enough that a keeper held by long requests delays nobody
// noticeably.
const keeperWait = 10 * time.Millisecond

// affine returns the worker a readable connection kept by c.kept goes to,
// or nil to wait: its keeper when that has a free slot. Otherwise a TLS
// connection waits for it (its state is there); a plain one moves to free
// (the keeper forgets its copy) when its keeper is draining or gone, or it
// has waited keeperWait for it, and waits otherwise.
func (d *dispatcher) affine(c *conn, free *workerProc, now time.Time) *workerProc {
	if d.keeperFree(c) {
		return c.kept
	}
	if free == nil || !d.movable(c, now) {
		return nil
	}
	d.c.affinityMoves++
	d.forget(c)
	return free
}

// keeperFree reports whether c's keeper may be dispatched it now. A retired
// (draining) worker still serves the TLS connections it keeps; at shutdown
// nothing is dispatched.
func (d *dispatcher) keeperFree(c *conn) bool {
	k := c.kept
	return !d.stopping && d.out < d.pool && (k.state == workerReady || c.tls && k.state == workerDraining) &&
		k.active < k.spec.cfg.Workers.Concurrency
}

// movable reports whether a kept plain connection whose keeper is busy may
// move to another worker now.
func (d *dispatcher) movable(c *conn, now time.Time) bool {
	return !c.tls && (c.kept.state != workerReady || !now.Before(d.moveAt(c)))
}

// moveAt is when a plain connection waiting for its busy keeper may move:
// keeperWait after it began to wait (its no-worker deadline is uniform), or
// never if it is not waiting yet.
func (d *dispatcher) moveAt(c *conn) time.Time {
	if c.state != stateWaiting || c.tlist != listWaitTimers {
		return farFuture
	}
	return c.deadline.time().Add(keeperWait - d.cfg.Limits.NoWorkerTimeout)
}

// farFuture is a time no deadline reaches.
var farFuture = time.Unix(1<<62, 0)

// waitScan bounds how far into the pool's queue nextWaiting and
// keeperDeadline look.
const waitScan = 64

// nextWaiting returns the connection the pool's queue gives a slot to now,
// or nil: the oldest among the first waitScan whose keeper has a free slot,
// or, while a ready worker has one, that has no keeper or may move. So a
// slot freed at a worker goes to a connection it keeps before an older one
// kept elsewhere.
func (d *dispatcher) nextWaiting(now time.Time) *conn {
	if d.stopping || d.out >= d.pool {
		return nil
	}
	free := d.pickWorker(false) != nil
	i := 0
	for c := d.lists[listWaiting].first(); c != nil && i < waitScan; c, i = d.lists[listWaiting].next(c), i+1 {
		switch {
		case c.kept == nil:
			if free {
				return c
			}
		case d.keeperFree(c) || free && d.movable(c, now):
			return c
		}
	}
	return nil
}

// keeperDeadline is when a plain connection in the pool's queue may next
// move to a free worker (zero: none may), so the loop wakes for it.
func (d *dispatcher) keeperDeadline() time.Time {
	if d.lists[listWaiting].first() == nil || !d.keepsPlain() || d.pickWorker(false) == nil {
		return time.Time{}
	}
	next := farFuture
	i := 0
	for c := d.lists[listWaiting].first(); c != nil && i < waitScan; c, i = d.lists[listWaiting].next(c), i+1 {
		if c.kept != nil && !c.tls {
			if t := d.moveAt(c); t.Before(next) {
				next = t
			}
		}
	}
	if next == farFuture {
		return time.Time{}
	}
	return next
}

// keptBy records that w keeps a copy of c after its round. w.kept counts
// the plain ones, w.tls the TLS ones (with those out at w).
func (d *dispatcher) keptBy(c *conn, w *workerProc) {
	c.kept = w
	if c.tls {
		w.tls++
	} else {
		w.kept++
	}
}

// takeKept counts the dispatch of c to its keeper without a descriptor: the
// worker takes its copy out of its set for the round.
func (d *dispatcher) takeKept(c *conn) {
	if c.tls {
		d.c.tlsAffinity++
		c.kept.tls--
	} else {
		d.c.affinity++
		c.kept.kept--
	}
	c.kept = nil
}

// forget tells the worker that keeps a copy of c's descriptor to close it
// (and drop a TLS connection's state): the supervisor closed the connection
// (shut down already), or moves it to another worker.
func (d *dispatcher) forget(c *conn) {
	w := c.kept
	if w == nil {
		return
	}
	c.kept = nil
	if c.tls {
		w.tls--
	} else {
		w.kept--
	}
	if w.ch != nil && w.state != workerDead {
		d.send(w, &proto.Frame{Body: &proto.Frame_Forget{Forget: &proto.Forget{ConnId: c.id}}}, -1)
	}
}

// keepsPlain reports whether some worker keeps a plain connection's copy
// (none while affinity is off): only then may a waiting connection move.
func (d *dispatcher) keepsPlain() bool {
	for _, w := range d.workers {
		if w.kept > 0 {
			return true
		}
	}
	return false
}

// Hot connections (docs/DESIGN.md §2, affinity and hot connections): a worker
// may keep a kept-alive connection for a short window after a response,
// waiting for its next request, but only while no readable connection waits
// for a slot. The dispatcher tells the workers when that changes with a
// Pressure frame, so a hot connection costs no frame per request and is
// handed back at once when anyone waits. A hot connection counts as out for
// the pool and the share, as any dispatched one.

// pressured reports whether a readable connection waits for a slot: in the
// pool's queue or in its client's. Every such connection is on the
// no-worker timer list, whichever queue it is in. While an upgrade hands
// connections over, pressure stays on: a hot connection comes back at once
// and moves to the new supervisor.
func (d *dispatcher) pressured() bool { return d.lists[listWaitTimers].n > 0 || d.upgrade.out != nil }

// signalPressure tells every worker when the pressure changed. It runs once
// per loop iteration, after the events were handled.
func (d *dispatcher) signalPressure() {
	on := d.pressured()
	if on == d.pressure {
		return
	}
	d.pressure = on
	if on {
		d.c.pressureOn++
	}
	for _, w := range d.workers {
		if w.ch != nil {
			d.sendPressure(w, on)
		}
	}
}

func (d *dispatcher) sendPressure(w *workerProc, on bool) {
	d.send(w, &proto.Frame{Body: &proto.Frame_Pressure{Pressure: &proto.Pressure{On: on}}}, -1)
}

// countHot records what a Done says about hot waits, and why a kept-alive
// connection came back.
func (d *dispatcher) countHot(m *proto.Done) {
	d.c.hotRequests += uint64(m.GetHotRequests())
	if m.GetDisposition() == proto.Disposition_KEEP_ALIVE {
		d.c.handbacks[m.GetHandback()]++
	}
}

// handbackCounters adds the handback counters to a snapshot's counters.
func (c *counters) handbackCounters(out map[string]uint64) {
	out["hot_requests"] = c.hotRequests
	out["pressure_on"] = c.pressureOn
	for i, n := range c.handbacks {
		out["handback_"+strings.ToLower(proto.Handback(i).String())] = n
	}
}
