package supervisor

import (
	"net/netip"
	"time"
)

// connState is where a connection is. Transitions (all in the dispatcher):
//
//	accept ──► fresh ──readable──► (waiting) ──► atWorker ──Done keep-alive──► idle
//	              │                    │             │  ▲                       │
//	              │ first-byte         │ no worker:  │  └──────readable─────────┘
//	              ▼ timeout            ▼ 503         ├──Done close──► closed
//	            closed               linger          └──Done linger──► linger ──► closed
//
// A connection whose Done carries input goes straight back to waiting or a
// worker without parking. docs/DESIGN.md §2.1 draws every transition with
// its cause.
type connState uint8

const (
	stateFresh    connState = iota // parked, before its first byte
	stateIdle                      // parked, kept alive between requests
	stateWaiting                   // readable, queued for a worker slot
	stateAtWorker                  // out at a worker for one round
	stateLinger                    // discarding input before close
)

var stateNames = [...]string{"fresh", "idle", "waiting", "at_worker", "linger"}

func (s connState) String() string { return stateNames[s] }

// conn is the dispatcher's record of one client connection. It is owned by
// the dispatcher loop; no other goroutine touches it.
type conn struct {
	id       uint64 // immutable, never reused; the poller token
	fd       int    // owned by the dispatcher (a worker holds a dup during a round)
	state    connState
	client   *client
	listener uint64 // the id of the listener that accepted it
	peer     netip.AddrPort
	accepted time.Time

	requests uint32 // requests served so far
	carried  []byte // input read by a worker and not yet consumed
	fresh    bool   // counted against max_queued_connections
	worker   *workerProc

	deadline     time.Time // when the current timer list expires it
	tprev, tnext *conn
	tlist        *connList
	qprev, qnext *conn
	qlist        *connList
}
