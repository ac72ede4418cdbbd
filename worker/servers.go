package worker

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/worker/transport"
)

// job is one dispatch for a server goroutine: the frame that carried it
// (owned by the job until served), its descriptor and, for a kept TLS
// connection, what the worker kept.
type job struct {
	f  *proto.Frame
	fd int
	k  *keptConn
}

// servers runs dispatches on long-lived goroutines, at most concurrency of
// them, so a dispatch starts no goroutine once the worker is warm, and each
// goroutine reuses its Done frame and buffers (TestRoundAllocs).
type servers struct {
	jobs chan job // buffered to concurrency: a send never blocks
	// idle counts the goroutines waiting for a job, each reserved by the
	// frame loop before it sends: a job never waits behind a busy one.
	idle   atomic.Int32
	frames chan *proto.Frame // served dispatches' frames, for the frame loop
}

func newServers(conc int) servers {
	return servers{jobs: make(chan job, conc), frames: make(chan *proto.Frame, conc+1)}
}

// start hands j to an idle server goroutine, or starts one for it. Only the
// frame loop calls it, and never for more than concurrency jobs at once.
func (w *Worker) start(j job) {
	if w.srv.idle.Add(-1) >= 0 {
		w.srv.jobs <- j
		return
	}
	w.srv.idle.Add(1)
	go w.server(j)
}

// serverIdle is how long a server goroutine waits for its next job before
// it ends, dropping its stack and what its serverState holds: after a burst
// the worker keeps only the goroutines its steady load keeps busy, and what
// the others held goes back to the system with the next trim
// (internal/memtrim waits for two quiet seconds).
const serverIdle = time.Second

// server serves j, then every job it is handed until the frame loop ends or
// none comes for serverIdle.
func (w *Worker) server(j job) {
	var st serverState
	idle := time.NewTimer(serverIdle)
	defer idle.Stop()
	for {
		w.serve(&st, j)
		w.recycle(j.f)
		w.srv.idle.Add(1)
		idle.Reset(serverIdle)
		ok := true
		select {
		case j, ok = <-w.srv.jobs:
		case <-idle.C:
			if w.srv.leave() {
				return
			}
			j, ok = <-w.srv.jobs
		}
		if !ok {
			return
		}
	}
}

// leave takes an idle server goroutine off the count, unless every idle one
// is reserved for a job already on its way; it reports whether the caller
// may end.
func (s *servers) leave() bool {
	for {
		n := s.idle.Load()
		if n <= 0 {
			return false
		}
		if s.idle.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// frame returns an empty frame for the frame loop to receive into: one a
// served dispatch gave back (its Dispatch message kept for the next), or a
// new one.
func (w *Worker) frame() *proto.Frame {
	select {
	case f := <-w.srv.frames:
		return f
	default:
		return new(proto.Frame)
	}
}

// recycle gives a served dispatch's frame back to the frame loop.
func (w *Worker) recycle(f *proto.Frame) {
	ipc.Reset(f)
	select {
	case w.srv.frames <- f:
	default:
	}
}

// serverState is what a server goroutine reuses from one dispatch to the
// next.
type serverState struct {
	done     proto.Frame
	doneBody proto.Frame_Done
	doneMsg  proto.Done
	statuses []uint32
	micros   []uint64
	cs       connServer
	pc       transport.Plain // the plain connection being served
}

// doneFrame returns st's Done frame, emptied, for one dispatch.
func (st *serverState) doneFrame() (*proto.Frame, *proto.Done) {
	m := &st.doneMsg
	m.Reset()
	st.doneBody.Done = m
	st.done.Reset()
	st.done.Body = &st.doneBody
	return &st.done, m
}

// clientConn is a client connection with deadlines: a *transport.Plain, or a TLS
// connection's *os.File.
type clientConn interface {
	io.ReadWriteCloser
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
}

// The round buffers of a connServer, pooled across dispatches: a server
// goroutine takes a pair for each dispatch and gives it back (release).
const (
	readBufSize  = 16 << 10
	writeBufSize = 8 << 10
)

var (
	readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufSize) }}
	writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, writeBufSize) }}
)

// newConnServer readies cs, a server goroutine's own, for one dispatch:
// everything from the previous one is dropped but the buffers' capacity.
func newConnServer(cs *connServer, w *Worker, nc clientConn, d *proto.Dispatch) *connServer {
	rawBuf, respHeader, pendingBuf, cz := cs.raw.buf[:0], cs.respHeader, cs.pendingBuf[:0], cs.cz
	*cs = connServer{
		w:          w,
		nc:         nc,
		d:          d,
		accepted:   time.Unix(0, d.GetAcceptedUnixNano()),
		dispatched: time.Now(),
		requests:   d.GetRequests(),
		fd:         -1,
		listener:   w.router.byListener[d.GetListenerName()],
	}
	cs.carriedR.Reset(d.GetCarried())
	cs.carried = &cs.carriedR
	cs.in.nc = nc
	cs.input = carriedThenConn{carried: cs.carried, conn: &cs.in}
	cs.raw.r, cs.raw.buf = &cs.input, rawBuf
	cs.parent = connContext{Context: context.Background(), cs: cs}
	cs.respHeader, cs.pendingBuf, cs.cz = respHeader, pendingBuf, cz
	cs.br = readerPool.Get().(*bufio.Reader)
	cs.br.Reset(&cs.raw)
	pc, _ := nc.(*transport.Plain)
	cs.out = deadlineWriter{nc: nc, pc: pc, timeout: w.cfg.Limits.WriteTimeout}
	cs.bw = writerPool.Get().(*bufio.Writer)
	cs.bw.Reset(&cs.out)
	return cs
}

// carriedThenConn reads the carried input, then the connection: an
// io.MultiReader that allocates nothing.
type carriedThenConn struct {
	carried *bytes.Reader
	conn    io.Reader
}

func (r *carriedThenConn) Read(p []byte) (int, error) {
	if r.carried.Len() > 0 {
		return r.carried.Read(p)
	}
	return r.conn.Read(p)
}

// release gives the round buffers back to their pools, once.
func (cs *connServer) release() {
	if cs.br == nil {
		return
	}
	cs.br.Reset(nil)
	readerPool.Put(cs.br)
	cs.bw.Reset(nil)
	writerPool.Put(cs.bw)
	cs.br, cs.bw = nil, nil
}
