package worker

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/worker/access"
	"github.com/gatehouse-dev/gatehouse/worker/accesslog"
	"github.com/gatehouse-dev/gatehouse/worker/httphead"
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
				cs.writeError(http.StatusInternalServerError, "handler panicked", nil, nil)
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

// allowed charges the request to its rate limit class at the supervisor
// and answers 429 (with Retry-After, the connection kept) when the client is
// over it, or 503 when the supervisor is overloaded. It reports whether the
// request may go on.
func (cs *connServer) allowed(ctx context.Context, rw *response, req *http.Request) bool {
	rl := cs.w.cfg.RateClass(req.URL.Path)
	if rl == nil {
		return true
	}
	// The supervisor charges a key it derived itself (docs/DESIGN.md §4.3).
	m := &proto.RateCheck{ConnId: cs.d.GetConnId(), Class: rl.Name}
	r, err := cs.w.calls.call(ctx, &proto.Frame{Body: &proto.Frame_RateCheck{RateCheck: m}}, nil)
	switch {
	case err != nil:
		rw.Header().Set("Retry-After", "1")
		http.Error(rw, "503 service unavailable: try again shortly", http.StatusServiceUnavailable)
		return false
	case r.f.GetRateReply().GetAllowed():
		return true
	}
	secs := (r.f.GetRateReply().GetRetryAfterMs() + 999) / 1000
	rw.Header().Set("Retry-After", strconv.FormatUint(max(secs, 1), 10))
	http.Error(rw, "429 too many requests", http.StatusTooManyRequests)
	return false
}

// admit applies the route's access list and basic auth, after the rate
// limit and before any body is received, as nginx's access phase follows
// its preaccess (limit_req) phase. It answers 403, 401 or 429 itself and
// reports whether the handler may run.
func (cs *connServer) admit(ctx context.Context, rw http.ResponseWriter, req *http.Request, rt *route) bool {
	if rt == nil || (rt.access == nil && rt.auth == nil) {
		return true
	}
	client := access.ClientAddr(req, cs.w.cfg.TrustedProxies)
	if rt.access != nil && !config.Admits(rt.access, client) {
		http.Error(rw, "403 forbidden", http.StatusForbidden)
		return false
	}
	return rt.auth == nil || rt.auth.Authorize(ctx, rw, req, client, cs.chargeFailure)
}

// chargeFailure charges a failed login to its class at the supervisor
// (access.Charge).
func (cs *connServer) chargeFailure(ctx context.Context, class string) (time.Duration, bool) {
	m := &proto.RateCheck{ConnId: cs.d.GetConnId(), Class: class}
	r, err := cs.w.calls.call(ctx, &proto.Frame{Body: &proto.Frame_RateCheck{RateCheck: m}}, nil)
	if err != nil || r.f.GetRateReply().GetAllowed() {
		return 0, false
	}
	return time.Duration(r.f.GetRateReply().GetRetryAfterMs()) * time.Millisecond, true
}
