package worker

import (
	"crypto/tls"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/worker/site"
)

// Virtual hosts and per-listener answers (docs/DESIGN.md §3.6, §9).
//
// A request picks its set of routes by its Host: the routes listing that
// exact name, else those listing the longest wildcard that matches it, else
// the routes without hosts; then the route with the longest prefix within
// that set. It never falls back to a less specific set: a host's routes
// cover all of its paths, as an nginx server block does.

// hostRoutes are a router's routes limited to host names.
type hostRoutes struct {
	// exact holds the routes of each exact name, and wild those of each
	// wildcard keyed by its suffix (".example.org" for "*.example.org"),
	// longest prefix first. Immutable.
	exact, wild map[string][]route
	// misdirected answers a request whose Host has no routes.
	misdirected route
}

// listenerHTTP is what a listener adds to its requests' answers.
type listenerHTTP struct {
	hsts     string // the Strict-Transport-Security value, or ""
	redirect *route // answers every request with a redirect to https, or nil
	headers  site.HeaderRules
}

// addHosts files r under each of its host patterns.
func (rt *router) addHosts(r route, hosts []string) {
	if rt.hosts == nil {
		rt.hosts = &hostRoutes{exact: map[string][]route{}, wild: map[string][]route{},
			misdirected: route{prefix: "/", handler: http.HandlerFunc(misdirected)}}
	}
	for _, h := range hosts {
		if suffix, ok := strings.CutPrefix(h, "*"); ok {
			rt.hosts.wild[suffix] = append(rt.hosts.wild[suffix], r)
		} else {
			rt.hosts.exact[h] = append(rt.hosts.exact[h], r)
		}
	}
}

// hostSet returns the routes for the canonical host name, and reports
// whether there are any.
func (rt *router) hostSet(name string) ([]route, bool) {
	if rt.hosts == nil {
		return rt.routes, len(rt.routes) > 0
	}
	if set, ok := rt.hosts.exact[name]; ok {
		return set, true
	}
	// Longest wildcard first; a wildcard needs a label before its suffix.
	for i := 1; i < len(name); i++ {
		if name[i] == '.' {
			if set, ok := rt.hosts.wild[name[i:]]; ok {
				return set, true
			}
		}
	}
	return rt.routes, len(rt.routes) > 0
}

// listeners builds the per-listener answers of cfg's listeners.
func (rt *router) listeners(cfg *config.Config) {
	for _, l := range cfg.Listeners {
		var lh listenerHTTP
		if l.HSTS != nil {
			lh.hsts = l.HSTS.Header()
		}
		if l.HTTPSRedirect != nil {
			lh.redirect = &route{prefix: "/", handler: rt.redirectHandler(l.HTTPSRedirect.Port), headOnly: true}
		}
		lh.headers = site.NewHeaderRules(l.Headers)
		if lh.hsts != "" || lh.redirect != nil || len(lh.headers) > 0 {
			if rt.byListener == nil {
				rt.byListener = map[string]listenerHTTP{}
			}
			rt.byListener[l.Name] = lh
		}
	}
}

// canonicalHost returns the name of a Host value as the host patterns are
// written: without port, brackets or trailing dot, in lower case. It
// allocates only for upper case or an IPv6 literal.
func canonicalHost(h string) string {
	if strings.HasPrefix(h, "[") {
		if end := strings.IndexByte(h, ']'); end > 0 {
			if a, err := netip.ParseAddr(h[1:end]); err == nil {
				return a.String()
			}
			return strings.ToLower(h[1:end])
		}
	} else if i := strings.IndexByte(h, ':'); i >= 0 {
		h = h[:i]
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// misdirected answers a request whose Host has no routes: 421 on a TLS
// connection whose client named another server (SNI), which may retry on a
// connection of its own for this host (RFC 9110 §15.5.20); 404 otherwise.
func misdirected(w http.ResponseWriter, r *http.Request) {
	if cs, _ := r.Context().Value(connKey{}).(*connServer); cs != nil {
		if tc, ok := cs.nc.(*tls.Conn); ok {
			if sni := tc.ConnectionState().ServerName; sni != "" && canonicalHost(sni) != canonicalHost(r.Host) {
				http.Error(w, "misdirected request", http.StatusMisdirectedRequest)
				return
			}
		}
	}
	http.NotFound(w, r)
}

// redirectHandler answers every request with a redirect to https on port:
// 301 for GET and HEAD, as nginx's `return 301 https://$host$request_uri`
// does, and 308 for other methods, which keeps the method and body. Only a
// host the routes serve is redirected to (any well-formed name when some
// routes have no hosts), so the redirect names no other site; otherwise 404.
// The request body is never read: a request with one is answered and the
// connection closed.
func (rt *router) redirectHandler(port uint16) http.Handler {
	suffix := ""
	if port != 443 {
		suffix = ":" + strconv.Itoa(int(port))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		if r.Body != nil && r.Body != http.NoBody {
			h.Set("Connection", "close")
		}
		host := canonicalHost(r.Host)
		if p, err := config.ParseHostPattern(host); err != nil || p != host || strings.HasPrefix(p, "*") {
			http.NotFound(w, r)
			return
		}
		if _, ok := rt.hostSet(host); !ok {
			http.NotFound(w, r)
			return
		}
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
		loc := "https://" + host + suffix + r.URL.EscapedPath()
		if r.URL.RawQuery != "" {
			loc += "?" + r.URL.RawQuery
		}
		status := http.StatusPermanentRedirect
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			status = http.StatusMovedPermanently
		}
		h.Set("Location", loc)
		http.Error(w, http.StatusText(status), status)
	})
}

// route returns the route of req on this connection, or nil.
func (cs *connServer) route(req *http.Request) *route {
	if cs.listener.redirect != nil {
		return cs.listener.redirect
	}
	return cs.w.router.match(req.Host, req.URL.Path)
}
