package worker

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/worker/httphead"
)

// bodyGrantMargin is how much longer than no_worker_timeout the worker waits
// for the supervisor's answer to BodyDone, which the supervisor bounds by
// no_worker_timeout itself.
const bodyGrantMargin = 5 * time.Second

// buffered reports whether the request's body is received before its handler
// runs, outside the request pool (docs/DESIGN.md §3.3): a body within
// max_body_bytes (an authorized larger upload streams) to a route that
// buffers (not static or metrics, not request_buffering = false).
func buffered(rt *route, h *httphead.Head, maxBody, maxBuffered int64) bool {
	return rt != nil && rt.buffer && h.HasBody() && maxBody > 0 && maxBody <= maxBuffered
}

// bodyReportStep is how many bytes a body received outside the pool may
// hold past the count the supervisor last accepted (BodyProgress): the
// budget is charged the bytes that arrived, at most one step late.
const bodyReportStep = 64 << 10

// bodyFirstAlloc is the buffer a body starts with; it doubles as bytes
// arrive.
const bodyFirstAlloc = 4 << 10

// errBodyRefused is readArrived's error when the budget refused the bytes
// that arrived.
var errBodyRefused = errors.New("request body budget full")

// bufferBody receives b, the whole request body, outside the pool: BodyStart
// gives the pool slot back and charges the supervisor's body budget one
// connection, the body is read under the minimum body rate and the size cap
// into a buffer that grows with what arrives, its bytes charged as they come
// (BodyProgress), and BodyDone waits for a pool slot again. On success
// req.Body reads the complete body. It returns the status to answer
// otherwise (503 when the budget or the pool has no room, or the body's own
// 400/408/413) and why.
func (cs *connServer) bufferBody(ctx context.Context, req *http.Request, h *httphead.Head, b *body, maxBody int64) (int, string) {
	length := h.ContentLength
	if h.Chunked {
		length = maxBody
	}
	conn := cs.d.GetConnId()
	// The worker's count of its connections mirrors the supervisor's: it
	// gives the slot up before the supervisor does, and takes it again only
	// after, so it never counts fewer than the supervisor may dispatch.
	cs.w.active.Add(-1)
	cs.outside = true
	r, err := cs.w.calls.call(ctx, &proto.Frame{Body: &proto.Frame_BodyStart{BodyStart: &proto.BodyStart{ConnId: conn, Length: length}}}, nil)
	if err != nil || !r.f.GetBodyReply().GetOk() {
		cs.w.active.Add(1)
		cs.outside = false
		return http.StatusServiceUnavailable, errBodyRefused.Error()
	}
	buf, err := readArrived(b, length, bodyReportStep, func(received int64) bool {
		r, err := cs.w.calls.call(ctx, &proto.Frame{Body: &proto.Frame_BodyProgress{BodyProgress: &proto.BodyProgress{ConnId: conn, Received: received}}}, nil)
		return err == nil && r.f.GetBodyReply().GetOk()
	})
	switch {
	case err == errBodyRefused:
		// The connection stays outside the pool until Done releases it.
		return http.StatusServiceUnavailable, err.Error()
	case err != nil:
		if status := bodyErrorStatus(b.err); status != 0 {
			return status, b.err.Error()
		}
		return http.StatusBadRequest, "reading the request body: " + err.Error()
	}
	wait, cancel := context.WithTimeout(ctx, cs.w.cfg.Limits.NoWorkerTimeout+bodyGrantMargin)
	defer cancel()
	r, err = cs.w.calls.call(wait, &proto.Frame{Body: &proto.Frame_BodyDone{BodyDone: &proto.BodyDone{ConnId: conn}}}, nil)
	if err != nil || !r.f.GetBodyReply().GetOk() {
		return http.StatusServiceUnavailable, "no worker available"
	}
	cs.w.active.Add(1)
	cs.outside = false
	req.Body = io.NopCloser(bytes.NewReader(buf))
	return 0, ""
}

// readArrived reads r to its end into a buffer that grows with what
// arrives, doubling when full up to limit, the most the body may hold:
// nothing is allocated for bytes a head only declared. It never holds more
// than step bytes past the count report last accepted: each time that much
// more arrived it reports the count so far, and stops with errBodyRefused
// when report refuses.
func readArrived(r io.Reader, limit, step int64, report func(received int64) bool) ([]byte, error) {
	buf := make([]byte, 0, min(limit, bodyFirstAlloc))
	next := step // the count at which to report
	var probe [1]byte
	for {
		n := int64(len(buf))
		if n == next {
			if !report(n) {
				return nil, errBodyRefused
			}
			next += step
		}
		if n == int64(cap(buf)) && n < limit {
			grown := make([]byte, n, min(2*n, limit))
			copy(grown, buf)
			buf = grown
		}
		// With the buffer at limit, a read of one byte sees the end of
		// the body, or its reader's error for a byte too many.
		p := probe[:]
		if n < limit {
			p = buf[n:min(int64(cap(buf)), next)]
		}
		k, err := r.Read(p)
		if n < limit {
			buf = buf[:n+int64(k)]
		}
		switch {
		case err == io.EOF:
			return buf, nil
		case err != nil:
			return nil, err
		case k > 0 && n == limit:
			return nil, ErrBodyTooLarge
		}
	}
}
