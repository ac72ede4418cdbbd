package worker

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/worker/access"
	"github.com/gatehouse-dev/gatehouse/worker/compress"
	"github.com/gatehouse-dev/gatehouse/worker/site"
	"github.com/gatehouse-dev/gatehouse/worker/static"
)

// router picks a request's set of routes by its Host (vhost.go), then the
// route with the longest matching prefix in it. A prefix matches a path
// equal to it or continuing it at a "/" boundary, so "/healthz" does not
// serve "/healthzX".
type router struct {
	routes []route     // routes without hosts, longest prefix first; immutable
	hosts  *hostRoutes // nil when no route has hosts; immutable
	// byListener holds what listeners with hsts or https_redirect add, by
	// listener name; immutable.
	byListener map[string]listenerHTTP
	// pages are the global error pages, for requests without a route.
	pages site.ErrorPages
	// pools are the upstreams' connection pools, by upstream name, each
	// shared by the routes proxying to it; filled while the router is
	// built.
	pools map[string]*upstreamPool
}

type route struct {
	prefix  string
	handler http.Handler
	// maxBody is the route's own body cap (max_body_bytes), nil for the
	// global one.
	maxBody *int64
	// maxUpload raises the body cap for an authorized request (0: none).
	maxUpload int64
	// allowTrace lets TRACE through to the handler; otherwise it is 405.
	allowTrace bool
	// buffer receives a body before the handler runs, outside the pool.
	buffer bool
	// stream: class = "stream", the requests leave the pool for the stream
	// budget (docs/DESIGN.md §10).
	stream bool
	tokens [][32]byte // SHA-256 of the accepted bearer tokens
	// headers are the route's response header rules.
	headers site.HeaderRules
	// pages are its error pages, the global ones included; relaysErrors:
	// its handler's error responses are another server's (an upstream's,
	// an embedded handler's, respond's own body), not replaced by them.
	pages        site.ErrorPages
	relaysErrors bool
	// headOnly: answered from the head alone, the body never read, so no
	// body cap applies (https_redirect, redirect).
	headOnly bool
	// compress compresses the responses on the fly; nil: never.
	compress *compress.Policy
	// access is the route's allow and deny list (nil: every address).
	access []config.AccessRule
	// auth asks for basic auth credentials (nil: none).
	auth *access.BasicAuth
	// slash answers the prefix without its trailing "/" (slash_redirect),
	// or is nil.
	slash *route
}

func newRouter(w *Worker, cfg *config.Config, roots map[string]*os.Root) (*router, error) {
	rt := &router{pages: site.NewErrorPages(w.log, cfg.ErrorPages, nil, roots)}
	pools := compress.Pools{}
	for _, r := range cfg.Routes {
		pages := site.NewErrorPages(w.log, cfg.ErrorPages, r.ErrorPages, roots)
		var h http.Handler
		switch {
		case r.Static != nil:
			if root := roots[r.Static.Root]; root != nil {
				h = static.New(r.Prefix, root, r.Static, w.log.Named("static"))
			} else {
				h = rootUnavailable() // logged when it failed to open
			}
		case r.Respond != nil:
			h = newRespond(r.Respond)
		case r.Proxy != nil:
			up := cfg.Upstream(r.Proxy.Upstream)
			if up == nil {
				return nil, fmt.Errorf("route %q: no upstream %q", r.Prefix, r.Proxy.Upstream)
			}
			h = untypedStaysUntyped(w.newProxy(rt.upstreamPool(w, up, cfg.Workers.Count), r.Proxy, r.Prefix, site.NewRequestRules(&r), pages))
		case r.Metrics != nil:
			h = w.newMetrics(r.Metrics)
		case r.Redirect != nil:
			h = newRedirect(r.Prefix, r.Redirect)
		case r.Embedded != nil:
			if h = w.opts.Handlers[r.Embedded.Name]; h == nil {
				return nil, fmt.Errorf("route %q: this program has no handler %q", r.Prefix, r.Embedded.Name)
			}
		default:
			return nil, fmt.Errorf("route %q has no handler", r.Prefix)
		}
		rr := route{prefix: r.Prefix, handler: h, headers: site.NewHeaderRules(r.Headers), pages: pages,
			relaysErrors: r.Proxy != nil || r.Embedded != nil || r.Respond != nil && r.Respond.Body != "", maxBody: r.MaxBodyBytes, maxUpload: r.MaxUploadBytes, tokens: r.UploadTokenSHA256, allowTrace: r.AllowTrace, stream: r.Stream,
			buffer: !r.StreamBody && r.Static == nil && r.Metrics == nil && r.Redirect == nil, headOnly: r.Redirect != nil, access: r.Access}
		if r.BasicAuth != nil {
			rr.auth = access.NewBasicAuth(r.BasicAuth)
		}
		if r.SlashRedirect {
			rr.slash = &route{prefix: r.Prefix, handler: slashRedirect(r.Prefix), headOnly: true}
		}
		if r.Compress != nil {
			rr.compress = compress.New(r.Compress, pools)
		}
		if len(r.Hosts) > 0 {
			rt.addHosts(rr, r.Hosts)
		} else {
			rt.routes = append(rt.routes, rr)
		}
	}
	longestFirst(rt.routes)
	if rt.hosts != nil {
		for _, m := range []map[string][]route{rt.hosts.exact, rt.hosts.wild} {
			for _, set := range m {
				longestFirst(set)
			}
		}
	}
	rt.listeners(cfg)
	return rt, nil
}

// bodyCap is the body cap of a request to rr (nil: none matched): the
// route's max_body_bytes, else global.
func (rr *route) bodyCap(global int64) int64 {
	if rr != nil && rr.maxBody != nil {
		return *rr.maxBody
	}
	return global
}

func longestFirst(routes []route) {
	sort.SliceStable(routes, func(i, j int) bool { return len(routes[i].prefix) > len(routes[j].prefix) })
}

// knownMethods are the methods of RFC 9110 §9; any other is 501.
var knownMethods = map[string]bool{
	"GET": true, "HEAD": true, "POST": true, "PUT": true, "DELETE": true,
	"OPTIONS": true, "TRACE": true, "PATCH": true,
}

// match returns the route for a request to host (a Host value) and path:
// the misdirected route when no routes serve host, nil when none of them
// matches path.
func (rt *router) match(host, path string) *route {
	set := rt.routes
	if rt.hosts != nil {
		var ok bool
		if set, ok = rt.hostSet(canonicalHost(host)); !ok {
			return &rt.hosts.misdirected
		}
	}
	// A slash redirect ("/app" for "/app/") yields to a route of exactly
	// that prefix, not to a shorter one ("/").
	var slash *route
	for i := range set {
		r := &set[i]
		if matchPrefix(r.prefix, path) {
			if slash != nil && len(r.prefix) < len(path) {
				return slash
			}
			return r
		}
		if slash == nil && r.slash != nil && len(path) == len(r.prefix)-1 && strings.HasPrefix(r.prefix, path) {
			slash = r.slash
		}
	}
	return slash
}

// serve runs the handler of route rr (nil: no route matched).
func serve(rr *route, w http.ResponseWriter, r *http.Request) {
	switch {
	case !knownMethods[r.Method]:
		http.Error(w, "method not implemented", http.StatusNotImplemented)
	case r.Method == http.MethodTrace && (rr == nil || !rr.allowTrace):
		// TRACE echoes the request, credentials included, to whoever can
		// read the response (cross-site tracing): off unless a route asks.
		w.Header().Set("Allow", allowAsterisk)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	case rr == nil:
		http.NotFound(w, r)
	default:
		if resp, ok := w.(*response); ok && rr.relaysErrors {
			resp.relayed = true
		}
		rr.handler.ServeHTTP(w, r)
	}
}

func matchPrefix(prefix, p string) bool {
	if !strings.HasPrefix(p, prefix) {
		return false
	}
	return len(p) == len(prefix) || strings.HasSuffix(prefix, "/") || p[len(prefix)] == '/'
}

// untypedStaysUntyped keeps h's responses without a Content-Type when h sets
// none (a proxied upstream that sent none): the response writer then guesses
// nothing, as net/http's does for a nil Content-Type.
func untypedStaysUntyped(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = nil
		h.ServeHTTP(w, r)
	})
}

// rootUnavailable answers a static route whose document root could not be
// opened when the worker started: 503, as for any part of the site that
// cannot serve now, without naming the path.
func rootUnavailable() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "60")
		http.Error(w, "document root unavailable", http.StatusServiceUnavailable)
	})
}

// newRespond answers every request with a fixed status and body, after
// reading the request body (under the transport's caps and rate), so that a
// client is answered only once it has sent its request.
func newRespond(cfg *config.Respond) http.Handler {
	body := []byte(cfg.Body)
	// The values are the handler's, shared by its responses (nothing
	// writes into a header value in place), so a response allocates none.
	ctype := []string{cfg.ContentType}
	length := []string{strconv.Itoa(len(body))}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return // the transport answers 408/413/400 for its own errors
		}
		h := w.Header()
		h["Content-Type"] = ctype[:1:1]
		h["Content-Length"] = length[:1:1]
		w.WriteHeader(cfg.Status)
		w.Write(body)
	})
}

// allowAsterisk is the Allow value answered to "OPTIONS *": the methods some
// route may serve (static and respond routes serve GET and HEAD, proxy and
// embedded handlers any of these).
const allowAsterisk = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"

// serverWideOptions reports whether r is "OPTIONS *", a question about the
// server rather than a resource (RFC 9110 §9.3.7), which no route matches.
func serverWideOptions(r *http.Request) bool {
	return r.Method == http.MethodOptions && r.RequestURI == "*"
}

// answerServerOptions answers "OPTIONS *" with 200 and Allow, as nginx and
// Apache do, instead of the 404 of a path no route serves.
func answerServerOptions(rw http.ResponseWriter) {
	rw.Header().Set("Allow", allowAsterisk)
	rw.Header().Set("Content-Length", "0")
	rw.WriteHeader(http.StatusOK)
}
