package supervisor

import (
	"net/netip"
	"time"

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
	// flagDrained: its carried bytes are all its socket held when they
	// were read, and the Dispatch carrying them says so.
	flagDrained
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

// bodyState is what a connection in round state body or bodyWait holds
// (round.go). The two states never hold it at once (leaveRound clears it),
// so one word serves both, keeping the record small (TestConnRecordSize).
type bodyState struct {
	charged int64  // bytes received, charged to the budget (body)
	word    uint64 // declared in body, resume in bodyWait
}

// declared is the most a body in round state body may hold: BodyStart's
// length.
func (b *bodyState) declared() int64 { return int64(b.word) }

// resume is the BodyDone request a connection in round state bodyWait
// waits for a pool slot under.
func (b *bodyState) resume() uint64 { return b.word }

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

// link names a record in the slab by its slot plus one (0: none): 4 bytes
// where a pointer takes 8, and a record carries six of them.
type link uint32

// listID names the list a record is on through one set of its links (0:
// none): 1 byte where a pointer takes 8. The dispatcher resolves it
// (timers.listOf); a client's lists are found through the record's client.
type listID uint8
