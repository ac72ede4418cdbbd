package worker

import (
	"bytes"
	"context"
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

// bufferBody receives b, the whole request body, outside the pool: BodyStart
// gives the pool slot back and charges the supervisor's body budget, the body
// is read under the minimum body rate and the size cap, and BodyDone waits
// for a pool slot again. On success req.Body reads the complete body. It
// returns the status to answer otherwise (503 when the budget or the pool
// has no room, or the body's own 400/408/413) and why.
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
		return http.StatusServiceUnavailable, "request body budget full"
	}
	var buf bytes.Buffer
	if h.ContentLength > 0 {
		buf.Grow(int(h.ContentLength))
	}
	if _, err := io.Copy(&buf, b); err != nil {
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
	req.Body = io.NopCloser(bytes.NewReader(buf.Bytes()))
	return 0, ""
}
