package supervisor

import (
	"net/netip"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/canned"
	"github.com/gatehouse-dev/gatehouse/supervisor/cluster"
	"github.com/gatehouse-dev/gatehouse/supervisor/handover"
	"github.com/gatehouse-dev/gatehouse/supervisor/internal/poll"
	"github.com/gatehouse-dev/gatehouse/supervisor/limits"
	"github.com/gatehouse-dev/gatehouse/supervisor/secrets"
	"github.com/gatehouse-dev/gatehouse/supervisor/upstream"
	"github.com/hashicorp/go-hclog"
)

// dispatcher is the loop's state, grouped by concern. Every part is owned by
// the loop goroutine alone: no mutex guards any of it, and other goroutines
// reach it only through messages (Supervisor.post). The parts are embedded so
// each field keeps its short name at its uses.
type dispatcher struct {
	s   *Supervisor
	cfg *config.Config // the live configuration; replaced only by reload
	log hclog.Logger

	p      *poll.Poller
	events []poll.Event

	acceptor
	connTable
	timers
	workerSet
	broker

	stats  statsCache
	canned canned.Replies
	headWatch
	bodyBudget
	streamBudget
	upgrade upgradeState

	nextPing     time.Time
	stopping     bool
	stopDeadline time.Time
	scratch      []byte
	frameBufs

	logLimit map[string]time.Time
	summary  clientSummary
	c        counters
}

// frameBufs are the frames and buffers every send and hand-off reuses, so
// that a steady-state round allocates nothing (TestDispatchAllocs).
type frameBufs struct {
	sendBuf     []byte                // an encoded frame, until it is queued
	toFlush     []*workerProc         // the workers with frames queued in this wake-up
	outs        []ipc.Out             // one SendBatch's frames, reused
	dispatchMsg proto.Dispatch        // the next Dispatch, refilled per hand-off
	signPool    secrets.Pool[signMsg] // signatures off the loop (tls.go)
	dispatchEnc ipc.DispatchEncoder   // encodes it with the peer and client key
	// recvFrame is decoded into and reused while the worker sends Done
	// frames; any other frame may be kept by its handler, so a new one
	// replaces it after those.
	recvFrame *proto.Frame
}

// acceptor owns the listening sockets (each descriptor from bind or
// inheritance until stop or a reload drops it) and the state that paces
// accepting: whether the listeners are armed, a pause when descriptors run
// out, and the descriptor budget admission keeps in reserve.
type acceptor struct {
	listeners    []listener
	nextListener uint64
	acceptPause  time.Time // accepting is paused until then
	acceptArmed  bool

	fdLimit   int
	fdReserve int
	fdBase    int
}

// connTable owns every client connection the supervisor holds (its record
// and its descriptor), the per-client records, and the explicit admission
// counts that the caps and the dispatch bounds are checked against.
type connTable struct {
	conns   connSlab
	clients map[netip.Addr]*client

	// penalties refuses client keys present at too many worker deaths.
	penalties *limits.PenaltyBox
	// keys holds the TLS certificates and private keys new workers get:
	// read at start, and again by every reload.
	keys    *secrets.Ring
	tickets ticketKeys

	out    int // connections at workers
	queued int // connections that have not finished a first request
	idle   int // parked keep-alive connections
}

// workerSet owns the worker slots (each slot's process, channel and send
// queue), the spec new workers are started with, and the dispatch bounds
// derived from the configuration.
type workerSet struct {
	workers  []*workerProc
	spec     *workerSpec // what new workers are started with
	nextSlot int
	pool     int // connections out at workers in total
	share    int // connections out at workers per client key
	// logLevel is the level set at run time ("" until then), which new
	// workers get after Hello.
	logLevel string
	// pressure is what the workers were last told: whether a readable
	// connection waits for a slot.
	pressure bool
}

// broker owns what workers ask the supervisor for: the upstream connections
// and the shared rate limiter.
type broker struct {
	upstreams *upstream.Broker
	limiter   *limits.Limiter
	// rateKeys holds, by connection id, the client key the dispatcher
	// derived from X-Forwarded-For in the head of a trusted proxy's
	// connection at a worker (rateKey), when it differs from the proxy's
	// own.
	rateKeys map[uint64]netip.Addr
	storeLink
}

// storeLink is the loop's side of the cluster store (supervisor/cluster):
// the link's state as last posted and the rate checks waiting for the
// store's answer. Without a cluster block store is nil and every decision
// is local.
type storeLink struct {
	store       *cluster.Store
	storeUp     bool
	storeErr    string
	storeSince  time.Time
	ratePending *cluster.Pending[pendingRate]
}

// acceptPause is how long accepting stops when descriptors run out and no
// idle connection can be closed to make room (accept.go).
const acceptPause = 100 * time.Millisecond

// listener is one bound, non-blocking listening socket owned by the loop.
type listener struct {
	id      uint64 // stable across reloads; the poller token
	name    string
	fd      int
	cfgAddr netip.AddrPort // the address the configuration asked for
	addr    netip.AddrPort // the bound address (port filled in when 0 was asked)
	// deferred: connections arrive with their first bytes
	// (TCP_DEFER_ACCEPT), so admit looks at them at once.
	deferred bool
}

// bodyBudget is the dispatcher's state for bodies received outside the pool
// (body.go). Owned by the loop.
type bodyBudget struct {
	bodyBytes int64 // charged to connections receiving a body
	bodyConns int

	bodiesBuffered uint64
	bodyRefused    uint64
	bodyNoSlot     uint64
}

// streamBudget is the dispatcher's state for stream-class requests and
// upgraded connections (stream.go). Owned by the loop.
type streamBudget struct {
	streamsOpen  int // stream-class requests outside the pool
	upgradesOpen int // upgraded connections outside the pool

	streamsStarted  uint64
	upgradesStarted uint64
	streamsRefused  uint64
	upgradesRefused uint64
}

// headWatch is the dispatcher's state for incomplete heads and the admission
// that cannot be locked (headscan.go). Owned by the loop.
type headWatch struct {
	headBytes int    // bytes held in incomplete heads
	peekBuf   []byte // headend.MaxHead bytes (more than a PROXY header), for peeks and reads
	// hello is the new TLS connection whose whole first record readTLS
	// has just peeked into peekBuf[:helloLen], while it dispatches it.
	hello    *conn
	helloLen int

	// Stress mode: on while admission has been under pressure (the queued
	// cap, the descriptor reserve or the head budget nearly reached, or
	// connections closed to make room) for stressAfter, off after calmAfter
	// without it.
	stress        bool
	pressureSince time.Time // zero while there is no pressure
	lastPressure  time.Time
	evictedAt     time.Time // the last time a connection was closed to make room

	timeoutHead       uint64
	timeoutGap        uint64
	incompleteEvicted uint64
	stressEntered     uint64
	headsBuffered     uint64
}

// statsCache is the loop's part for stats (views.go): the last rendering, and the
// requests waiting for the next one. Each waiting request holds its
// in-flight slot until it is answered.
type statsCache struct {
	text      []byte    // the last rendering, cut to fit a frame; nil before the first
	at        time.Time // the loop's clock when its snapshot was taken
	rendering bool      // a rendering is under way
	waiting   []statsWaiter
}

// statsWaiter is a StatsRequest waiting for a rendering.
type statsWaiter struct {
	slot int
	gen  uint64
	id   uint64
}

// pendingRate is a rate check waiting for the store (requests.go): the worker (by slot
// and process generation, so a late answer for a process that died is
// dropped) and the request's frame id.
type pendingRate struct {
	slot int
	gen  uint64
	id   uint64
}

// signMsg is a finished signature, posted back to the loop, and the tag of
// a signature in the signing pool: the worker and request it answers.
type signMsg struct {
	slot int
	gen  uint64
	id   uint64
	rep  *proto.SignReply
	// pooled: computed by the signing pool.
	pooled bool
}

// ticketKeys are the session ticket keys, the current one first, and when
// the current one was made. Owned by the loop.
type ticketKeys struct {
	keys    [][]byte
	rotated time.Time
	// shared: the keys are the cluster store's (cluster.TicketKeys), which
	// one instance rotates for all; this one does not rotate them.
	shared bool
}

// upgradeState is both sides' bookkeeping of a binary upgrade (upgrade.go).
type upgradeState struct {
	// out is the old side's link while it hands over; nil otherwise.
	out      *handover.Outbound
	deadline time.Time // upgrade_grace after the hand-over began
	names    map[uint32]string
	// holdAccept: the new side does not accept before the bulk arrived.
	holdAccept bool
	// Counts: connections sent, received, and closed here after the
	// hand-over began (TLS, streams, or at upgrade_grace).
	sent, received, drained uint64
	peerPID                 int
	peerVersion             string
	// nextProgress is when the old side reports its drain next; on the
	// new side, oldDraining and oldStaying are the last report.
	nextProgress time.Time
	oldDraining  bool
	oldStaying   int
	// starting is the binary an upgrade is starting, until it is ready
	// or failed.
	starting string
	// failed counts failed upgrades (Supervisor.UpgradeFailed).
	failed    uint64
	lastError string
}

func (d *dispatcher) add(fd, kind int, id uint64, in poll.Interest) error {
	return d.p.Add(fd, token(kind, id), in)
}

func (d *dispatcher) mod(fd, kind int, id uint64, in poll.Interest) error {
	return d.p.Mod(fd, token(kind, id), in)
}

// del deregisters fd; it must precede closing it, since a registration
// outliving its descriptor stays stale while a worker holds a duplicate.
func (d *dispatcher) del(fd int) {
	d.p.Del(fd)
}

// logLimited logs at most once a second per key, so a flood of refusals or
// bad peers cannot flood the log. Routine client behaviour is logged at
// Debug (and summarised, see counters.go); Warn is for what an operator
// should look at.
func (d *dispatcher) logLimited(level hclog.Level, key, msg string, args ...any) {
	if d.log.GetLevel() > level {
		return
	}
	now := time.Now()
	if t, ok := d.logLimit[key]; ok && now.Sub(t) < time.Second {
		return
	}
	if len(d.logLimit) > 1024 {
		clear(d.logLimit)
	}
	d.logLimit[key] = now
	d.log.Log(level, msg, args...)
}
