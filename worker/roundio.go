package worker

import (
	"bufio"
	"crypto/tls"
	"io"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gatehouse-dev/gatehouse/internal/headend"
	"github.com/gatehouse-dev/gatehouse/internal/sysio"
	"github.com/gatehouse-dev/gatehouse/worker/httphead"
	"github.com/gatehouse-dev/gatehouse/worker/transport"
)

// deadlineReader feeds the current phase's deadline into every read, so each
// cap bounds the wait that enforces it.
type deadlineReader struct {
	nc clientConn
	// limit is the deadline of the phase after the head (a body); nil
	// with headEnd zero: no deadline.
	limit func(now time.Time) time.Time
	// headEnd is the head phase's deadline, which the inter-byte gap
	// shortens; zero outside the head phase. A field, not a closure in
	// limit, so that a round's head costs no allocation.
	headEnd time.Time
	// full: the last read filled its buffer. crypto/tls returns at most
	// what a read asks for and keeps the rest of a record's plaintext in
	// the TLS state, where pending() does not see it; only a read that
	// filled its buffer can have left some there.
	full bool
}

// head starts the head phase: 30 s from the first byte, with an inter-byte gap.
func (r *deadlineReader) head(start time.Time) {
	r.limit = nil
	r.headEnd = start.Add(headDeadline)
}

// setLimit ends the head phase and starts another, with its own deadline
// (nil: none).
func (r *deadlineReader) setLimit(limit func(now time.Time) time.Time) {
	r.headEnd = time.Time{}
	r.limit = limit
}

func (r *deadlineReader) Read(p []byte) (int, error) {
	switch {
	case !r.headEnd.IsZero():
		r.nc.SetReadDeadline(earliest(r.headEnd, time.Now().Add(headGap)))
	case r.limit != nil:
		r.nc.SetReadDeadline(r.limit(time.Now()))
	}
	n, err := r.nc.Read(p)
	r.full = n > 0 && n == len(p)
	return n, err
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// deadlineWriter gives every write to the peer write_timeout to complete, so a
// client that stops reading cannot hold a worker. On a plain connection it
// can send what the write buffer flushes together with what follows
// (docs/DESIGN.md §3.5): tail in the same system call, or the whole with
// MSG_MORE.
type deadlineWriter struct {
	nc      clientConn
	pc      *transport.Plain // nc when it is a plain connection, else nil
	timeout time.Duration
	// tail is written after the next write's bytes, in one send (only with
	// pc, and only for a Flush of a non-empty buffer).
	tail []byte
	// more: the caller sends more of the response at once (only with pc).
	more bool
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	w.nc.SetWriteDeadline(time.Now().Add(w.timeout))
	if w.pc != nil && (w.tail != nil || w.more) {
		tail := w.tail
		w.tail = nil
		n, err := w.pc.WriteParts(p, tail, w.more)
		return min(n, len(p)), err
	}
	return w.nc.Write(p)
}

// writeAfterBuffered writes p after what bw holds. When p does not fit in
// bw's room on a plain connection, both leave in one send: a header and a
// body leave in one segment when they fit in one, where bw would fill its
// buffer, send it, and send the rest of p apart.
func (cs *connServer) writeAfterBuffered(p []byte) error {
	bw := cs.bw
	if cs.out.pc == nil || bw.Buffered() == 0 || len(p) <= bw.Available() {
		_, err := bw.Write(p)
		return err
	}
	cs.out.tail = p
	err := bw.Flush()
	cs.out.tail = nil
	return err
}

// maxRawHead bounds what headRecorder keeps: a whole head at its caps.
const maxRawHead = httphead.DefaultMaxStartLine + httphead.DefaultMaxHeaderBytes + 2

// headRecorder passes input through and, while on, keeps a copy of the head
// being read, so that a head which never parses can still be answered with
// the CORS headers its Origin asks for.
type headRecorder struct {
	r   io.Reader
	on  bool
	buf []byte
}

// start records from the input already buffered in br onwards.
func (h *headRecorder) start(br *bufio.Reader) {
	b, _ := br.Peek(br.Buffered())
	h.buf = append(h.buf[:0], b[:min(len(b), maxRawHead)]...)
	h.on = true
}

func (h *headRecorder) stop() {
	h.on = false
	h.buf = h.buf[:0]
}

func (h *headRecorder) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if h.on && len(h.buf) < maxRawHead {
		h.buf = append(h.buf, p[:min(n, maxRawHead-len(h.buf))]...)
	}
	return n, err
}

// pending reports how many input bytes are already held above the socket.
func (cs *connServer) pending() int { return cs.br.Buffered() + cs.carried.Len() }

// skipEmptyLines drops the empty lines a client may send after a request
// (RFC 9112 §2.2: a server SHOULD ignore at least one before a request) when
// they are all that is buffered, so that they do not start a round that then
// waits for a head. Empty lines before a buffered request are left to the
// head parser and its bound.
func (cs *connServer) skipEmptyLines() {
	n := cs.br.Buffered()
	if n == 0 || n > 8 || cs.carried.Len() > 0 {
		return
	}
	b, _ := cs.br.Peek(n)
	for _, c := range b {
		if c != '\r' && c != '\n' {
			return
		}
	}
	cs.br.Discard(n)
}

// leftover returns the held input, to carry back to the supervisor.
func (cs *connServer) leftover() []byte {
	b, _ := cs.br.Peek(cs.br.Buffered())
	out := append([]byte(nil), b...)
	rest := make([]byte, cs.carried.Len())
	cs.carried.Read(rest)
	return append(out, rest...)
}

// pendingInput returns a copy of the held input without consuming it.
func (cs *connServer) pendingInput() []byte {
	b, _ := cs.br.Peek(cs.br.Buffered())
	c := cs.d.GetCarried()
	return append(append([]byte(nil), b...), c[len(c)-cs.carried.Len():]...)
}

// headDecided reports whether the held input holds a complete (or invalid,
// or oversized) head, without copying it in the common case.
func (cs *connServer) headDecided() bool {
	if cs.carried.Len() == 0 {
		b, _ := cs.br.Peek(cs.br.Buffered())
		return headend.Decided(b)
	}
	return headend.Decided(cs.pendingInput())
}

// dispatchSpent reports whether the dispatch has had its time
// (maxDispatchAge) and the connection goes back.
func (cs *connServer) dispatchSpent() bool {
	return cs.roundStart.Sub(cs.dispatched) >= cs.w.dispatchAge
}

// tlsState returns the TLS state handlers see as Request.TLS, nil on a plain
// connection. The handshake is complete before the first round and never
// redone (no renegotiation on a server), so the state is taken once per
// connection and shared by its requests, as net/http does.
func (cs *connServer) tlsState() *tls.ConnectionState {
	if cs.tls && cs.state == nil {
		st := cs.nc.(*tls.Conn).ConnectionState()
		cs.state = &st
	}
	return cs.state
}

// sockFD is the client connection's socket: a TLS connection's transport or
// the plain descriptor (-1 if unknown).
func (cs *connServer) sockFD() int {
	if cs.tls {
		return cs.tfd
	}
	return cs.fd
}

// localPort returns the port the connection was accepted on ("" if unknown),
// asking the kernel once per dispatch and only when a handler needs it.
func (cs *connServer) localPort() string {
	if fd := cs.sockFD(); !cs.portAsked && fd >= 0 {
		cs.portAsked = true
		switch sa, _ := unix.Getsockname(fd); a := sa.(type) {
		case *unix.SockaddrInet4:
			cs.port = strconv.Itoa(a.Port)
		case *unix.SockaddrInet6:
			cs.port = strconv.Itoa(a.Port)
		}
	}
	return cs.port
}

// drainedFresh is how long after a round began its read is trusted to say
// the socket holds nothing (inputEmpty): a round that took longer (an
// upstream, a file) peeks, as input may have come meanwhile.
const drainedFresh = time.Millisecond

// inputEmpty reports whether the connection holds no input: none buffered
// here and none in the socket. A connection whose last read used up the
// socket's input, in a round answered at once, is known to hold none
// without a peek (a system call per closing connection; nginx's rule too
// looks only at what it knows); bytes a client sends after asking to
// close, which it may not (RFC 9112 §9.6), can come after a peek as well.
// A peer that has closed its side and left nothing holds no input either:
// closing then resets nothing.
func (cs *connServer) inputEmpty() bool {
	if cs.pending() > 0 {
		return false
	}
	if time.Since(cs.roundStart) < drainedFresh {
		if cs.tls && cs.tt.Drained() {
			return true
		}
		if pc, ok := cs.nc.(*transport.Plain); ok && !cs.tls && pc.Drained() {
			return true
		}
	}
	n, err := sysio.Peek(cs.sockFD(), cs.peek1[:])
	return err == unix.EAGAIN || err == nil && n == 0
}
