package worker

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"net/http"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gatehouse-dev/gatehouse/internal/headend"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/worker/compress"
	"github.com/gatehouse-dev/gatehouse/worker/transport"
)

// Fixed transport limits (docs/DESIGN.md §3, §7).
const (
	headDeadline = headend.Deadline // from the head's first byte
	headGap      = headend.Gap      // longest silence inside a head
	bodyReadWait = 15 * time.Second // longest single wait inside a body
	// Minimum body rate: after bodyGrace, bytes received must be at least
	// bodyMinRate × (elapsed − bodyGrace).
	bodyGrace   = 10 * time.Second
	bodyMinRate = 16 << 10 // bytes per second
	// maxRequestsPerConn and maxConnAge close a connection after its
	// 1000th request or once it is an hour old (docs/DESIGN.md §3.4).
	maxRequestsPerConn = 1000
	maxConnAge         = time.Hour
	// pipelineRounds bounds the rounds served in a row from input already
	// held before the connection goes back to the supervisor with its input
	// carried, so one pipelining client cannot keep a worker slot.
	pipelineRounds = 8
	// maxDispatchAge bounds one dispatch, hot rounds included, so that the
	// supervisor's request counters (which Done updates) are never further
	// behind; Done's list of responses is bounded by maxRequestsPerConn. It
	// is not a bound on rounds, and must not be tight: a connection handed
	// back waits on a busy worker's run queue twice (its Dispatch, its
	// server goroutine) before its next request is read. A bound of 64
	// rounds put 1.4 % of requests behind two sweeps of 500 connections
	// (wrk -c1000, 2 × 1024 workers: p99 200-250 ms, 47-60 ms without it).
	maxDispatchAge = 10 * time.Second
	// drainMax bounds the unread request body discarded to keep a
	// connection alive; a larger remainder closes it instead.
	drainMax = 256 << 10
)

// serve runs the rounds of one dispatched connection and hands it back.
func (w *Worker) serve(st *serverState, j job) {
	defer func() {
		w.serving.Add(-1)
		w.exitIfDrained()
	}()
	d, fd, k := j.f.GetDispatch(), j.fd, j.k
	disp, carried, requests := proto.Disposition_CLOSE, []byte(nil), d.GetRequests()
	outcome := proto.Outcome_PEER_RESET
	statuses, micros := st.statuses[:0], st.micros[:0]
	// The descriptor is non-blocking (the supervisor accepted it so). A TLS
	// connection's goes under the runtime's poller with deadlines at once
	// (os.NewFile, without the extra dup and close net.FileConn would cost);
	// a plain one's only if a read or write must wait (transport.Plain).
	var nc clientConn
	var tnc *os.File // a TLS connection's transport
	var tc *tls.Conn
	switch {
	case k != nil && k.tc != nil:
		// Kept for affinity: the TLS state and the plaintext held.
		tnc, tc, fd = k.nc, k.tc, k.fd
		d.Carried = k.plain
	case k != nil:
		// A plain connection's kept copy.
		fd = k.fd
	case d.GetTls():
		tnc = os.NewFile(uintptr(fd), "conn")
		var err error
		if tc, outcome, err = w.handshake(d, tnc, fd); err != nil {
			w.log.Debug("TLS handshake failed", "conn", d.GetConnId(), "error", err)
		}
		// The supervisor carries no bytes of a TLS connection.
		d.Carried = nil
	}
	if tnc != nil {
		nc = tnc
	} else {
		st.pc.Reset(fd)
		if d.GetDrained() && k == nil {
			st.pc.SetDrained()
		}
		nc = &st.pc
	}
	outside := false // the connection gave its slot back for a body
	kept, pending := false, false
	var handback proto.Handback
	var hot uint32
	if tc != nil || !d.GetTls() {
		var cs *connServer
		if tc != nil {
			cs = newConnServer(&st.cs, w, tc, d)
			cs.tls, cs.tfd, cs.tnc = true, fd, tnc
			cs.tt = tc.NetConn().(*transport.TLS)
			cs.in.full = k != nil && k.full
			if k != nil {
				cs.state = k.state
			}
		} else {
			cs = newConnServer(&st.cs, w, nc, d)
			cs.fd = fd
		}
		cs.statuses, cs.micros = statuses, micros
		disp, carried, requests = cs.serve()
		outcome, statuses, micros, outside = cs.outcome, cs.statuses, cs.micros, cs.outside
		st.statuses, st.micros = statuses, micros
		handback, hot = cs.handback, cs.hotRequests
		full, state := cs.in.full, cs.state
		cs.release()
		switch {
		case tc != nil && disp == proto.Disposition_KEEP_ALIVE:
			// The TLS state stays here; the plaintext read ahead (part
			// of a head, or requests past the rounds bound) with it.
			// After a stream-class round too (outside the pool): the
			// state cannot go back to the supervisor as a plain
			// connection's input does, so closing it here would end a
			// connection the client keeps alive.
			pending = headend.Decided(carried)
			kept = w.keep(d.GetConnId(), &keptConn{nc: tnc, tc: tc, fd: fd, plain: carried, full: full, state: state})
			carried = nil
		case tc == nil && disp == proto.Disposition_KEEP_ALIVE && !outside && !w.draining.Load():
			// A plain connection's copy stays too (a draining worker
			// keeps none: it is about to exit); its carried input goes
			// back to the supervisor as always.
			kept = w.keepPlain(d.GetConnId(), fd)
		case tc != nil:
			// close_notify, bounded like any write, with the last
			// response's bytes it held back (transport.TLS.Hold).
			tnc.SetWriteDeadline(time.Now().Add(w.cfg.Limits.WriteTimeout))
			tc.CloseWrite()
			tc.NetConn().(*transport.TLS).Flush()
		}
		if disp == proto.Disposition_LINGER {
			unix.Shutdown(fd, unix.SHUT_WR)
		}
	}
	if !kept || tc == nil {
		// Our copy is closed before Done: the supervisor then owns the
		// connection alone (a plain one kept here is a duplicate outside
		// the poller).
		nc.Close()
	}
	done, m := st.doneFrame()
	m.ConnId = d.GetConnId()
	m.Disposition = disp
	m.Outcome = outcome
	m.ResponseStatus, m.ResponseMicros = statuses, micros
	m.Carried = carried
	m.Requests = requests
	m.HotRequests = hot
	m.Handback = handback
	m.Kept = kept
	m.Pending = pending
	// The slot is released before Done is written: once the supervisor
	// reads Done it may dispatch again at once, and must never find the slot
	// still taken (the admission race, docs/DESIGN.md §2.6).
	if !outside {
		w.active.Add(-1)
	}
	if err := w.ch.Send(done, -1); err != nil {
		w.log.Error("returning connection", "conn", d.GetConnId(), "error", err)
	}
}

// connServer serves the rounds of one dispatch. It is owned by one goroutine.
type connServer struct {
	w        *Worker
	nc       clientConn
	d        *proto.Dispatch
	accepted time.Time
	// dispatched is when the dispatch began (maxDispatchAge).
	dispatched time.Time
	requests   uint32

	outcome  proto.Outcome  // how the last round ended
	handback proto.Handback // why a kept-alive connection goes back
	// hotRequests counts the requests that arrived in a hot wait; hotNext
	// says the next head did, counted once a round reads it as a request.
	hotRequests uint32
	hotNext     bool
	// statuses and micros describe the responses of this dispatch, for
	// the supervisor's metrics.
	statuses   []uint32
	micros     []uint64
	carried    *bytes.Reader
	raw        headRecorder // the raw head, for Origin when it does not parse
	roundStart time.Time
	// outside: the connection gave its slot back for a body (BodyStart)
	// and has not got one again.
	outside bool
	// streamed: the connection left the pool for the stream budget
	// (StreamStart); the dispatch ends with this round.
	streamed bool
	// upgraded: the connection was switched to another protocol and
	// relayed; it is closed after the round.
	upgraded bool
	rw       *response // the current round's response
	rt       *route    // the round's route; nil before routing, or when none matched
	in       deadlineReader
	br       *bufio.Reader
	bw       *bufio.Writer
	// The readers and writer under br and bw, held here so that a server
	// goroutine reusing cs allocates none of them per dispatch.
	carriedR bytes.Reader
	input    carriedThenConn
	out      deadlineWriter
	// The round's parent context, response, response header, body and
	// buffered response body, reused round after round: a handler uses
	// none of them after it returns.
	parent     connContext
	resp       response
	respHeader http.Header
	pendingBuf []byte
	reqBody    body
	cz         compress.Writer // a compressing route's writer

	fd        int                  // the connection's descriptor, or -1; owned by nc
	tls       bool                 // nc is a TLS connection
	tfd       int                  // a TLS connection's descriptor, for peeks
	tnc       *os.File             // a TLS connection's transport, for hot waits
	tt        *transport.TLS       // its record reader, told not to wait in tlsHeadReady
	state     *tls.ConnectionState // Request.TLS, once asked (tlsState)
	peek1     [1]byte              // inputEmpty's peek
	listener  listenerHTTP         // what the connection's listener adds
	port      string               // the local port, once asked
	portAsked bool
}

// serve answers requests while input is buffered, up to pipelineRounds in a
// row, and while requests arrive within the hot window, and returns what the
// supervisor should do with the connection.
func (cs *connServer) serve() (proto.Disposition, []byte, uint32) {
	held := 0 // rounds served in a row from input already held
	oneRequest := cs.keyedPerRequest()
	for round := 1; ; round++ {
		if cs.tls && !cs.tlsHeadReady() {
			// Nothing at all after a handshake: the first request
			// commonly follows at once, and is waited for hot (which
			// sets the hand-back's reason if none comes).
			hot := hotNothing
			if round == 1 && cs.pending() == 0 {
				hot = cs.hotWait()
			} else {
				cs.handback = proto.Handback_PARTIAL_HEAD
			}
			switch hot {
			case hotNothing:
				// Never wait for the rest of a head beyond the hot
				// window: the connection goes back to the supervisor,
				// its plaintext kept here.
				return proto.Disposition_KEEP_ALIVE, cs.leftover(), cs.requests
			case hotClosed:
				return proto.Disposition_CLOSE, nil, cs.requests
			}
		}
		keep, disp := cs.round()
		if !keep {
			return disp, nil, cs.requests
		}
		if cs.streamed {
			// Out of the pool: the supervisor releases the stream budget
			// and serves any further request under the pool again.
			cs.handback = proto.Handback_STREAM
			// A TLS connection's next head may be decrypted already,
			// inside crypto/tls: pulled into the held input, it is
			// dispatched again at once (Done's pending), not left
			// waiting for the socket.
			cs.tlsPull()
			return proto.Disposition_KEEP_ALIVE, cs.leftover(), cs.requests
		}
		held++
		if oneRequest {
			// The next head goes to the supervisor, which derives its
			// client key (keyedPerRequest).
			cs.handback = proto.Handback_ROUNDS
			return proto.Disposition_KEEP_ALIVE, cs.leftover(), cs.requests
		}
		cs.tlsPull()
		cs.skipEmptyLines()
		if cs.pending() == 0 {
			if cs.dispatchSpent() {
				cs.handback = proto.Handback_ROUNDS
				return proto.Disposition_KEEP_ALIVE, nil, cs.requests
			}
			switch cs.hotWait() {
			case hotNothing:
				return proto.Disposition_KEEP_ALIVE, nil, cs.requests
			case hotClosed:
				return proto.Disposition_CLOSE, nil, cs.requests
			}
			held = 0
			// Empty lines alone start no head: carried back, they would
			// start the supervisor's head deadlines.
			cs.skipEmptyLines()
			if cs.pending() == 0 {
				return proto.Disposition_KEEP_ALIVE, nil, cs.requests
			}
		}
		// The next request goes through the dispatcher's rule too: the
		// worker never waits for the rest of a head; the supervisor does.
		if !cs.headDecided() && !(cs.tls && cs.in.full && cs.tlsHeadReady()) {
			cs.handback = proto.Handback_PARTIAL_HEAD
			return proto.Disposition_KEEP_ALIVE, cs.leftover(), cs.requests
		}
		// A request that came in a hot wait is served even when a drain
		// began meanwhile (its response closes the connection); input
		// pipelined behind a response is not.
		draining := held > 0 && cs.drainCloses()
		if held >= pipelineRounds || cs.dispatchSpent() || draining {
			if draining {
				return proto.Disposition_LINGER, nil, cs.requests
			}
			cs.handback = proto.Handback_ROUNDS
			return proto.Disposition_KEEP_ALIVE, cs.leftover(), cs.requests
		}
	}
}
