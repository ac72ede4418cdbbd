package worker

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gatehouse-dev/gatehouse/worker/httphead"
	"github.com/gatehouse-dev/gatehouse/worker/site"
)

// pendingMax is how much body a response buffers before its header is sent:
// a handler that finishes within it gets a Content-Length, not chunking.
const pendingMax = 4 << 10

// response is the http.ResponseWriter of one round. It frames HTTP/1.1 with
// Content-Length when the length is known, chunked otherwise (close-delimited
// for an HTTP/1.0 client), and supports Flush.
type response struct {
	cs     *connServer
	req    *http.Request
	header http.Header
	keep   bool // the connection stays open after this response
	body   *body

	status      int
	wroteHeader bool // WriteHeader was called (or implied)
	headerSent  bool // the header is in the write buffer
	pending     []byte
	chunked     bool
	trailers    bool  // the chunked body ends with the handler's trailer fields
	declared    int64 // Content-Length sent, or -1
	written     int64 // body bytes accepted from the handler
	err         error // sticky write error
	// pages are the round's error pages; relayed: the handler is relaying
	// another server's answer, whose errors are its own, not gatehouse's;
	// substituted: a page replaced the body, and the handler's is dropped.
	pages       site.ErrorPages
	relayed     bool
	substituted bool
}

// newResponse readies cs's response for a round, its header emptied.
func newResponse(cs *connServer, req *http.Request, keep bool) *response {
	if cs.respHeader == nil {
		cs.respHeader = make(http.Header)
	}
	clear(cs.respHeader)
	cs.resp = response{cs: cs, req: req, header: cs.respHeader, keep: keep, declared: -1, pending: cs.pendingBuf[:0], pages: cs.errorPages()}
	return &cs.resp
}

func (r *response) Header() http.Header { return r.header }

func (r *response) WriteHeader(code int) {
	if r.wroteHeader {
		r.cs.w.log.Warn("superfluous WriteHeader", "status", code)
		return
	}
	if code < 200 || code > 999 {
		// Informational responses other than our own 100 Continue are not
		// forwarded; a status out of range is a handler bug.
		if code >= 100 && code < 200 {
			return
		}
		code = http.StatusInternalServerError
	}
	r.wroteHeader = true
	r.status = code
	if code >= 400 && r.pages != nil && !r.relayed {
		r.substitute()
	}
}

func (r *response) bodyAllowed() bool {
	return r.status != http.StatusNoContent && r.status != http.StatusNotModified && r.req.Method != http.MethodHead
}

func (r *response) Write(p []byte) (int, error) {
	if !r.wroteHeader {
		r.WriteHeader(http.StatusOK)
	}
	if r.err != nil {
		return 0, r.err
	}
	if r.substituted {
		return len(p), nil
	}
	if r.status == http.StatusNoContent || r.status == http.StatusNotModified {
		return 0, http.ErrBodyNotAllowed
	}
	if r.declared >= 0 && r.written+int64(len(p)) > r.declared {
		return 0, http.ErrContentLength
	}
	r.written += int64(len(p))
	if r.req.Method == http.MethodHead {
		return len(p), nil
	}
	if !r.headerSent {
		if len(r.pending)+len(p) <= pendingMax {
			r.pending = append(r.pending, p...)
			return len(p), nil
		}
		r.sendHeader(false)
	}
	return r.writeBody(p)
}

func (r *response) writeBody(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	bw := r.cs.bw
	if r.chunked && len(p) > 0 {
		fmt.Fprintf(bw, "%x\r\n", len(p))
		if r.err = r.cs.writeAfterBuffered(p); r.err == nil {
			_, r.err = bw.WriteString("\r\n")
		}
	} else {
		r.err = r.cs.writeAfterBuffered(p)
	}
	if r.err != nil {
		return 0, r.err
	}
	return len(p), nil
}

// Flush sends the header and everything written so far.
func (r *response) Flush() {
	if !r.wroteHeader {
		r.WriteHeader(http.StatusOK)
	}
	if !r.headerSent {
		r.sendHeader(false)
	}
	if r.err == nil {
		r.err = r.cs.bw.Flush()
	}
}

// finish completes the response after the handler returned.
func (r *response) finish() error {
	if !r.wroteHeader {
		r.WriteHeader(http.StatusOK)
	}
	if !r.headerSent {
		r.sendHeader(true)
	}
	if r.chunked && r.err == nil {
		r.cs.bw.WriteString("0\r\n")
		if r.trailers {
			r.writeTrailers()
		}
		_, r.err = r.cs.bw.WriteString("\r\n")
	}
	if r.err == nil {
		if !r.keep && r.cs.tls && r.cs.bw.Buffered() > 0 {
			// The close_notify follows: a small last write waits for it.
			r.cs.tt.Hold()
		}
		r.err = r.cs.bw.Flush()
	}
	if r.declared >= 0 && r.written < r.declared && r.req.Method != http.MethodHead {
		// The handler sent less than it declared: the framing is broken
		// and the connection cannot carry another response.
		r.keep = false
		return fmt.Errorf("handler wrote %d of %d declared bytes", r.written, r.declared)
	}
	return r.err
}

// sendHeader decides the framing and writes the status line and fields.
// final is true when the handler has returned, so pending is the whole body.
func (r *response) sendHeader(final bool) {
	r.headerSent = true
	h := r.header
	// Framing and connection management are the transport's, not the
	// handler's (RFC 9112 §6, §9.6).
	if strings.EqualFold(strings.TrimSpace(h.Get("Connection")), "close") {
		r.keep = false
	}
	if r.body != nil && !r.body.drainable(drainMax) {
		// The request body will not be read to its end: say so now
		// rather than promise keep-alive and close (RFC 9110 §10.1.1).
		r.keep = false
	}
	h.Del("Connection")
	h.Del("Keep-Alive")
	h.Del("Transfer-Encoding")
	// Written by the transport below, straight into the head (not through
	// the map, which costs an allocation per header and round).
	h.Del("X-Content-Type-Options")
	if cl := h.Get("Content-Length"); cl != "" {
		n, err := strconv.ParseInt(cl, 10, 64)
		if err != nil || n < 0 {
			r.cs.w.log.Warn("dropping invalid Content-Length from handler", "value", cl)
			h.Del("Content-Length")
		} else {
			r.declared = n
		}
	}
	switch {
	case r.status == http.StatusNoContent || r.status == http.StatusNotModified:
		// These end at the head whatever is declared (RFC 9112 §6.3): a
		// 304's Content-Length describes the selected representation and
		// is kept; a 204 must not send one (RFC 9110 §8.6).
		if r.status == http.StatusNoContent {
			h.Del("Content-Length")
		}
		h.Del("Trailer")
		r.declared = -1
	case r.declared >= 0:
	case final:
		if r.req.Method != http.MethodHead || r.written > 0 {
			r.declared = r.written
			h.Set("Content-Length", strconv.FormatInt(r.written, 10))
		}
	case r.req.Method == http.MethodHead:
		// The length is unknown and no body follows: nothing to frame.
	case r.req.ProtoMajor == 1 && r.req.ProtoMinor >= 1:
		r.chunked = true
		h.Set("Transfer-Encoding", "chunked")
	default:
		// An HTTP/1.0 client reads to the end of the connection.
		r.keep = false
	}
	r.trailers = r.chunked && clientAcceptsTrailers(r.req)
	if !r.trailers {
		// Trailers are sent only in a chunked body to a client that asked
		// for them; otherwise they are dropped, and not announced.
		h.Del("Trailer")
	}
	// As net/http's: a handler that set Content-Type to nil wants no
	// guess (the proxy relays an upstream's missing type as missing).
	if _, set := h["Content-Type"]; !set && len(r.pending) > 0 {
		h.Set("Content-Type", http.DetectContentType(r.pending))
	}
	r.cs.siteHeaders(h, r.status)
	hsts := r.cs.listener.hsts
	if hsts != "" {
		h.Del("Strict-Transport-Security") // the listener's, written below
	}
	site.SetCORS(r.cs.w.cfg.CORS, h, r.req.Header.Get("Origin"), false)
	bw := r.cs.bw
	writeHeadLines(r.cs, r.status, h)
	bw.WriteString("X-Content-Type-Options: nosniff\r\n")
	if hsts != "" {
		bw.WriteString("Strict-Transport-Security: ")
		bw.WriteString(hsts)
		bw.WriteString("\r\n")
	}
	if h.Get("Date") == "" {
		bw.WriteString("Date: ")
		bw.WriteString(r.cs.w.date.now())
		bw.WriteString("\r\n")
	}
	if r.keep {
		bw.WriteString("Connection: keep-alive\r\nKeep-Alive: timeout=")
		bw.WriteString(strconv.Itoa(int(r.cs.w.cfg.Limits.KeepAliveIdleTimeout / time.Second)))
		bw.WriteString("\r\n")
	} else {
		bw.WriteString("Connection: close\r\n")
	}
	bw.WriteString("\r\n")
	pending := r.pending
	r.pending = nil
	r.cs.pendingBuf = pending[:0] // for the next round, once written
	if len(pending) > 0 {
		r.writeBody(pending)
	}
}

// writeHead writes a status line and header fields, dropping (and logging)
// any field whose name or value is not valid on the wire.
func writeHead(cs *connServer, status int, h http.Header) {
	writeHeadLines(cs, status, h)
	cs.bw.WriteString("\r\n")
}

// writeHeadLines writes the status line and h, without the empty line
// that ends the head.
func writeHeadLines(cs *connServer, status int, h http.Header) {
	bw := cs.bw
	text := http.StatusText(status)
	if text == "" {
		text = "Status"
	}
	bw.WriteString("HTTP/1.1 ")
	bw.WriteString(strconv.Itoa(status))
	bw.WriteByte(' ')
	bw.WriteString(text)
	bw.WriteString("\r\n")
	for name, values := range h {
		if strings.HasPrefix(name, http.TrailerPrefix) {
			continue // a trailer, sent after the body or not at all
		}
		if !httphead.ValidFieldName(name) {
			cs.w.log.Warn("dropping response header with an invalid name", "name", strconv.Quote(name))
			continue
		}
		for _, v := range values {
			if !httphead.ValidFieldValue(v) {
				cs.w.log.Warn("dropping response header with an invalid value", "name", name)
				continue
			}
			bw.WriteString(name)
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
}

// writeError answers a transport-level error with a short text body, the
// configured CORS headers and Connection: close. head is nil when the request
// head never parsed; the Origin is then read from the raw head.
func (cs *connServer) writeError(status int, reason string, head *httphead.Head, extra http.Header) {
	body, ctype := strconv.Itoa(status)+" "+http.StatusText(status)+"\n", "text/plain; charset=utf-8"
	if b, t, ok := cs.errorPages().Page(cs.w.log, status); ok {
		body, ctype = string(b), t
	}
	h := http.Header{}
	for k, v := range extra {
		h[k] = v
	}
	h.Set("Content-Type", ctype)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Connection", "close")
	h.Set("X-Content-Type-Options", "nosniff")
	if v := cs.listener.hsts; v != "" {
		h.Set("Strict-Transport-Security", v)
	}
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	if status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests {
		h.Set("Retry-After", "5")
	}
	origin := ""
	if head != nil {
		origin = head.Header.Get("Origin")
	} else {
		origin = httphead.OriginFromRaw(cs.raw.buf)
	}
	site.SetCORS(cs.w.cfg.CORS, h, origin, true)
	cs.siteHeaders(h, status)
	writeHead(cs, status, h)
	if head == nil || head.Method != http.MethodHead {
		cs.bw.WriteString(body)
	}
	cs.bw.Flush()
	cs.w.log.Debug("transport error", "status", status, "reason", reason)
	cs.record(cs.roundStart, head, status, int64(len(body)))
}

// siteHeaders applies the connection's listener's header rules, then the
// round's route's, to h for a response with status.
func (cs *connServer) siteHeaders(h http.Header, status int) {
	cs.listener.headers.Apply(h, status)
	if cs.rt != nil {
		cs.rt.headers.Apply(h, status)
	}
}

// errorPages are the pages of the connection's current round: its route's,
// else the global ones.
func (cs *connServer) errorPages() site.ErrorPages {
	if cs.rt != nil && cs.rt.pages != nil {
		return cs.rt.pages
	}
	return cs.w.router.pages
}

// ownAnswer marks what a relaying handler (the proxy) is about to answer as
// gatehouse's own, not the upstream's: its error page applies. rw is the
// round's *response, which the proxy receives unwrapped.
func ownAnswer(rw http.ResponseWriter) {
	if resp, ok := rw.(*response); ok {
		resp.relayed = false
	}
}

// pageFields are the fields of an error response that describe the body
// they came with, not the page that replaces it.
var pageFields = []string{"Content-Length", "Content-Encoding", "Content-Range", "Accept-Ranges", "Etag", "Last-Modified", "Content-Disposition", "Content-Language", "Content-Location"}

// substitute replaces the body of an error response whose status was just
// set by the page for it, when there is one: the page is written now and
// whatever the handler writes afterwards is dropped (Write).
func (r *response) substitute() {
	b, ctype, ok := r.pages.Page(r.cs.w.log, r.status)
	if !ok {
		return
	}
	h := r.header
	for _, k := range pageFields {
		delete(h, k)
	}
	h.Set("Content-Type", ctype)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	r.Write(b)
	r.substituted = true
}

// dateCache formats the Date header once per second, not once per response.
type dateCache struct {
	v atomic.Pointer[dateValue]
}

// dateValue is one second's Date value; never changed once stored.
type dateValue struct {
	sec  int64
	text string
}

// now returns the current Date value, in http.TimeFormat.
func (c *dateCache) now() string {
	t := time.Now()
	if d := c.v.Load(); d != nil && d.sec == t.Unix() {
		return d.text
	}
	d := &dateValue{sec: t.Unix(), text: t.UTC().Format(http.TimeFormat)}
	c.v.Store(d)
	return d.text
}
