package supervisor

import (
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/secrets"
)

// setRound moves c, at its worker, from its round state to r: what the old
// state held is given back (a waiting BodyDone is answered: granted when r
// is pool, refused otherwise), then what r holds is charged, from word: the
// declared length for body, the BodyDone's request id for bodyWait (whose
// deadline the caller sets first), 1 for a stream of an upgraded
// connection and 0 for another. setState enters pool at dispatch and
// leaves the round state at release.
func (d *dispatcher) setRound(c *conn, r roundState, word uint64) {
	d.leaveRound(c, r == roundPool)
	switch r {
	case roundBody, roundBodyWait:
		c.body.word = word
	case roundStream:
		c.upgrade = word == 1
	}
	d.enterRound(c, r)
}

// enterRound charges what round state r holds to c, which holds nothing.
func (d *dispatcher) enterRound(c *conn, r roundState) {
	c.round = r
	cl := c.client
	switch r {
	case roundPool:
		c.worker.active++
		cl.out++
		d.out++
	case roundBody:
		d.bodyBytes += c.body.charged
		d.bodyConns++
		cl.bodyBytes += c.body.charged
		cl.bodyConns++
	case roundBodyWait:
		d.lists[listBodyWaiting].push(c)
		d.lists[listBodyWaitTimers].push(c)
	case roundStream:
		cl.streams++
		if c.upgrade {
			d.upgradesOpen++
		} else {
			d.streamsOpen++
		}
	}
}

// chargeBody grows the bytes c, in round state body, charges to the body
// budget to received (BodyProgress).
func (d *dispatcher) chargeBody(c *conn, received int64) {
	more := received - c.body.charged
	c.body.charged = received
	d.bodyBytes += more
	c.client.bodyBytes += more
}

// leaveRound gives back what c's round state holds; a waiting BodyDone is
// answered, its in-flight slot released first. c then holds nothing.
func (d *dispatcher) leaveRound(c *conn, granted bool) {
	cl := c.client
	switch c.round {
	case roundPool:
		c.worker.active--
		cl.out--
		d.out--
	case roundBody:
		d.bodyBytes -= c.body.charged
		d.bodyConns--
		cl.bodyBytes -= c.body.charged
		cl.bodyConns--
	case roundBodyWait:
		d.lists[listBodyWaiting].remove(c)
		d.lists[listBodyWaitTimers].remove(c)
		w := c.worker
		w.slots.Release()
		d.send(w, &proto.Frame{Id: c.body.resume(), Body: &proto.Frame_BodyReply{BodyReply: &proto.BodyReply{Ok: granted}}}, -1)
	case roundStream:
		cl.streams--
		if c.upgrade {
			d.upgradesOpen--
		} else {
			d.streamsOpen--
		}
	}
	c.body, c.upgrade, c.round = bodyState{}, false, roundSpent
}

// inFlight is what a drain waits for, as its log line's fields: every
// connection out at a worker, whether it holds a pool slot or, outside the
// pool, receives a body or relays a stream (SSE, chunked) or an upgraded
// connection; "at_workers" counts them all.
func (d *dispatcher) inFlight() []any {
	var total, pool, bodies, streams, upgrades int
	for c := range d.conns.all() {
		if c.state != stateAtWorker {
			continue
		}
		total++
		switch {
		case c.round == roundPool:
			pool++
		case c.round == roundBody || c.round == roundBodyWait:
			bodies++
		case c.round == roundStream && c.upgrade:
			upgrades++
		case c.round == roundStream:
			streams++
		}
	}
	return []any{"at_workers", total, "in_pool", pool, "bodies", bodies, "streams", streams, "upgrades", upgrades}
}

// overShare reports whether cl holds its share of the pool (workers.share):
// an untrusted client's connection waits then, in its client's queue, and
// a complete body waits for its slot.
func (d *dispatcher) overShare(cl *client) bool { return !cl.trusted && cl.out >= d.share }

// pickWorker returns the ready worker with the most free slots, or nil. A
// new TLS connection (newTLS) goes to one that can hold its state under
// workers.tls_max_idle_sessions, if any can: a worker over that cap closes
// its oldest idle TLS connection, which must not happen while another
// worker has room.
func (d *dispatcher) pickWorker(newTLS bool) *workerProc {
	if d.stopping || d.out >= d.pool {
		return nil
	}
	var best *workerProc
	bestRoom := false
	for _, w := range d.workers {
		if w.state != workerReady || w.active >= w.spec.cfg.Workers.Concurrency {
			continue
		}
		room := newTLS && w.tls < w.spec.cfg.Workers.TLSMaxIdleSessions
		if best == nil || room && !bestRoom || room == bestRoom && w.active < best.active {
			best, bestRoom = w, room
		}
	}
	return best
}

// release gives back what a connection held at its worker: its round
// state's slot or budget, and a BodyDone's wait (refused).
func (d *dispatcher) release(c *conn) {
	if c.tls {
		c.worker.tls--
	}
	d.leaveRound(c, false)
	c.worker = nil
	c.grant = secrets.Grant{}
	if len(d.rateKeys) > 0 {
		delete(d.rateKeys, c.id)
	}
}
