package supervisor

import (
	"fmt"
	"time"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"golang.org/x/sys/unix"
)

// The frame table: every frame a worker may send, and when (issue 27: a
// worker is an adversary). Like OpenSSH's monitor dispatch table, it is the
// only place the dispatcher learns what a worker may do: frame looks the
// frame's row up and checks, in order, the worker's state, the id, the
// descriptors, the connection the frame names and that connection's round
// state (round.go), then the row's own field checks; anything outside the
// row is a protocol violation that kills the worker (its connections are
// closed, and their clients are not penalized: a compromised worker cannot
// frame them). Only then does a request take an in-flight slot, and the
// row's handler run. ipc/PROTOCOL.md lists the same rows
// (TestFrameTableDocumented holds it to this table).
//
// The table is the map of the whole protocol: it has a row for every frame
// of the schema, indexed by ipc.Kind (the body's field number, no switch
// over the types). What the schema declares on each frame's field, who
// sends it, its role (notice, request or reply) and its descriptors, comes
// from there (ipc.Spec); workerFrames below adds, for each frame a worker
// sends, what the supervisor admits and its handler. The supervisor's own
// frames have rows without either: their handler is the worker's (its run
// loop), and one coming from a worker kills it. A new frame is its message
// and field in proto/gatehouse.proto, a row of workerFrames when a worker
// sends it, its handler, and ipc/PROTOCOL.md.

// workerMask is a set of worker states.
type workerMask uint8

func workersIn(states ...workerState) workerMask {
	var m workerMask
	for _, s := range states {
		m |= 1 << s
	}
	return m
}

func (m workerMask) has(s workerState) bool { return m&(1<<s) != 0 }

// roundMask is a set of round states.
type roundMask uint8

func roundsIn(states ...roundState) roundMask {
	var m roundMask
	for _, s := range states {
		m |= 1 << s
	}
	return m
}

func (m roundMask) has(s roundState) bool { return m&(1<<s) != 0 }

// anyRound admits a frame in every round state.
var anyRound = roundsIn(roundPool, roundBody, roundBodyWait, roundSpent, roundStream)

// frameRule is one row of the frame table.
type frameRule struct {
	// Spec is what the schema declares: the name, the sender, the role
	// (a request has an id not 0, takes an in-flight slot and gets
	// exactly one reply with its id, its reply type or Overloaded; every
	// other frame a worker sends has id 0 and gets no reply) and the
	// descriptors, which ipc has checked.
	*ipc.Spec
	// workers are the worker states in which the frame is admitted.
	workers workerMask
	// connID, when not nil, returns the connection the frame names: one
	// out at this worker (state at_worker) in a round state of rounds.
	connID func(*proto.Frame) uint64
	rounds roundMask
	// repeat says how often the frame may come; what the states above do
	// not already bound is checked by check.
	repeat string
	// check checks the fields, with c the named connection (nil without
	// connID); it returns the violation, or "".
	check func(d *dispatcher, w *workerProc, f *proto.Frame, c *conn) string
	// handle acts on an admitted frame (a request's slot taken). It
	// reports false when it killed the worker.
	handle func(d *dispatcher, w *workerProc, f *proto.Frame, c *conn, now time.Time) bool
}

var (
	live    = workersIn(workerReady, workerDraining)
	started = workersIn(workerStarting, workerReady, workerDraining)
)

// frameTable is indexed by ipc.Kind: workerFrames' rows on the schema's
// Specs; a kind the schema does not use has an empty row.
var frameTable = func() (t [ipc.MaxKind + 1]frameRule) {
	for _, s := range ipc.Specs() {
		t[s.Kind] = workerFrames[s.Name]
		t[s.Kind].Spec = s
	}
	return t
}()

// request reports whether frames of r are requests.
func (r *frameRule) request() bool { return r.Role == proto.Role_ROLE_REQUEST }

// workerFrames holds, by name, what the supervisor admits of each frame a
// worker sends, and its handler (TestFrameTableRows: one row for each, and
// none for a frame the supervisor sends).
var workerFrames = map[string]frameRule{
	"Ready": {
		workers: workersIn(workerStarting, workerDraining),
		repeat:  "once per process",
		check: func(d *dispatcher, w *workerProc, f *proto.Frame, _ *conn) string {
			if w.reportedReady {
				return "Ready twice"
			}
			_, bad := readyLayers(f.GetReady().GetLayers())
			return bad
		},
		handle: func(d *dispatcher, w *workerProc, f *proto.Frame, _ *conn, now time.Time) bool {
			d.ready(w, f.GetReady(), now)
			return true
		},
	},
	"Done": {
		workers: live,
		connID:  func(f *proto.Frame) uint64 { return f.GetDone().GetConnId() },
		rounds:  anyRound,
		repeat:  "once per dispatch",
		check:   checkDone,
		handle: func(d *dispatcher, w *workerProc, f *proto.Frame, c *conn, now time.Time) bool {
			d.done(w, c, f.GetDone(), now)
			return true
		},
	},
	"Pong": {
		workers: started,
		repeat:  "any",
		handle: func(d *dispatcher, w *workerProc, _ *proto.Frame, _ *conn, now time.Time) bool {
			w.lastPong = now
			return true
		},
	},
	"Dial": {
		workers: live,
		repeat:  "any",
		check: func(d *dispatcher, _ *workerProc, f *proto.Frame, _ *conn) string {
			if !d.upstreams.Known(f.GetDial().GetUpstream()) {
				return fmt.Sprintf("Dial for %.64q, which is no configured upstream", f.GetDial().GetUpstream())
			}
			return ""
		},
		handle: func(d *dispatcher, w *workerProc, f *proto.Frame, _ *conn, now time.Time) bool {
			d.upstreams.Dial(d.up(w), f.GetId(), f.GetDial().GetUpstream(), now)
			return true
		},
	},
	"RateCheck": {
		workers: live,
		connID:  func(f *proto.Frame) uint64 { return f.GetRateCheck().GetConnId() },
		rounds:  anyRound,
		repeat:  "any",
		check: func(d *dispatcher, _ *workerProc, f *proto.Frame, _ *conn) string {
			if d.cfg.RateLimitByName(f.GetRateCheck().GetClass()) == nil {
				return fmt.Sprintf("RateCheck for unknown class %.64q", f.GetRateCheck().GetClass())
			}
			return ""
		},
		handle: func(d *dispatcher, w *workerProc, f *proto.Frame, c *conn, now time.Time) bool {
			d.rateCheck(w, f.GetId(), c, f.GetRateCheck().GetClass(), f.GetRateCheck().GetPeek(), now)
			return true
		},
	},
	"StatsRequest": {
		workers: live,
		repeat:  "any",
		handle: func(d *dispatcher, w *workerProc, f *proto.Frame, _ *conn, now time.Time) bool {
			d.serveStats(w, f.GetId(), now)
			return true
		},
	},
	"UpstreamRelease": {
		workers: live,
		repeat:  "once per upstream connection",
		check: func(d *dispatcher, w *workerProc, f *proto.Frame, _ *conn) string {
			rel := f.GetUpstreamRelease()
			if !d.upstreams.Holds(d.up(w), rel.GetConn(), rel.GetUpstream()) {
				return fmt.Sprintf("releases an upstream connection to %.64q it does not hold", rel.GetUpstream())
			}
			return ""
		},
		handle: func(d *dispatcher, w *workerProc, f *proto.Frame, _ *conn, now time.Time) bool {
			d.upstreams.Release(d.up(w), f.GetUpstreamRelease().GetConn(), f.GetUpstreamRelease().GetUpstream(), now)
			return true
		},
	},
	"Reclaimed": {
		workers: live,
		repeat:  "once per Reclaim",
		check: func(d *dispatcher, w *workerProc, f *proto.Frame, _ *conn) string {
			if name := f.GetReclaimed().GetUpstream(); !d.upstreams.Reclaiming(d.up(w), name) {
				return fmt.Sprintf("Reclaimed %.64q without a Reclaim", name)
			}
			return ""
		},
		handle: func(d *dispatcher, w *workerProc, f *proto.Frame, _ *conn, now time.Time) bool {
			d.upstreams.Reclaimed(d.up(w), f.GetReclaimed().GetUpstream(), now)
			return true
		},
	},
	"BodyStart": {
		workers: live,
		connID:  func(f *proto.Frame) uint64 { return f.GetBodyStart().GetConnId() },
		rounds:  roundsIn(roundPool),
		repeat:  "once per request body",
		check:   checkBodyStart,
		handle: func(d *dispatcher, w *workerProc, f *proto.Frame, c *conn, now time.Time) bool {
			d.bodyStart(w, f.GetId(), c, f.GetBodyStart().GetLength(), now)
			return true
		},
	},
	"BodyDone": {
		workers: live,
		connID:  func(f *proto.Frame) uint64 { return f.GetBodyDone().GetConnId() },
		rounds:  roundsIn(roundBody),
		repeat:  "once per BodyStart",
		handle: func(d *dispatcher, _ *workerProc, f *proto.Frame, c *conn, now time.Time) bool {
			d.bodyDone(f.GetId(), c, now)
			return true
		},
	},
	"BodyProgress": {
		workers: live,
		connID:  func(f *proto.Frame) uint64 { return f.GetBodyProgress().GetConnId() },
		rounds:  roundsIn(roundBody),
		repeat:  "while received grows",
		check:   checkBodyProgress,
		handle: func(d *dispatcher, w *workerProc, f *proto.Frame, c *conn, now time.Time) bool {
			d.bodyProgress(w, f.GetId(), c, f.GetBodyProgress().GetReceived())
			return true
		},
	},
	"StreamStart": {
		workers: live,
		connID:  func(f *proto.Frame) uint64 { return f.GetStreamStart().GetConnId() },
		rounds:  roundsIn(roundPool),
		repeat:  "once per dispatch",
		handle: func(d *dispatcher, w *workerProc, f *proto.Frame, c *conn, now time.Time) bool {
			d.streamStart(w, f.GetId(), c, f.GetStreamStart().GetUpgrade(), now)
			return true
		},
	},
	"Sign": {
		workers: live,
		connID:  func(f *proto.Frame) uint64 { return f.GetSign().GetConnId() },
		rounds:  roundsIn(roundPool),
		repeat:  "once per handshake",
		check:   checkSign,
		handle: func(d *dispatcher, w *workerProc, f *proto.Frame, c *conn, now time.Time) bool {
			d.sign(w, f.GetId(), c, f.GetSign())
			return true
		},
	},
}

// frame handles one frame from a worker, with the descriptor that came with
// it (-1 for none), which it owns. It reports false when the worker was
// killed for it.
func (d *dispatcher) frame(w *workerProc, f *proto.Frame, fd int, now time.Time) bool {
	r := &frameTable[ipc.KindOf(f)]
	c, why := d.admitFrame(w, r, f, fd)
	if fd >= 0 {
		// No frame a worker sends carries one (TestFrameTableRows); ipc
		// admits one on the supervisor's own frames, which admit refuses.
		unix.Close(fd)
	}
	if why != "" {
		d.killWorker(w, why)
		return false
	}
	if r.request() && w.slots.TryAcquire() == ipc.ErrChannelFull {
		d.c.ipcOverloaded++
		d.send(w, &proto.Frame{Id: f.GetId(), Body: &proto.Frame_Overloaded{Overloaded: &proto.Overloaded{}}}, -1)
		return true
	}
	return r.handle(d, w, f, c, now)
}

// admitFrame checks f against its row r: it returns the connection f names (nil
// for none) or the violation.
func (d *dispatcher) admitFrame(w *workerProc, r *frameRule, f *proto.Frame, fd int) (*conn, string) {
	switch {
	case r.handle == nil:
		return nil, fmt.Sprintf("unexpected frame %T", f.Body)
	case !r.workers.has(w.state):
		return nil, fmt.Sprintf("%s while %s", r.Name, w.state)
	case r.request() != (f.GetId() != 0):
		if r.request() {
			return nil, r.Name + " with id 0"
		}
		return nil, fmt.Sprintf("%s with id %d, which no reply answers", r.Name, f.GetId())
	case (fd >= 0) != (r.FDs(f) > 0):
		return nil, fmt.Sprintf("%s with a descriptor count other than %d", r.Name, r.FDs(f))
	}
	var c *conn
	if r.connID != nil {
		id := r.connID(f)
		c = d.conns.get(id)
		switch {
		case c == nil || c.state != stateAtWorker || c.worker != w:
			return nil, fmt.Sprintf("%s for connection %d it does not hold", r.Name, id)
		case !r.rounds.has(c.round):
			return nil, fmt.Sprintf("%s for connection %d in round state %s", r.Name, id, c.round)
		}
	}
	if r.check != nil {
		if why := r.check(d, w, f, c); why != "" {
			return nil, why
		}
	}
	return c, ""
}
