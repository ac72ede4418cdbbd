// Package access is a route's access phase: the client address its rules
// see behind trusted proxies, and basic auth against htpasswd entries with
// its verified and throttled tables. It answers nothing on its own but the
// 401 and 429 of basic auth; the worker applies the rules in its round.
package access

import (
	"net/http"
	"net/netip"
	"strings"
)

// ClientAddr is the address access rules and auth throttling see: the
// connection's peer (the PROXY protocol's source when the listener reads
// one); behind a trusted proxy, the first address of X-Forwarded-For from
// the right that is not itself a trusted proxy, as the supervisor charges
// rate limits (nginx's real_ip_recursive with set_real_ip_from =
// trusted_proxies). A malformed entry stops the walk at the peer. The zero
// Addr when the peer is unknown: only an "all" rule matches it.
func ClientAddr(r *http.Request, trusted []netip.Prefix) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	peer := ap.Addr().Unmap()
	if !PeerIn(trusted, r.RemoteAddr) {
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
			if !in(trusted, a) {
				return a
			}
		}
	}
	return peer
}

// maxForwardedFor bounds the X-Forwarded-For entries ClientAddr walks, as
// the supervisor's dispatcher does.
const maxForwardedFor = 32

// PeerIn reports whether remote ("ip:port") is in one of the prefixes.
func PeerIn(allow []netip.Prefix, remote string) bool {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return false
	}
	return in(allow, ap.Addr().Unmap())
}

// in reports whether a is in one of the prefixes.
func in(prefixes []netip.Prefix, a netip.Addr) bool {
	for _, p := range prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
