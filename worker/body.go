package worker

import (
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/gatehouse-dev/gatehouse/worker/httphead"
)

// ErrBodyTooLarge is returned by a request body read past max_body_bytes.
var ErrBodyTooLarge = errors.New("worker: request body too large")

// ErrBodyTooSlow is returned by a request body read that fell behind the
// minimum body rate.
var ErrBodyTooSlow = errors.New("worker: request body below the minimum rate")

// body is a request body: Content-Length or chunked framing over the
// connection's reader, under the size cap and the minimum body rate. It sends
// 100 Continue on the first read when the client asked for it.
type body struct {
	cs       *connServer
	r        io.Reader // framed reader over cs.br
	max      int64
	n        int64 // bytes of body delivered
	start    time.Time
	expect   bool
	err      error // sticky
	complete bool
	length   int64 // declared length, -1 when chunked
}

func newBody(cs *connServer, h *httphead.Head, max int64, start time.Time) *body {
	cs.reqBody = body{cs: cs, max: max, start: start, expect: h.Expect100, length: h.ContentLength}
	b := &cs.reqBody
	switch {
	case h.Chunked:
		b.r = httphead.NewChunkedReader(cs.br, httphead.Limits{})
	case h.ContentLength > 0:
		b.r = io.LimitReader(cs.br, h.ContentLength)
	default:
		b.complete = true
	}
	return b
}

func (b *body) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.complete {
		return 0, io.EOF
	}
	if b.expect {
		b.expect = false
		if !b.cs.continue100() {
			b.err = io.ErrUnexpectedEOF
			return 0, b.err
		}
	}
	b.phase()
	n, err := b.r.Read(p)
	b.n += int64(n)
	if b.n > b.max {
		b.err = ErrBodyTooLarge
		return 0, b.err
	}
	switch {
	case err == io.EOF && b.length >= 0 && b.n < b.length:
		// The connection ended before Content-Length bytes: a truncated
		// body, never a complete one.
		err = io.ErrUnexpectedEOF
		b.err = err
	case err == io.EOF:
		b.complete = true
	case err != nil:
		if isTimeout(err) {
			err = ErrBodyTooSlow
		}
		b.err = err
	}
	return n, err
}

// phase sets the read deadline to the moment the minimum body rate would be
// violated (docs/DESIGN.md §3.3): the bytes so far cover bodyGrace + n/rate seconds.
func (b *body) phase() {
	start, n := b.start, b.n
	b.cs.in.setLimit(func(now time.Time) time.Time {
		rateLine := start.Add(bodyGrace + time.Duration(float64(n)/bodyMinRate*float64(time.Second)))
		return earliest(rateLine, now.Add(bodyReadWait))
	})
}

func (b *body) Close() error { return nil }

// drain discards what the handler left unread, up to limit bytes. It reports
// whether the body was consumed exactly, so the connection can be kept.
func (b *body) drain(limit int64) bool {
	if b.complete {
		return true
	}
	if b.err != nil || b.expect {
		// A client waiting for 100 Continue that never came may not send
		// the body at all: the connection cannot be reused.
		return false
	}
	n, err := io.Copy(io.Discard, io.LimitReader(b, limit+1))
	return err == nil && n <= limit && b.complete
}

// drainable reports whether what remains of the body may be drained after
// the response: known to be at most limit bytes, and not waiting for a 100
// Continue it never got. A chunked remainder is unknown and is tried.
func (b *body) drainable(limit int64) bool {
	if b.complete {
		return true
	}
	if b.err != nil || b.expect {
		return false
	}
	if b.length >= 0 && b.length-b.n > limit {
		return false
	}
	return true
}

// continue100 writes the interim response before the first body byte is read.
func (cs *connServer) continue100() bool {
	if _, err := cs.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
		return false
	}
	return cs.bw.Flush() == nil
}

// bodyErrorStatus maps a body read error the transport caused to its status,
// or 0 for any other error.
func bodyErrorStatus(err error) int {
	if err == nil {
		// The common case, before errors.As puts he on the heap.
		return 0
	}
	switch {
	case errors.Is(err, ErrBodyTooSlow):
		return http.StatusRequestTimeout
	case errors.Is(err, ErrBodyTooLarge):
		return http.StatusRequestEntityTooLarge
	}
	var he *httphead.Error
	if errors.As(err, &he) {
		return he.Status
	}
	return 0
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

var _ io.ReadCloser = (*body)(nil)
