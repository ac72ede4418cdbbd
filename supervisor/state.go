package supervisor

import (
	"net/netip"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/internal/headend"
	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/canned"
	"github.com/gatehouse-dev/gatehouse/supervisor/cluster"
	"github.com/gatehouse-dev/gatehouse/supervisor/internal/poll"
	"github.com/gatehouse-dev/gatehouse/supervisor/limits"
	"github.com/gatehouse-dev/gatehouse/supervisor/secrets"
	"github.com/gatehouse-dev/gatehouse/supervisor/upstream"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
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

// timers owns the dispatcher's connection lists, indexed by list id
// (list.go): the per-state deadline lists, each a FIFO sorted by deadline
// since each timeout is uniform for its state, and the wait queues.
// setState (conn.go) and setRound (round.go) move connections between them.
type timers struct {
	lists [numDispatcherLists]connList
	// badMoves counts state changes setState does not permit (zero unless
	// the dispatcher is wrong; the tests' invariants check it).
	badMoves uint64
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

func newDispatcher(s *Supervisor) (*dispatcher, error) {
	boot := s.boot
	s.boot = loopInit{}
	d := &dispatcher{
		s:        s,
		cfg:      boot.cfg,
		log:      s.log.Named("dispatcher"),
		p:        s.poller,
		events:   make([]poll.Event, maxEvents),
		scratch:  make([]byte, lingerBuf),
		logLimit: make(map[string]time.Time),
		acceptor: acceptor{
			listeners:    boot.listeners,
			nextListener: uint64(len(boot.listeners)),
		},
		connTable: connTable{
			clients: make(map[netip.Addr]*client),
			keys:    boot.keys,
			penalties: limits.NewPenaltyBox(boot.cfg.Limits.DeathPenaltyThreshold,
				boot.cfg.Limits.DeathPenaltyDuration, boot.cfg.Limits.DeathPenaltyMaxClients),
		},
		workerSet: workerSet{
			spec:  boot.spec,
			pool:  boot.cfg.Workers.Pool(),
			share: boot.cfg.Workers.Share(),
		},
		broker: broker{
			limiter: limits.NewLimiter(boot.cfg.RateLimitEntries),
			storeLink: storeLink{
				ratePending: cluster.NewPending[pendingRate](0),
				storeSince:  time.Now(),
			},
		},
		c: counters{
			refused: make(map[string]uint64),
			deaths:  make(map[deathCause]uint64),
		},
	}
	d.signPool = newSignPool(s)
	d.initLists()
	d.peekBuf = make([]byte, headend.MaxHead)
	d.canned = canned.NewReplies()
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err == nil {
		d.fdLimit = int(rl.Cur)
	}
	// The reserve keeps descriptors for worker channels, pipes, respawns and
	// the admin socket when clients hold everything else.
	d.fdReserve = 32 + 4*d.cfg.Workers.Count
	if d.upgrade.holdAccept = s.opts.HoldAccept; !d.upgrade.holdAccept {
		d.armListeners(true)
	}
	d.upstreams = upstream.New(d.log, s.post)
	d.upstreams.Configure(d.cfg.Upstreams, boot.resolved, nil, d.cfg.Workers.Count)
	if c := d.cfg.Cluster; c != nil {
		store, err := cluster.Start(c, d.log.Named("cluster"), s.post)
		if err != nil {
			return nil, err
		}
		d.store, d.ratePending = store, cluster.NewPending[pendingRate](c.StoreTimeout)
	}
	for i := 0; i < d.cfg.Workers.Count; i++ {
		d.workers = append(d.workers, d.newWorker())
	}
	return d, nil
}
