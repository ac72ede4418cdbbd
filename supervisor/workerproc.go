package supervisor

import (
	"os"
	"syscall"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/secrets"
	"github.com/gatehouse-dev/gatehouse/supervisor/spawn"
)

// workerState is a worker slot's lifecycle:
//
//	starting ──Ready──► ready ──Drain/replace──► draining ──exit──► dead
//	    │                 │                                          │
//	    └────exit─────────┴───────────────► dead ──backoff──► starting
type workerState uint8

const (
	workerStarting workerState = iota
	workerReady
	workerDraining
	workerDead
)

var workerStateNames = [...]string{"starting", "ready", "draining", "dead"}

func (s workerState) String() string { return workerStateNames[s] }

// workerProc is one worker slot. Owned by the dispatcher loop.
type workerProc struct {
	slot  int         // unique per slot, kept across respawns; immutable
	spec  *workerSpec // what it is started with; immutable
	gen   uint64      // incremented per process; stale messages carry an old gen
	state workerState
	// retiring marks a worker to be replaced (reload, recycling): it serves
	// until its replacement is ready, then drains and is not respawned.
	retiring bool
	// keys are the certificates and keys the current process was started
	// with; its Sign requests name these.
	keys *secrets.Ring
	// signing counts its signatures in the signing pool (tls.go), each
	// holding an in-flight slot.
	signing int
	pid     int
	proc    spawn.Process
	// exited is true once the process (if any) has been reaped.
	exited bool
	// killedFor is the death reason the supervisor killed the current
	// process for ("" unless it did).
	killedFor string
	// drainAsked is true once the current process was sent Drain: its
	// exit is expected, not a death.
	drainAsked bool
	// drainDeadline is when a worker drained while the supervisor keeps
	// running (recycling, reload) is killed if it has not exited: a
	// compromised worker that ignores Drain keeps no copy of a client
	// descriptor past shutdown_grace.
	drainDeadline time.Time
	// reportedReady is true once the current process sent Ready.
	reportedReady bool
	// threads is the GOMAXPROCS the current process reported in Ready.
	threads int
	// handed is true once the current process was dispatched a connection.
	handed bool
	ch     *ipc.Conn // nil while no process is attached
	// outq is what waits to be sent, in outbuf: the frames of this
	// wake-up (flushing: w is on the dispatcher's toFlush), and those the
	// full channel did not take.
	outq     []outFrame
	outbuf   []byte
	flushing bool
	// wantOut is true while the channel is registered for writability
	// (and not readability) to flush outq, or, while sendRetryAt is set,
	// for nothing.
	wantOut bool
	// sendRetryAt is when a send the kernel refused for now (ipc.ErrTryLater)
	// is tried again; sendHeldSince is when the first of such refusals in a
	// row came. Both are zero while sends go through.
	sendRetryAt, sendHeldSince time.Time

	active int // connections out at this worker
	kept   int // parked plain connections whose copy it keeps (conn.kept)
	// tls is how many TLS connections' state it holds: out at it, or
	// parked with it as their keeper.
	tls      int
	served   uint64 // requests answered, over every process of the slot
	rounds   uint64 // rounds of the current process
	restarts int
	started  time.Time
	backoff  time.Duration
	retryAt  time.Time // when dead: respawn no earlier than this
	lastPong time.Time
	pingSeq  uint64
	layers   []*proto.SandboxLayer

	// slots caps the process's requests started and not yet answered
	// (ipc_max_in_flight_requests); a new one per process.
	slots *ipc.InFlight
}

// token identifies this process of the slot to the poller: a stale event
// for an earlier process of the same slot finds another generation.
func (w *workerProc) token() uint64 { return uint64(w.slot)&slotMask | w.gen<<slotBits }

const (
	slotBits = 24
	slotMask = 1<<slotBits - 1
)

// workerSpec is everything a worker is started with: the configuration its
// Hello carries, its arguments and its process attributes. Immutable; a
// reload makes a new one and workers of the old one are replaced.
type workerSpec struct {
	cfg    *config.Config
	args   []string
	attr   *syscall.SysProcAttr
	layers []*proto.SandboxLayer // sandbox layers arranged at spawn
	// roots are the static roots' directories (O_PATH) in the policy's
	// order (rootPaths), passed to every worker of the spec as fds 4..;
	// nil where workers open them by path. The spec owns them: they close
	// with it (their finalizer) once no worker slot can be respawned with
	// it.
	roots     []*os.File
	rootPaths []string
}

// outFrame is an encoded frame waiting to be sent, at outbuf[off:end] of
// its worker, with the descriptor to send along (-1 for none). The
// dispatcher keeps its own copy of the descriptor unless owned.
type outFrame struct {
	off, end int
	fd       int
	owned    bool // fd is closed once sent
}

// Poller tokens: the kind in the top byte, an id below. Connection ids are
// never reused, so an event for a connection closed earlier in the same batch
// finds no record and is dropped.
const (
	kindListener = 2
	kindWorker   = 3
	kindConn     = 4
	kindShift    = 56
	idMask       = 1<<kindShift - 1
)

func token(kind int, id uint64) uint64 { return uint64(kind)<<kindShift | id&idMask }
