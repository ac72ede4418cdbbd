package supervisor

import (
	"errors"
	"fmt"
	"time"
)

// invariants checks the loop's bookkeeping against what it is the sum of:
// every list is well linked and its count right, each connection is on the
// lists of its state and no other, every count (the pool's, the workers',
// the clients', the body and stream budgets, the upstream shares, the
// in-flight slots) equals the sum recomputed from the connections (or
// bounds it, where the rest is on a goroutine), and none is negative. It
// runs on the loop (inLoop) and returns every broken invariant.
func (d *dispatcher) invariants() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if d.badMoves > 0 {
		bad("%d state changes setState does not permit", d.badMoves)
	}

	// Lists: links, ids and counts.
	on := map[*conn]map[listID]bool{}
	walk := func(l *connList, what string) {
		var prev *conn
		n := 0
		for c := l.first(); c != nil; c = l.next(c) {
			if n++; n > l.n {
				bad("%s: more records than its count %d (a cycle?)", what, l.n)
				return
			}
			p, _, in := l.links(c)
			if *in != l.id {
				bad("%s: connection %d is on it with list id %d", what, c.id, *in)
			}
			if l.slab.at(*p) != prev {
				bad("%s: connection %d's previous link is wrong", what, c.id)
			}
			if c.id == 0 {
				bad("%s: holds a free record", what)
			}
			if on[c] == nil {
				on[c] = map[listID]bool{}
			}
			if on[c][l.id] {
				bad("%s: connection %d is on it twice", what, c.id)
			}
			on[c][l.id] = true
			prev = c
		}
		if n != l.n {
			bad("%s: %d records, count %d", what, n, l.n)
		}
		if l.last() != prev {
			bad("%s: the tail is not the last record", what)
		}
	}
	for id := listNone + 1; id < numDispatcherLists; id++ {
		if l := &d.lists[id]; l.id != id {
			bad("list %d is named %d", id, l.id)
		} else {
			walk(l, fmt.Sprintf("list %d", id))
		}
	}
	for key, cl := range d.clients {
		walk(&cl.waiting, "waiting of client "+key.String())
		walk(&cl.incomplete, "incomplete of client "+key.String())
	}

	// The connections, summed.
	type clientSum struct {
		conns, out, bodyConns, streams int
		bodyBytes                      int64
	}
	type workerSum struct{ active, tls, kept, bodyWaits int }
	clients := map[*client]*clientSum{}
	workers := map[*workerProc]*workerSum{}
	for _, w := range d.workers {
		workers[w] = &workerSum{}
	}
	var out, idle, queued, bodyConns, streams, upgrades int
	var bodyBytes int64
	for c := range d.conns.all() {
		cl := c.client
		if cl == nil || d.clients[cl.key] != cl {
			bad("connection %d: its client is not in the table", c.id)
			continue
		}
		cs := clients[cl]
		if cs == nil {
			cs = &clientSum{}
			clients[cl] = cs
		}
		cs.conns++
		if c.fresh {
			queued++
		}
		// A descriptor given up with a closing connection's dispatch
		// (closingHead) leaves a record out at its worker and nothing
		// else: no registration, no keeper, no parked state.
		if c.fd < 0 && (c.state != stateAtWorker || c.kept != nil || c.flags&flagPolled != 0 || c.tls) {
			bad("connection %d: its descriptor given up, in state %s, kept %v, polled %v", c.id, c.state, c.kept != nil, c.flags&flagPolled != 0)
		}
		// A closing head's mark lasts until its dispatch, or the 503 of a
		// connection that waited for one in vain.
		if c.flags&flagClosing != 0 && c.state != stateWaiting && c.state != stateLinger {
			bad("connection %d: marked closing in state %s", c.id, c.state)
		}
		if k := c.kept; k != nil {
			if workers[k] == nil {
				bad("connection %d: kept by a worker not in the set", c.id)
			} else if c.tls {
				workers[k].tls++
			} else {
				workers[k].kept++
			}
		}
		want := map[listID]bool{}
		switch c.state {
		case stateAtWorker:
			w := c.worker
			ws := workers[w]
			if ws == nil || w.ch == nil {
				bad("connection %d: at a worker that is gone", c.id)
				continue
			}
			if c.tls {
				ws.tls++
			}
			switch c.round {
			case roundPool:
				out++
				cs.out++
				ws.active++
			case roundBody:
				bodyConns++
				bodyBytes += c.body.charged
				cs.bodyConns++
				cs.bodyBytes += c.body.charged
				// Charged what arrived: never more than the body may
				// hold, never less than nothing.
				if c.body.charged < 0 || c.body.charged > c.body.declared() {
					bad("connection %d: a body of at most %d bytes charged %d", c.id, c.body.declared(), c.body.charged)
				}
			case roundBodyWait:
				want[listBodyWaiting], want[listBodyWaitTimers] = true, true
				ws.bodyWaits++
				if c.body.resume() == 0 {
					bad("connection %d: waits for a slot for request id 0", c.id)
				}
			case roundStream:
				cs.streams++
				if c.upgrade {
					upgrades++
				} else {
					streams++
				}
			}
			if c.round != roundBody && c.round != roundBodyWait && c.body != (bodyState{}) {
				bad("connection %d: round %s holds body state %+v", c.id, c.round, c.body)
			}
		case stateWaiting:
			want[listWaitTimers] = true
			if c.qlist == listClientWaiting {
				want[listClientWaiting] = true
			} else {
				want[listWaiting] = true
			}
		case stateIdle:
			idle++
			want[listIdleTimers] = true
		case stateLinger:
			want[listLingerTimers] = true
		case stateHead:
			want[listGapTimers], want[listHeadTimers], want[listIncomplete] = true, true, true
		case stateFresh:
			want[listFreshTimers], want[listIncomplete] = true, true
		case stateProxy:
			// Its lists are the PROXY reader's (proxy.go).
			continue
		}
		if c.state != stateAtWorker && c.worker != nil {
			bad("connection %d: %s with a worker", c.id, c.state)
		}
		for id := range want {
			if !on[c][id] {
				bad("connection %d (%s, round %s): not on list %d", c.id, c.state, c.round, id)
			}
		}
		for id := range on[c] {
			if !want[id] {
				bad("connection %d (%s, round %s): on list %d", c.id, c.state, c.round, id)
			}
		}
	}

	// The counts against the sums.
	eq := func(what string, got, want int) {
		if got != want {
			bad("%s = %d, the connections sum to %d", what, got, want)
		}
		if got < 0 {
			bad("%s = %d, negative", what, got)
		}
	}
	eq("connections at workers (d.out)", d.out, out)
	eq("idle", d.idle, idle)
	eq("queued", d.queued, queued)
	eq("body connections", d.bodyConns, bodyConns)
	eq("body bytes", int(d.bodyBytes), int(bodyBytes))
	eq("streams", d.streamsOpen, streams)
	eq("upgrades", d.upgradesOpen, upgrades)
	eq("slab records", d.conns.len(), func() int {
		n := 0
		for _, cs := range clients {
			n += cs.conns
		}
		return n
	}())
	if d.out > d.pool {
		bad("%d connections at workers, over the pool %d", d.out, d.pool)
	}
	if d.bodyConns > d.cfg.Limits.BodyBufferConnections || d.bodyBytes > d.cfg.Limits.BodyBufferBytes {
		bad("the body budget holds %d connections, %d bytes: over its caps", d.bodyConns, d.bodyBytes)
	}
	if d.streamsOpen+d.upgradesOpen > d.cfg.Streams.Max {
		bad("%d streams and upgrades, over streams.max %d", d.streamsOpen, d.upgradesOpen)
	}
	activeSum := 0
	for key, cl := range d.clients {
		cs := clients[cl]
		if cs == nil {
			cs = &clientSum{}
		}
		who := "client " + key.String()
		eq(who+" conns", cl.conns, cs.conns)
		eq(who+" out", cl.out, cs.out)
		eq(who+" body connections", cl.bodyConns, cs.bodyConns)
		eq(who+" body bytes", int(cl.bodyBytes), int(cs.bodyBytes))
		eq(who+" streams", cl.streams, cs.streams)
		if !cl.trusted && cl.out > d.share {
			bad("%s holds %d slots, over the share %d", who, cl.out, d.share)
		}
		if l := d.cfg.Limits; !cl.trusted && (cl.bodyConns > l.BodyBufferConnectionsPerClient || cl.bodyBytes > l.BodyBufferBytesPerClient) {
			bad("%s: its bodies hold %d connections, %d bytes: over its caps", who, cl.bodyConns, cl.bodyBytes)
		}
		if cl.conns == 0 && cl.out == 0 {
			bad("%s has no connection but is kept", who)
		}
	}
	for _, w := range d.workers {
		ws := workers[w]
		who := fmt.Sprintf("worker %d", w.slot)
		eq(who+" active", w.active, ws.active)
		activeSum += w.active
		eq(who+" tls", w.tls, ws.tls)
		eq(who+" kept", w.kept, ws.kept)
		// Requests answered later hold their in-flight slots: a BodyDone
		// waiting for a pool slot, a Dial waiting for the budget or
		// being dialed (its share counts it until the result), a
		// StatsRequest waiting for a rendering, an RSA signature being
		// computed (not counted here: a goroutine holds it).
		waits := ws.bodyWaits + d.upstreams.Pending(d.up(w))
		for _, sw := range d.stats.waiting {
			if sw.slot == w.slot && sw.gen == w.gen {
				waits++
			}
		}
		if w.ch != nil && w.slots != nil {
			if n := w.slots.InUse(); n != waits+w.signing || n > w.slots.Cap() {
				bad("%s: %d in-flight slots taken, %d requests wait for a reply, %d signatures in the pool, cap %d", who, n, waits, w.signing, w.slots.Cap())
			}
		}
	}
	eq("the workers' active slots (sum)", activeSum, out)
	for id := range d.rateKeys {
		if c := d.conns.get(id); c == nil || c.state != stateAtWorker {
			bad("a rate limit key is kept for connection %d, which is at no worker", id)
		}
	}
	if err := d.upstreams.Check(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// inLoop runs fn on the loop between two of its steps.
func (h *loopHarness) inLoop(fn func(*dispatcher)) {
	h.t.Helper()
	done := make(chan struct{})
	h.s.post(loopFunc(func(d *dispatcher) {
		defer close(done)
		fn(d)
	}))
	select {
	case <-done:
	case <-time.After(frameWait):
		h.t.Fatal("the loop did not run a posted function")
	}
}

// checkInvariants fails the test if the loop's bookkeeping is broken.
func (h *loopHarness) checkInvariants() {
	h.t.Helper()
	var err error
	h.inLoop(func(d *dispatcher) { err = d.invariants() })
	if err != nil {
		h.t.Fatalf("invariants broken:\n%v", err)
	}
}
