package supervisor

import (
	"net/netip"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gatehouse-dev/gatehouse/supervisor/secrets"
)

// connState is where a connection is; docs/DESIGN.md §2.1 draws the states
// and lists every change with its cause. setState alone changes it, moves
// is the changes it permits, and TestDesignStates fails when DESIGN's
// states or changes differ from stateNames and moves.
type connState uint8

const (
	stateFresh    connState = iota // parked, before its first byte
	stateIdle                      // parked, kept alive between requests
	stateWaiting                   // readable, queued for a worker slot
	stateAtWorker                  // out at a worker for one round
	stateLinger                    // discarding input before close
	stateHead                      // parked, part of a head received
	stateProxy                     // parked, before its PROXY header
	numStates
	// stateNew is a record admit has not placed yet (connSlab.alloc), and
	// stateClosed one closeConn is forgetting: no live connection is in
	// either.
	stateNew    = numStates
	stateClosed = numStates + 1
)

var stateNames = [numStates]string{"fresh", "idle", "waiting", "at_worker", "linger", "head", "proxy"}

func (s connState) String() string {
	switch s {
	case stateNew:
		return "new"
	case stateClosed:
		return "closed"
	}
	return stateNames[s]
}

// stateSet is a set of states, as bits.
type stateSet uint16

func statesOf(ss ...connState) stateSet {
	var set stateSet
	for _, s := range ss {
		set |= 1 << s
	}
	return set
}

// moves is every state change setState permits, by the state it leaves;
// closing is permitted from every state. docs/DESIGN.md §2.1 lists the same
// (TestDesignStates).
var moves = [stateNew + 1]stateSet{
	stateNew:      statesOf(stateFresh, stateProxy, stateIdle, stateHead, stateWaiting, stateAtWorker),
	stateProxy:    statesOf(stateFresh),
	stateFresh:    statesOf(stateHead, stateWaiting, stateAtWorker, stateLinger),
	stateHead:     statesOf(stateWaiting, stateAtWorker, stateLinger),
	stateIdle:     statesOf(stateHead, stateWaiting, stateAtWorker, stateLinger),
	stateWaiting:  statesOf(stateWaiting, stateAtWorker, stateLinger),
	stateAtWorker: statesOf(stateAtWorker, stateWaiting, stateHead, stateIdle, stateLinger),
	stateLinger:   0,
}

// conn is the dispatcher's record of one client connection, in the slab
// (connSlab). It is owned by the dispatcher loop; no other goroutine touches
// it. It is what a parked connection costs, so it stays small: what only some
// states need (an incomplete head) hangs off it, and the small fields are
// packed at its end (TestConnRecordSize).
type conn struct {
	id uint64 // immutable, the slot in the slab and a sequence number; the poller token
	// fd is owned by the dispatcher (a worker holds a dup during a
	// round); -1 once given up with a closing connection's dispatch.
	fd       int
	client   *client
	accepted mono
	carried  []byte // input read by a worker and not yet consumed
	// kept is the worker holding a copy of the descriptor (and a TLS
	// connection's state) while the connection is not at a worker
	// (affinity), or nil.
	kept   *workerProc
	worker *workerProc

	deadline mono // when the current timer list expires it

	// hd is the incomplete head of a connection in state head, nil in
	// every other state: most connections never need one.
	hd *headState

	body bodyState // a request body received outside the pool (round.go)

	// List links as slots and list ids (list.go): the timer list (t*),
	// the wait queue or head-deadline list (q*) and the client's list of
	// connections that have not completed a head (i*: fresh, head, proxy,
	// oldest first: what admission closes to make room).
	tprev, tnext link
	qprev, qnext link
	iprev, inext link

	requests uint32 // requests served so far
	listener uint32 // the id of the listener that accepted it
	peer     peerAddr
	state    connState
	fresh    bool // counted against max_queued_connections
	tls      bool // accepted on a TLS listener
	flags    connFlags
	// round is how a connection at its worker is accounted: in the pool,
	// or outside it for a body or a stream (round.go; setRound moves it).
	round roundState
	// upgrade: the stream a connection in round state stream is charged
	// for is an upgraded connection.
	upgrade bool
	tlist   listID
	qlist   listID
	ilist   listID
	// grant is what the handshake of a TLS connection on its first
	// dispatch may still sign with (tls.go; zero otherwise).
	grant secrets.Grant
}

// connFlags are a connection's small conditions, one bit each, so that the
// record stays within its size (TestConnRecordSize).
type connFlags uint8

const (
	// flagLowat: SO_RCVLOWAT raised to wait for a whole TLS record.
	flagLowat connFlags = 1 << iota
	// flagPolled: registered with the poller. A connection from a
	// deferring listener is registered only when it first has to wait
	// (arm), so one dispatched at accept never costs an epoll_ctl.
	flagPolled
	// flagClosing: its head says the connection closes after this
	// request (closingHead); its dispatch gives the descriptor up.
	flagClosing
)

// peerAddr is a connection's peer address and port: 20 bytes where a
// netip.AddrPort takes 32. Peers have no zone.
type peerAddr struct {
	ip   [16]byte
	port uint16
	kind uint8 // 0: none, 4 or 6
}

func packPeer(ap netip.AddrPort) peerAddr {
	a := ap.Addr()
	p := peerAddr{ip: a.As16(), port: ap.Port()}
	switch {
	case a.Is4():
		p.kind = 4
	case a.IsValid():
		p.kind = 6
	}
	return p
}

func (p peerAddr) addrPort() netip.AddrPort {
	switch p.kind {
	case 4:
		return netip.AddrPortFrom(netip.AddrFrom16(p.ip).Unmap(), p.port)
	case 6:
		return netip.AddrPortFrom(netip.AddrFrom16(p.ip), p.port)
	}
	return netip.AddrPort{}
}

// headState is an incomplete head (state head): the bytes read so far, at
// most headend.MaxHead, where to resume scanning them, and when its first and
// latest bytes arrived (the head deadline and the gap run from them; the
// connection is on listHeadTimers by the q* links, listGapTimers by t*).
type headState struct {
	buf       []byte
	scan      int
	firstByte time.Time
	lastByte  time.Time
}

// mono is an instant as nanoseconds from the process's epoch: 8 bytes where a
// time.Time takes 24, and compared on the monotonic clock like the times it
// comes from.
type mono int64

// epoch is when the process started, with its monotonic clock reading.
var epoch = time.Now()

func monoOf(t time.Time) mono { return mono(t.Sub(epoch)) }

func (m mono) time() time.Time { return epoch.Add(time.Duration(m)) }

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
