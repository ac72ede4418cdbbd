package worker

import (
	"context"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"

	"github.com/gatehouse-dev/gatehouse/worker/access"
	"github.com/gatehouse-dev/gatehouse/worker/httphead"
)

// Forwarded fields sent upstream. From a peer in trusted_proxies the
// client-facing scheme, host and port it reports are taken (the rightmost
// value of each, what that peer itself asserted) and its X-Forwarded-For and
// Forwarded lists are kept in front of this hop's entry; from any other
// peer every such field is dropped and set from the connection: https when
// it came on a TLS listener (Request.TLS), the port that listener accepted
// it on, the Host it asked for.

// setForwarded sets X-Forwarded-For, -Proto, -Host, -Port and Forwarded
// (RFC 7239) on the upstream request. ReverseProxy has already removed the
// incoming Forwarded, X-Forwarded-For, -Host and -Proto from pr.Out.
func (w *Worker) setForwarded(pr *httputil.ProxyRequest) {
	in, out := pr.In, pr.Out
	out.Header.Del("X-Forwarded-Port")
	scheme := "http"
	if in.TLS != nil {
		scheme = "https"
	}
	host := in.Host
	port := localPort(in)
	peer, _ := netip.ParseAddrPort(in.RemoteAddr)
	var xff, fwd []string
	if w.trustedPeer(in.RemoteAddr) {
		if v := lastElement(in.Header.Values("X-Forwarded-Proto")); strings.EqualFold(v, "http") || strings.EqualFold(v, "https") {
			scheme = strings.ToLower(v)
		}
		if v := lastElement(in.Header.Values("X-Forwarded-Host")); validForwardedHost(v) {
			host = v
		}
		if v := lastElement(in.Header.Values("X-Forwarded-Port")); validPort(v) {
			port = v
		}
		xff = in.Header.Values("X-Forwarded-For")
		fwd = in.Header.Values("Forwarded")
	}
	if peer.IsValid() {
		xff = append(xff[:len(xff):len(xff)], peer.Addr().Unmap().String())
	}
	if len(xff) > 0 {
		out.Header.Set("X-Forwarded-For", strings.Join(xff, ", "))
	}
	fwd = append(fwd[:len(fwd):len(fwd)], forwardedElement(peer, in.Host, in.TLS != nil))
	out.Header.Set("Forwarded", strings.Join(fwd, ", "))
	out.Header.Set("X-Forwarded-Proto", scheme)
	if host != "" {
		out.Header.Set("X-Forwarded-Host", host)
	}
	if port != "" {
		out.Header.Set("X-Forwarded-Port", port)
	}
}

// forwardedElement is this hop's Forwarded element: who connected to us,
// the Host they asked for and the protocol they used (RFC 7239 §5).
func forwardedElement(peer netip.AddrPort, host string, tls bool) string {
	var b strings.Builder
	b.WriteString("for=")
	switch a := peer.Addr().Unmap(); {
	case !peer.IsValid():
		b.WriteString("unknown")
	case a.Is6():
		b.WriteString(`"[` + a.String() + `]"`)
	default:
		b.WriteString(a.String())
	}
	if host != "" && validForwardedHost(host) {
		b.WriteString(";host=" + strconv.Quote(host))
	}
	if tls {
		b.WriteString(";proto=https")
	} else {
		b.WriteString(";proto=http")
	}
	return b.String()
}

// lastElement returns the rightmost comma-separated element of values.
func lastElement(values []string) string {
	if len(values) == 0 {
		return ""
	}
	v := values[len(values)-1]
	if i := strings.LastIndexByte(v, ','); i >= 0 {
		v = v[i+1:]
	}
	return strings.TrimSpace(v)
}

// validForwardedHost reports whether v is a plausible host[:port]: a field
// value without spaces, quotes, commas or path characters.
func validForwardedHost(v string) bool {
	return v != "" && len(v) <= 255 && httphead.ValidFieldValue(v) && !strings.ContainsAny(v, " \t\",;/\\?#@")
}

func validPort(v string) bool {
	n, err := strconv.Atoi(v)
	return err == nil && n > 0 && n < 65536 && strconv.Itoa(n) == v
}

// connKey is the request context key under which a round puts its
// connection's server, for what only the connection knows (its local port).
type connKey struct{}

// connContext is a round context's parent: Background with the round's
// connServer under connKey. It lives in the connServer, so a round's
// context costs no allocation for the value.
type connContext struct {
	context.Context
	cs *connServer
}

func (c *connContext) Value(key any) any {
	if key == (connKey{}) {
		return c.cs
	}
	return c.Context.Value(key)
}

// localPort returns the port the request's connection was accepted on, or "".
func localPort(r *http.Request) string {
	cs, _ := r.Context().Value(connKey{}).(*connServer)
	if cs == nil {
		return ""
	}
	return cs.localPort()
}

// trustedPeer reports whether the connection's peer is a trusted proxy.
func (w *Worker) trustedPeer(remote string) bool { return access.PeerIn(w.cfg.TrustedProxies, remote) }
