package supervisor

import (
	"net/netip"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/secrets"
)

// connState is where a connection is. Transitions (all in the dispatcher):
//
//	accept ──► fresh ──readable──► (waiting) ──► atWorker ──Done keep-alive──► idle
//	              │                    │             │  ▲                       │
//	              │ first-byte         │ no worker:  │  └──────readable─────────┘
//	              ▼ timeout            ▼ 503         ├──Done close──► closed
//	            closed               linger          └──Done linger──► linger ──► closed
//
// A fresh or idle connection becomes readable; if its input holds a complete
// head (or one no parser would accept, or one over the size caps) it goes to
// waiting or a worker, otherwise to head until the rest arrives (or its head
// deadline or inter-byte gap expires: 408). A connection whose Done carries
// input goes the same way without parking. On a proxy_protocol listener a
// connection starts in proxy until its PROXY header has been read.
// docs/DESIGN.md §2.1 draws every transition with its cause.
//
//	proxy ──header──► fresh ──partial head──► head ──complete──► (waiting)
type connState uint8

const (
	stateFresh    connState = iota // parked, before its first byte
	stateIdle                      // parked, kept alive between requests
	stateWaiting                   // readable, queued for a worker slot
	stateAtWorker                  // out at a worker for one round
	stateLinger                    // discarding input before close
	stateHead                      // parked, part of a head received
	stateProxy                     // parked, before its PROXY header
)

var stateNames = [...]string{"fresh", "idle", "waiting", "at_worker", "linger", "head", "proxy"}

func (s connState) String() string { return stateNames[s] }

// conn is the dispatcher's record of one client connection, in the slab
// (connSlab). It is owned by the dispatcher loop; no other goroutine touches
// it. It is what a parked connection costs, so it stays small: what only some
// states need (an incomplete head) hangs off it, and the small fields are
// packed at its end (TestConnRecordSize).
type conn struct {
	id       uint64 // immutable, the slot in the slab and a sequence number; the poller token
	fd       int    // owned by the dispatcher (a worker holds a dup during a round)
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
	lowat    bool // SO_RCVLOWAT raised to wait for a whole TLS record
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
