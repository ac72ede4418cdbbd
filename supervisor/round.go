package supervisor

import "github.com/gatehouse-dev/gatehouse/proto"

// roundState is how a connection out at its worker (state at_worker) is
// accounted while the worker serves it. setRound alone moves it (but for
// setState entering pool at dispatch, and release at the round's end), and
// keeps the pool's counts, the body and stream budgets, the body lists and the
// worker's in-flight slot in step (checked after every step by the tests'
// invariants, invariants_test.go); within body, chargeBody alone grows the
// bytes charged:
//
//	dispatch ──► pool ──BodyStart ok──► body ──BodyDone──► bodyWait ──slot──► pool
//	              │                                           │
//	              │                                           └──no_worker_timeout──► spent
//	              └──StreamStart ok──► stream
//
//	body ──BodyProgress ok──► body, charged the bytes received (chargeBody)
//
//	any ──Done / close / worker death──► released (leaveRound)
//
// Which frames each state admits is in the frame table (frametable.go).
type roundState uint8

const (
	// roundPool holds a pool slot: w.active, its client's out and d.out.
	roundPool roundState = iota
	// roundBody holds the body budget (a connection, and conn.body.charged
	// bytes received), no pool slot.
	roundBody
	// roundBodyWait: the body is complete; the connection waits on
	// listBodyWaiting and listBodyWaitTimers for a pool slot, and its BodyDone
	// (conn.body.resume()) holds one of the worker's in-flight slots until
	// its reply.
	roundBodyWait
	// roundSpent holds nothing: the slot was refused after the body; the
	// worker answers 503 and returns the connection.
	roundSpent
	// roundStream holds the stream budget (conn.upgrade says which count),
	// no pool slot.
	roundStream
	roundStates
)

var roundNames = [roundStates]string{"pool", "body", "body_wait", "spent", "stream"}

func (r roundState) String() string { return roundNames[r] }

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
