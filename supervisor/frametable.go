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
// (TestFrameTableDocumented holds it, and docs/DESIGN.md §4.4, to this
// table).

// frameKind indexes frameTable.
type frameKind uint8

const (
	frameOther frameKind = iota // any frame a worker never sends
	frameReady
	frameDone
	framePong
	frameDial
	frameRateCheck
	frameStatsRequest
	frameUpstreamRelease
	frameReclaimed
	frameBodyStart
	frameBodyDone
	frameStreamStart
	frameSign
	frameBodyProgress
	frameKinds
)

// kindOf is f's row in frameTable.
func kindOf(f *proto.Frame) frameKind {
	switch f.Body.(type) {
	case *proto.Frame_Ready:
		return frameReady
	case *proto.Frame_Done:
		return frameDone
	case *proto.Frame_Pong:
		return framePong
	case *proto.Frame_Dial:
		return frameDial
	case *proto.Frame_RateCheck:
		return frameRateCheck
	case *proto.Frame_StatsRequest:
		return frameStatsRequest
	case *proto.Frame_UpstreamRelease:
		return frameUpstreamRelease
	case *proto.Frame_Reclaimed:
		return frameReclaimed
	case *proto.Frame_BodyStart:
		return frameBodyStart
	case *proto.Frame_BodyDone:
		return frameBodyDone
	case *proto.Frame_BodyProgress:
		return frameBodyProgress
	case *proto.Frame_StreamStart:
		return frameStreamStart
	case *proto.Frame_Sign:
		return frameSign
	}
	return frameOther
}

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
	name string
	// request: the id is not 0, and the frame takes an in-flight slot and
	// gets exactly one reply with its id (its reply type, or Overloaded).
	// Every other frame has id 0 and gets no reply.
	request bool
	// fds is how many descriptors the frame carries (ipc checks the
	// count it expects; this is what the dispatcher admits).
	fds int
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

// frameTable is indexed by frameKind; frameOther's row admits nothing.
var frameTable = [frameKinds]frameRule{
	frameOther: {name: "(other)"},
	frameReady: {
		name:    "Ready",
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
	frameDone: {
		name:    "Done",
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
	framePong: {
		name:    "Pong",
		workers: started,
		repeat:  "any",
		handle: func(d *dispatcher, w *workerProc, _ *proto.Frame, _ *conn, now time.Time) bool {
			w.lastPong = now
			return true
		},
	},
	frameDial: {
		name:    "Dial",
		request: true,
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
	frameRateCheck: {
		name:    "RateCheck",
		request: true,
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
			d.rateCheck(w, f.GetId(), c, f.GetRateCheck().GetClass(), now)
			return true
		},
	},
	frameStatsRequest: {
		name:    "StatsRequest",
		request: true,
		workers: live,
		repeat:  "any",
		handle: func(d *dispatcher, w *workerProc, f *proto.Frame, _ *conn, now time.Time) bool {
			d.serveStats(w, f.GetId(), now)
			return true
		},
	},
	frameUpstreamRelease: {
		name:    "UpstreamRelease",
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
	frameReclaimed: {
		name:    "Reclaimed",
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
	frameBodyStart: {
		name:    "BodyStart",
		request: true,
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
	frameBodyDone: {
		name:    "BodyDone",
		request: true,
		workers: live,
		connID:  func(f *proto.Frame) uint64 { return f.GetBodyDone().GetConnId() },
		rounds:  roundsIn(roundBody),
		repeat:  "once per BodyStart",
		handle: func(d *dispatcher, _ *workerProc, f *proto.Frame, c *conn, now time.Time) bool {
			d.bodyDone(f.GetId(), c, now)
			return true
		},
	},
	frameBodyProgress: {
		name:    "BodyProgress",
		request: true,
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
	frameStreamStart: {
		name:    "StreamStart",
		request: true,
		workers: live,
		connID:  func(f *proto.Frame) uint64 { return f.GetStreamStart().GetConnId() },
		rounds:  roundsIn(roundPool),
		repeat:  "once per dispatch",
		handle: func(d *dispatcher, w *workerProc, f *proto.Frame, c *conn, now time.Time) bool {
			d.streamStart(w, f.GetId(), c, f.GetStreamStart().GetUpgrade(), now)
			return true
		},
	},
	frameSign: {
		name:    "Sign",
		request: true,
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
	r := &frameTable[kindOf(f)]
	c, why := d.admitFrame(w, r, f, fd)
	if fd >= 0 {
		// No worker frame carries one (fds is 0 in every row); ipc admits
		// one on the supervisor's own frames, which admit refuses.
		unix.Close(fd)
	}
	if why != "" {
		d.killWorker(w, why)
		return false
	}
	if r.request && w.slots.TryAcquire() == ipc.ErrChannelFull {
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
		return nil, fmt.Sprintf("%s while %s", r.name, w.state)
	case r.request != (f.GetId() != 0):
		if r.request {
			return nil, r.name + " with id 0"
		}
		return nil, fmt.Sprintf("%s with id %d, which no reply answers", r.name, f.GetId())
	case (fd >= 0) != (r.fds > 0):
		return nil, fmt.Sprintf("%s with a descriptor count other than %d", r.name, r.fds)
	}
	var c *conn
	if r.connID != nil {
		id := r.connID(f)
		c = d.conns.get(id)
		switch {
		case c == nil || c.state != stateAtWorker || c.worker != w:
			return nil, fmt.Sprintf("%s for connection %d it does not hold", r.name, id)
		case !r.rounds.has(c.round):
			return nil, fmt.Sprintf("%s for connection %d in round state %s", r.name, id, c.round)
		}
	}
	if r.check != nil {
		if why := r.check(d, w, f, c); why != "" {
			return nil, why
		}
	}
	return c, ""
}
