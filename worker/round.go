package worker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/worker/httphead"
)

// Fixed transport limits (SPEC §3, §7).
const (
	headDeadline = 30 * time.Second // from the head's first byte
	headGap      = 5 * time.Second  // longest silence inside a head
	bodyReadWait = 15 * time.Second // longest single wait inside a body
	// Minimum body rate: after bodyGrace, bytes received must be at least
	// bodyMinRate × (elapsed − bodyGrace).
	bodyGrace   = 10 * time.Second
	bodyMinRate = 16 << 10 // bytes per second
	// maxRequestsPerConn and maxConnAge close a connection after its
	// 1000th request or once it is an hour old (reference HTTP-8).
	maxRequestsPerConn = 1000
	maxConnAge         = time.Hour
	// pipelineRounds bounds the rounds served in one dispatch before the
	// connection goes back to the supervisor with its input carried, so one
	// pipelining client cannot keep a worker slot.
	pipelineRounds = 8
	// drainMax bounds the unread request body discarded to keep a
	// connection alive; a larger remainder closes it instead.
	drainMax     = 256 << 10
	readBufSize  = 16 << 10
	writeBufSize = 8 << 10
)

var (
	readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufSize) }}
	writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, writeBufSize) }}
)

// serve runs the rounds of one dispatched connection and hands it back.
func (w *Worker) serve(d *proto.Dispatch, fd int) {
	defer w.wg.Done()
	disp, carried, requests := proto.Disposition_CLOSE, []byte(nil), d.GetRequests()
	outcome := proto.Outcome_PEER_RESET
	f := os.NewFile(uintptr(fd), "conn")
	nc, err := net.FileConn(f)
	f.Close() // FileConn holds its own duplicate
	if err != nil {
		w.log.Warn("wrapping connection", "error", err)
	} else {
		cs := newConnServer(w, nc, d)
		disp, carried, requests = cs.serve()
		outcome = cs.outcome
		cs.release()
		if disp == proto.Disposition_LINGER {
			if tc, ok := nc.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
		}
		// Our copy is closed before Done: the supervisor then owns the
		// connection alone.
		nc.Close()
	}
	done := &proto.Frame{Body: &proto.Frame_Done{Done: &proto.Done{
		ConnId:      d.GetConnId(),
		Disposition: disp,
		Outcome:     outcome,
		Carried:     carried,
		Requests:    requests,
	}}}
	// The slot is released before Done is written: once the supervisor
	// reads Done it may dispatch again at once, and must never find the slot
	// still taken (reference/admission-race-analysis.txt, variant B).
	w.active.Add(-1)
	if err := w.ch.Send(done, -1); err != nil {
		w.log.Error("returning connection", "conn", d.GetConnId(), "error", err)
	}
}

// connServer serves the rounds of one dispatch. It is owned by one goroutine.
type connServer struct {
	w        *Worker
	nc       net.Conn
	d        *proto.Dispatch
	accepted time.Time
	requests uint32

	outcome proto.Outcome // how the last round ended
	carried *bytes.Reader
	in      *deadlineReader
	br      *bufio.Reader
	bw      *bufio.Writer
}

func newConnServer(w *Worker, nc net.Conn, d *proto.Dispatch) *connServer {
	cs := &connServer{
		w:        w,
		nc:       nc,
		d:        d,
		accepted: time.Unix(0, d.GetAcceptedUnixNano()),
		requests: d.GetRequests(),
		carried:  bytes.NewReader(d.GetCarried()),
	}
	cs.in = &deadlineReader{nc: nc}
	cs.br = readerPool.Get().(*bufio.Reader)
	cs.br.Reset(io.MultiReader(cs.carried, cs.in))
	cs.bw = writerPool.Get().(*bufio.Writer)
	cs.bw.Reset(&deadlineWriter{nc: nc, timeout: w.cfg.Limits.WriteTimeout})
	return cs
}

func (cs *connServer) release() {
	cs.br.Reset(nil)
	readerPool.Put(cs.br)
	cs.bw.Reset(nil)
	writerPool.Put(cs.bw)
}

// pending reports how many input bytes are already held above the socket.
func (cs *connServer) pending() int { return cs.br.Buffered() + cs.carried.Len() }

// leftover returns the held input, to carry back to the supervisor.
func (cs *connServer) leftover() []byte {
	b, _ := cs.br.Peek(cs.br.Buffered())
	out := append([]byte(nil), b...)
	rest := make([]byte, cs.carried.Len())
	cs.carried.Read(rest)
	return append(out, rest...)
}

// serve answers requests while input is buffered, up to pipelineRounds, and
// returns what the supervisor should do with the connection.
func (cs *connServer) serve() (proto.Disposition, []byte, uint32) {
	for round := 0; ; round++ {
		keep, disp := cs.round()
		if !keep {
			return disp, nil, cs.requests
		}
		if cs.pending() == 0 {
			return proto.Disposition_KEEP_ALIVE, nil, cs.requests
		}
		if round+1 >= pipelineRounds || cs.w.draining.Load() {
			if cs.w.draining.Load() {
				return proto.Disposition_LINGER, nil, cs.requests
			}
			return proto.Disposition_KEEP_ALIVE, cs.leftover(), cs.requests
		}
	}
}

// round reads one request head, runs its handler and frames its response. It
// reports whether the connection stays open, and if not, how to close it.
func (cs *connServer) round() (keep bool, disp proto.Disposition) {
	start := time.Now()
	cs.in.head(start)
	head, err := httphead.ReadHead(cs.br, httphead.Limits{})
	if err != nil {
		return false, cs.headError(err)
	}
	cs.requests++
	lim := cs.w.cfg.Limits
	keep = wantsKeepAlive(head) &&
		cs.requests < maxRequestsPerConn &&
		time.Since(cs.accepted) < maxConnAge &&
		!cs.w.draining.Load()

	if head.ContentLength > lim.MaxBodyBytes {
		cs.writeError(http.StatusRequestEntityTooLarge, "request body too large", head)
		return false, proto.Disposition_LINGER
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := newBody(cs, head, lim.MaxBodyBytes, start)
	req := &http.Request{
		Method:     head.Method,
		URL:        head.URL,
		Proto:      head.Proto,
		ProtoMajor: head.ProtoMajor,
		ProtoMinor: head.ProtoMinor,
		Header:     head.Header,
		Host:       head.Host,
		RequestURI: head.Target,
		RemoteAddr: cs.d.GetPeer(),
		Close:      !keep,
	}
	if req.URL == nil {
		req.URL = &url.URL{Path: "/"}
	}
	if head.Chunked {
		req.TransferEncoding = []string{"chunked"}
	}
	req.ContentLength = head.ContentLength
	req.Body = body
	if !head.HasBody() {
		req.Body = http.NoBody
	}
	req = req.WithContext(ctx)

	rw := newResponse(cs, req, keep)
	cs.w.router.serveHTTP(rw, req)
	if status := bodyErrorStatus(body.err); status != 0 && !rw.headerSent {
		// The handler stopped on a body the transport refused; its answer
		// is replaced by the transport's, which closes the connection.
		cs.outcome = proto.Outcome_BAD_REQUEST
		if status == http.StatusRequestTimeout {
			cs.outcome = proto.Outcome_TIMEOUT
		}
		cs.writeError(status, body.err.Error(), head)
		return false, proto.Disposition_LINGER
	}
	if err := rw.finish(); err != nil {
		cs.outcome = proto.Outcome_PEER_RESET
		if isTimeout(err) {
			cs.outcome = proto.Outcome_TIMEOUT
		}
		return false, proto.Disposition_CLOSE
	}
	if !rw.keep {
		return false, proto.Disposition_LINGER
	}
	// The body is drained exactly before the next round, or the
	// connection closes (SPEC §3, keep-alive).
	if head.HasBody() && !body.drain(drainMax) {
		if errors.Is(body.err, ErrBodyTooSlow) {
			cs.outcome = proto.Outcome_TIMEOUT
		}
		return false, proto.Disposition_LINGER
	}
	return true, proto.Disposition_KEEP_ALIVE
}

// headError answers a head that could not be read, or closes quietly.
func (cs *connServer) headError(err error) proto.Disposition {
	var he *httphead.Error
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF):
		cs.outcome = proto.Outcome_PEER_CLOSED
		return proto.Disposition_CLOSE
	case errors.As(err, &he):
		cs.outcome = proto.Outcome_BAD_REQUEST
		cs.writeError(he.Status, string(he.Code), nil)
		return proto.Disposition_LINGER
	case errors.As(err, &ne) && ne.Timeout():
		cs.outcome = proto.Outcome_TIMEOUT
		cs.writeError(http.StatusRequestTimeout, "request head not received in time", nil)
		return proto.Disposition_LINGER
	}
	cs.outcome = proto.Outcome_PEER_RESET
	return proto.Disposition_CLOSE
}

// wantsKeepAlive applies RFC 9112 §9.3: HTTP/1.1 persists unless "close";
// HTTP/1.0 closes unless "keep-alive".
func wantsKeepAlive(h *httphead.Head) bool {
	if h.Close {
		return false
	}
	if h.ProtoMajor == 1 && h.ProtoMinor == 0 {
		return h.KeepAlive
	}
	return true
}

// deadlineReader feeds the current phase's deadline into every read, so each
// cap bounds the wait that enforces it.
type deadlineReader struct {
	nc    net.Conn
	limit func(now time.Time) time.Time
}

// head starts the head phase: 30 s from the first byte, with an inter-byte gap.
func (r *deadlineReader) head(start time.Time) {
	end := start.Add(headDeadline)
	r.limit = func(now time.Time) time.Time { return earliest(end, now.Add(headGap)) }
}

func (r *deadlineReader) Read(p []byte) (int, error) {
	if r.limit != nil {
		r.nc.SetReadDeadline(r.limit(time.Now()))
	}
	return r.nc.Read(p)
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// deadlineWriter gives every write to the peer write_timeout to complete, so a
// client that stops reading cannot hold a worker.
type deadlineWriter struct {
	nc      net.Conn
	timeout time.Duration
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	w.nc.SetWriteDeadline(time.Now().Add(w.timeout))
	return w.nc.Write(p)
}
