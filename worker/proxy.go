package worker

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/worker/site"
	"github.com/hashicorp/go-hclog"
)

// maxProxyTries bounds the attempts one request makes over an upstream's
// addresses.
const maxProxyTries = 4

// abortOnCopyError is put in a proxied request's context under
// http.ServerContextKey: httputil.ReverseProxy then aborts the response
// (panic http.ErrAbortHandler, recovered by the round, which closes the
// connection) when the upstream body fails midway, instead of ending a
// chunked response as if it were complete.
var abortOnCopyError = &http.Server{}

// proxyHandler forwards a route's requests to its upstream. The response
// side (status, headers, body, trailers) is httputil.ReverseProxy's; the
// connection side is the upstream's pool.
type proxyHandler struct {
	w    *Worker
	pool *upstreamPool
	cfg  config.Proxy
	rp   *httputil.ReverseProxy
	// base is the route's prefix without its trailing "/", replaced by
	// cfg.RewritePrefix in the path sent upstream when that is set.
	base string
	// rules are the route's request_headers and hide_upstream_headers.
	rules site.RequestRules
	// pages are the route's error pages, for upstream_errors and for the
	// proxy's own 502, 503 and 504.
	pages site.ErrorPages
}

// newProxy returns the handler of a proxy route.
func (w *Worker) newProxy(pool *upstreamPool, p *config.Proxy, prefix string, rules site.RequestRules, pages site.ErrorPages) http.Handler {
	h := &proxyHandler{w: w, pool: pool, cfg: *p, base: strings.TrimSuffix(prefix, "/"), rules: rules, pages: pages}
	h.rp = &httputil.ReverseProxy{
		Rewrite:        h.rewrite,
		ModifyResponse: h.modifyResponse,
		Transport:      h.pool,
		FlushInterval:  50 * time.Millisecond,
		ErrorLog:       log.New(logWriter{w}, "", 0),
		ErrorHandler:   h.fail,
	}
	return h
}

func (h *proxyHandler) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if protocol := upgradeRequested(r.Header); protocol != "" {
		if h.cfg.Upgrades(protocol) && r.Body == http.NoBody {
			h.serveUpgrade(rw, r, protocol)
			return
		}
		dropUpgrade(r.Header)
	}
	ctx := context.WithValue(r.Context(), http.ServerContextKey, abortOnCopyError)
	if h.cfg.RewritePrefix != "" {
		ctx = context.WithValue(ctx, clientPathKey{}, r.URL.Path)
	}
	h.rp.ServeHTTP(rw, r.WithContext(ctx))
}

// clientPathKey carries a proxied request's path as the client asked for it
// to the error log, where the request at hand is the upstream's, whose path
// a rewrite_prefix changed.
type clientPathKey struct{}

// rewrite builds the upstream request: the upstream name as the pool's key
// (the supervisor dials; the address is not the worker's to choose), the
// client's Host, and the forwarded fields.
func (h *proxyHandler) rewrite(pr *httputil.ProxyRequest) {
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = h.pool.up.Name
	pr.Out.Host = pr.In.Host
	if h.cfg.RewritePrefix != "" {
		replacePrefix(pr.Out.URL, h.base, h.cfg.RewritePrefix)
	}
	stripClientHeaders(pr.Out.Header)
	h.w.setForwarded(pr)
	h.rules.Request(pr.Out)
}

// stripClientHeaders removes what a client could use to pass for another
// address at the upstream: X-Real-IP, and every field whose name holds an
// underscore (X_Forwarded_For), which CGI-style upstreams read as the dashed
// field; nginx drops those too (underscores_in_headers off).
func stripClientHeaders(h http.Header) {
	for k := range h {
		if k == "X-Real-Ip" || strings.ContainsRune(k, '_') {
			delete(h, k)
		}
	}
}

func (h *proxyHandler) modifyResponse(res *http.Response) error {
	h.pages.InterceptUpstream(h.w.log, res)
	h.rules.Response(res)
	if h.cfg.RewriteRedirects {
		h.pool.rewriteRedirects(res)
	}
	return nil
}

// fail answers a request the upstream could not serve.
func (h *proxyHandler) fail(rw http.ResponseWriter, r *http.Request, err error) {
	status, text := http.StatusBadGateway, "502 bad gateway: the upstream failed\n"
	var ne net.Error
	switch {
	case errors.Is(err, errUpstreamRefused), errors.Is(err, errOverloaded):
		status, text = http.StatusServiceUnavailable, "503 service unavailable: the upstream is busy\n"
		rw.Header().Set("Retry-After", "5")
	case errors.Is(err, errUpstreamTimeout), errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		status, text = http.StatusGatewayTimeout, "504 gateway timeout: the upstream did not answer in time\n"
	}
	level := hclog.Warn
	if status == http.StatusServiceUnavailable {
		level = hclog.Debug // refused by design, counted by the supervisor
	}
	// The path, never the query (it may hold tokens), as in the access
	// log, and the upstream's when a rewrite changed it.
	fields := []any{"upstream", h.pool.up.Name, "status", status, "path", r.URL.Path}
	if p, ok := r.Context().Value(clientPathKey{}).(string); ok && p != r.URL.Path {
		fields[5] = p
		fields = append(fields, "upstream_path", r.URL.Path)
	}
	h.w.log.Log(level, "proxy error", append(fields, "error", err)...)
	ownAnswer(rw)
	rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
	rw.WriteHeader(status)
	fmt.Fprint(rw, text)
}

// logWriter sends net/http's internal log lines to the worker's log.
type logWriter struct{ w *Worker }

func (l logWriter) Write(p []byte) (int, error) {
	l.w.log.Warn(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
