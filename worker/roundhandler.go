package worker

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/worker/access"
	"github.com/gatehouse-dev/gatehouse/worker/accesslog"
	"github.com/gatehouse-dev/gatehouse/worker/httphead"
	"github.com/gatehouse-dev/gatehouse/worker/site"
)

// authorizedUpload reports whether r may send a body up to rt.maxUpload: its
// bearer token hashes to one of the route's, compared in constant time, or
// the embedding program's check accepts it.
func (w *Worker) authorizedUpload(rt *route, r *http.Request) bool {
	if w.opts.AuthorizeUpload != nil && w.opts.AuthorizeUpload(r) {
		return true
	}
	auth := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(auth) <= len(prefix) || !strings.EqualFold(auth[:len(prefix)], prefix) {
		return false
	}
	sum := sha256.Sum256([]byte(auth[len(prefix):]))
	ok := 0
	for _, t := range rt.tokens {
		ok |= subtle.ConstantTimeCompare(sum[:], t[:])
	}
	return ok == 1
}

// roundState is what a round's phases pass on, on the round's stack.
type roundState struct {
	start   time.Time
	head    *httphead.Head
	keep    bool // the connection may stay open after the response (keepAfter)
	ctx     context.Context
	req     *http.Request
	rt      *route
	maxBody int64 // the body cap, raised for an authorized upload
	body    *body
	rw      *response
}

// round reads one request head, runs its handler and frames its response,
// in phases: readHead; request (the path normalised, the route found);
// bodyCap; early (the answers without a handler: server-wide OPTIONS, a
// CORS preflight, and the rate check and access phase, which may refuse);
// receive (a buffered body, the stream budget); the handler; finish. Every
// refusal goes through refuse. It reports whether the connection stays
// open, and if not, how to close it.
func (cs *connServer) round() (keep bool, disp proto.Disposition) {
	rs := roundState{start: time.Now()}
	if ref := cs.readHead(&rs); ref.refused() {
		return false, cs.refuse(nil, ref)
	}
	ctx, cancel := context.WithCancel(&cs.parent)
	defer cancel()
	rs.ctx = ctx
	ref := cs.request(&rs)
	if !ref.refused() {
		ref = cs.bodyCap(&rs)
	}
	if ref.refused() {
		return false, cs.refuse(rs.head, ref)
	}
	rs.body = newBody(cs, rs.head, rs.maxBody, rs.start)
	if rs.head.HasBody() {
		rs.req.Body = rs.body
	}
	rs.rw = newResponse(cs, rs.req, rs.keep)
	rs.rw.body = rs.body
	cs.rw = rs.rw
	switch answered, ref := cs.early(&rs); {
	case ref.refused():
		cs.refuse(rs.head, ref)
	case !answered:
		if ref := cs.receive(&rs); ref.refused() {
			return false, cs.refuse(rs.head, ref)
		}
		if !cs.runHandler(rs.rt, rs.rw, rs.req) {
			return false, proto.Disposition_CLOSE
		}
		if cs.upgraded {
			// The relay has ended; the connection is closed, never
			// returned to the dispatcher.
			cs.outcome = proto.Outcome_OK
			cs.record(rs.start, rs.head, rs.rw.status, rs.rw.written)
			return false, proto.Disposition_CLOSE
		}
	}
	return cs.finish(&rs)
}

// readHead starts the round and reads its head, or returns the refusal of
// a head that could not be read.
func (cs *connServer) readHead(rs *roundState) refusal {
	cs.roundStart = rs.start
	cs.rt = nil
	cs.in.head(rs.start)
	cs.raw.start(cs.br)
	hot := cs.hotNext
	cs.hotNext = false
	head, err := httphead.ReadHead(cs.br, httphead.Limits{})
	if err != nil {
		return headRefusal(err)
	}
	cs.raw.stop()
	cs.requests++
	if hot {
		cs.hotRequests++
	}
	rs.head = head
	rs.keep = keepAfter(cs, head)
	return refusal{}
}

// keepAfter reports whether the connection may stay open after the
// response to head: the client keeps it, and it has served fewer than
// maxRequestsPerConn requests, is younger than maxConnAge and is not closed
// by a drain.
func keepAfter(cs *connServer, head *httphead.Head) bool {
	return head.Persistent() &&
		cs.requests < maxRequestsPerConn &&
		time.Since(cs.accepted) < maxConnAge &&
		!cs.drainCloses()
}

// request builds the round's request from its head, its path normalised,
// and finds its route; 400 when the path does not normalise.
func (cs *connServer) request(rs *roundState) refusal {
	head := rs.head
	req := &http.Request{
		Method:        head.Method,
		URL:           head.URL,
		Proto:         head.Proto,
		ProtoMajor:    head.ProtoMajor,
		ProtoMinor:    head.ProtoMinor,
		Header:        head.Header,
		Host:          head.Host,
		RequestURI:    head.Target,
		RemoteAddr:    cs.d.GetPeer(),
		TLS:           cs.tlsState(),
		Close:         !rs.keep,
		ContentLength: head.ContentLength,
		Body:          http.NoBody,
	}
	if req.URL == nil {
		req.URL = &url.URL{Path: "/"}
	}
	if head.Chunked {
		req.TransferEncoding = []string{"chunked"}
	}
	if !serverWideOptions(req) {
		// Routes, rate-limit classes and the proxy see the normalised path
		// only, so "//internal/x" and "/a/../internal/x" are "/internal/x".
		raw, decoded, err := httphead.NormalizePath(req.URL.EscapedPath())
		if err != nil {
			return refusal{status: http.StatusBadRequest, text: err.Error(), outcome: proto.Outcome_BAD_REQUEST}
		}
		u := *req.URL
		u.Path, u.RawPath = decoded, raw
		req.URL = &u
	}
	rs.req = req.WithContext(rs.ctx)
	rs.rt = cs.route(rs.req)
	cs.rt = rs.rt
	return refusal{}
}

// bodyCap decides the body cap, raised for an authorized upload, from the
// head alone, before any body byte is read (or 100 Continue sent): 401 for
// an upload over the cap without an accepted token, 413 for a declared
// length over it.
func (cs *connServer) bodyCap(rs *roundState) refusal {
	head, rt := rs.head, rs.rt
	maxBody := rt.bodyCap(cs.w.cfg.Limits.MaxBodyBytes)
	if rt != nil && rt.maxUpload > maxBody && (head.ContentLength > maxBody || head.Chunked) {
		switch {
		case cs.w.authorizedUpload(rt, rs.req):
			maxBody = rt.maxUpload
		case head.ContentLength > maxBody:
			return refusal{status: http.StatusUnauthorized, text: "upload over max_body_bytes without an accepted token",
				field: "Www-Authenticate", value: `Bearer realm="gatehouse"`, outcome: proto.Outcome_BAD_REQUEST}
		}
	}
	if head.ContentLength > maxBody && (rt == nil || !rt.headOnly) {
		return refusal{status: http.StatusRequestEntityTooLarge, text: "request body too large", outcome: proto.Outcome_BAD_REQUEST}
	}
	rs.maxBody = maxBody
	return refusal{}
}

// early gives the answers that need no handler: server-wide OPTIONS and a
// CORS preflight (answered), then the rate check and the access phase,
// whose refusals keep the connection. Neither answered nor refused, the
// request goes on to its handler.
func (cs *connServer) early(rs *roundState) (answered bool, ref refusal) {
	switch {
	case serverWideOptions(rs.req):
		answerServerOptions(rs.rw)
		return true, refusal{}
	case site.Preflight(cs.w.cfg.CORS, rs.req):
		site.AnswerPreflight(cs.w.cfg.CORS, rs.rw)
		return true, refusal{}
	}
	if ref = cs.rateCheck(rs.ctx, rs.req); ref.refused() {
		return false, ref
	}
	return false, cs.admit(rs.ctx, rs.req, rs.rt)
}

// receive readies the body its route receives before the handler runs
// (outside the pool), and takes the stream budget for a stream-class
// route: a refusal closes the connection.
func (cs *connServer) receive(rs *roundState) refusal {
	if buffered(rs.rt, rs.head, rs.maxBody, cs.w.cfg.Limits.MaxBodyBytes) {
		if status, why := cs.bufferBody(rs.ctx, rs.req, rs.head, rs.body, rs.maxBody); status != 0 {
			return bodyRefusal(status, why)
		}
	}
	if rs.rt != nil && rs.rt.stream && !cs.leavePool(rs.ctx, false) {
		return refusal{status: http.StatusServiceUnavailable, text: "stream budget full", outcome: proto.Outcome_OK}
	}
	return refusal{}
}

// finish completes the response, notes it, and decides the connection's
// fate: a body the transport refused replaces the handler's answer and
// closes; otherwise it stays open when the response kept it and the unread
// body drains (docs/DESIGN.md §3.4), exactly before the next round.
func (cs *connServer) finish(rs *roundState) (bool, proto.Disposition) {
	head, rw, body := rs.head, rs.rw, rs.body
	if status := bodyErrorStatus(body.err); status != 0 && !rw.headerSent {
		return false, cs.refuse(head, bodyRefusal(status, body.err.Error()))
	}
	err := rw.finish()
	cs.record(rs.start, head, rw.status, rw.written)
	if err != nil {
		cs.outcome = proto.Outcome_PEER_RESET
		if isTimeout(err) {
			cs.outcome = proto.Outcome_TIMEOUT
		}
		return false, proto.Disposition_CLOSE
	}
	if !rw.keep {
		if !head.Persistent() && !head.HasBody() && cs.inputEmpty() {
			// The client asked to close and sent nothing more: a close
			// resets nothing, so the connection need not linger (nginx's
			// rule too).
			return false, proto.Disposition_CLOSE
		}
		return false, proto.Disposition_LINGER
	}
	if head.HasBody() && !body.drain(drainMax) {
		if errors.Is(body.err, ErrBodyTooSlow) {
			cs.outcome = proto.Outcome_TIMEOUT
		}
		return false, proto.Disposition_LINGER
	}
	return true, proto.Disposition_KEEP_ALIVE
}

// rateCheck charges the request to its rate limit class at the supervisor
// and refuses it with 429 (Retry-After, the connection kept) when the
// client is over it, or 503 when the supervisor is overloaded.
func (cs *connServer) rateCheck(ctx context.Context, req *http.Request) refusal {
	rl := cs.w.cfg.RateClass(req.URL.Path)
	if rl == nil {
		return refusal{}
	}
	// The supervisor charges a key it derived itself (docs/DESIGN.md §4.3).
	m := &proto.RateCheck{ConnId: cs.d.GetConnId(), Class: rl.Name}
	r, err := cs.w.calls.call(ctx, &proto.Frame{Body: &proto.Frame_RateCheck{RateCheck: m}}, nil)
	switch {
	case err != nil:
		return refusal{status: http.StatusServiceUnavailable, field: "Retry-After", value: "1", text: "503 service unavailable: try again shortly", keep: true}
	case r.f.GetRateReply().GetAllowed():
		return refusal{}
	}
	secs := (r.f.GetRateReply().GetRetryAfterMs() + 999) / 1000
	return refusal{status: http.StatusTooManyRequests, field: "Retry-After", value: strconv.FormatUint(max(secs, 1), 10), text: "429 too many requests", keep: true}
}

// admit applies the route's access list and basic auth, after the rate
// limit and before any body is received, as nginx's access phase follows
// its preaccess (limit_req) phase: 403, 401 or 429, the connection kept.
func (cs *connServer) admit(ctx context.Context, req *http.Request, rt *route) refusal {
	if rt == nil || (rt.access == nil && rt.auth == nil) {
		return refusal{}
	}
	client := access.ClientAddr(req, cs.w.cfg.TrustedProxies)
	if rt.access != nil && !config.Admits(rt.access, client) {
		return refusal{status: http.StatusForbidden, text: "403 forbidden", keep: true}
	}
	if rt.auth == nil {
		return refusal{}
	}
	return keptRefusal(rt.auth.Authorize(ctx, req, client, cs.chargeFailure))
}

// record notes one response for the supervisor's metrics and the access log.
// head is nil when the request never parsed.
func (cs *connServer) record(start time.Time, head *httphead.Head, status int, bytes int64) {
	end := time.Now()
	d := end.Sub(start)
	cs.statuses = append(cs.statuses, uint32(status))
	cs.micros = append(cs.micros, uint64(d.Microseconds()))
	if cs.w.access != nil {
		e := accesslog.EntryFor(head)
		e.End, e.Dur, e.Status, e.Bytes = end, d, status, bytes
		e.Client, e.WorkerID = cs.w.maskClient(cs.d.GetClientKey()), cs.w.id
		cs.w.access.Add(&e)
	}
}

// runHandler runs the route's handler, recovering a panic: the worker serves
// other connections and must outlive one handler. It reports false when the
// response cannot be completed (the connection is then closed).
func (cs *connServer) runHandler(rt *route, rw *response, req *http.Request) (ok bool) {
	defer func() {
		if p := recover(); p != nil {
			ok = false
			if p == http.ErrAbortHandler {
				return // the handler chose to abort the response
			}
			cs.w.log.Error("handler panicked", "path", req.URL.Path, "panic", fmt.Sprint(p))
			cs.outcome = proto.Outcome_PEER_RESET
			if !rw.headerSent {
				cs.refuse(nil, refusal{status: http.StatusInternalServerError, text: "handler panicked", outcome: proto.Outcome_PEER_RESET})
			}
		}
	}()
	if rt == nil || rt.compress == nil {
		serve(rt, rw, req)
		return true
	}
	cz := &cs.cz
	defer cz.End()
	serve(rt, cz.Start(rw, req, rt.compress), req)
	if !cs.upgraded {
		if err := cz.Finish(); err != nil {
			cs.w.log.Debug("compressing a response", "path", req.URL.Path, "error", err)
		}
	}
	return true
}

// chargeFailure charges a failed login to its class at the supervisor, or
// peeks at it (access.Charge).
func (cs *connServer) chargeFailure(ctx context.Context, class string, peek bool) (time.Duration, bool) {
	m := &proto.RateCheck{ConnId: cs.d.GetConnId(), Class: class, Peek: peek}
	r, err := cs.w.calls.call(ctx, &proto.Frame{Body: &proto.Frame_RateCheck{RateCheck: m}}, nil)
	if err != nil || r.f.GetRateReply().GetAllowed() {
		return 0, false
	}
	return time.Duration(r.f.GetRateReply().GetRetryAfterMs()) * time.Millisecond, true
}
