package worker

import (
	"context"
	"net/http"
	"net/netip"
	"strings"

	"github.com/gatehouse-dev/gatehouse/config"
)

// admit applies the route's access list and basic auth, after the rate
// limit and before any body is received, as nginx's access phase follows
// its preaccess (limit_req) phase. It answers 403, 401 or 429 itself and
// reports whether the handler may run.
func (cs *connServer) admit(ctx context.Context, rw http.ResponseWriter, req *http.Request, rt *route) bool {
	if rt == nil || (rt.access == nil && rt.auth == nil) {
		return true
	}
	client := cs.w.clientAddr(req)
	if rt.access != nil && !config.Admits(rt.access, client) {
		http.Error(rw, "403 forbidden", http.StatusForbidden)
		return false
	}
	return rt.auth == nil || cs.authorized(ctx, rw, req, rt.auth, client)
}

// clientAddr is the address access rules and auth throttling see: the
// connection's peer (the PROXY protocol's source when the listener reads
// one); behind a trusted proxy, the first address of X-Forwarded-For from
// the right that is not itself a trusted proxy, as the supervisor charges
// rate limits (nginx's real_ip_recursive with set_real_ip_from =
// trusted_proxies). A malformed entry stops the walk at the peer. The zero
// Addr when the peer is unknown: only an "all" rule matches it.
func (w *Worker) clientAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	peer := ap.Addr().Unmap()
	if !w.trustedPeer(r.RemoteAddr) {
		return peer
	}
	values := r.Header.Values("X-Forwarded-For")
	seen := 0
	for i := len(values) - 1; i >= 0 && seen < maxForwardedFor; i-- {
		parts := strings.Split(values[i], ",")
		for j := len(parts) - 1; j >= 0 && seen < maxForwardedFor; j-- {
			e := strings.TrimSpace(parts[j])
			if e == "" {
				continue
			}
			seen++
			a, err := netip.ParseAddr(e)
			if err != nil || a.Zone() != "" {
				return peer
			}
			a = a.Unmap()
			if !w.trusted(a) {
				return a
			}
		}
	}
	return peer
}

// maxForwardedFor bounds the X-Forwarded-For entries clientAddr walks, as
// the supervisor's dispatcher does.
const maxForwardedFor = 32

// trusted reports whether a is in trusted_proxies.
func (w *Worker) trusted(a netip.Addr) bool {
	for _, p := range w.cfg.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
