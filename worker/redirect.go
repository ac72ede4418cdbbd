package worker

import (
	"net/http"
	"strings"
)

// rewriteRedirects points Location and Refresh URLs that name one of the
// upstream's own addresses at the client's scheme and host instead, as
// nginx's `proxy_redirect default` does, so a redirect never sends a client
// to an address only the front end can reach. The client's scheme and host
// are those sent upstream in X-Forwarded-Proto and -Host.
func (p *upstreamPool) rewriteRedirects(res *http.Response) {
	out := res.Request
	if out == nil || out.Header.Get("X-Forwarded-Host") == "" {
		return
	}
	public := out.Header.Get("X-Forwarded-Proto") + "://" + out.Header.Get("X-Forwarded-Host")
	if v := res.Header.Get("Location"); v != "" {
		if r, ok := p.rewriteURL(v, public); ok {
			res.Header.Set("Location", r)
		}
	}
	if v := res.Header.Get("Refresh"); v != "" {
		// "5; url=http://upstream/next" (HTML's refresh syntax).
		if i := strings.Index(strings.ToLower(v), "url="); i >= 0 {
			j := i + len("url=")
			quote := ""
			if j < len(v) && (v[j] == '\'' || v[j] == '"') {
				quote = v[j : j+1]
				j++
			}
			if r, ok := p.rewriteURL(v[j:], public); ok {
				res.Header.Set("Refresh", v[:i+len("url=")]+quote+r)
			}
		}
	}
}

// rewriteURL replaces an "http://ADDRESS" prefix of u naming one of the
// upstream's addresses with public; it reports whether it did.
func (p *upstreamPool) rewriteURL(u, public string) (string, bool) {
	for _, a := range p.up.Addresses {
		if a.Unix != "" {
			// An app on a Unix socket names no address of its own.
			continue
		}
		origins := []string{"http://" + a.String()}
		if port := a.AddrPort.Port(); port == 80 || a.Host != "" && a.Port == 80 {
			host := a.Host
			if host == "" {
				host = a.AddrPort.Addr().String()
				if a.AddrPort.Addr().Is6() {
					host = "[" + host + "]"
				}
			}
			origins = append(origins, "http://"+host)
		}
		for _, o := range origins {
			if len(u) < len(o) || !strings.EqualFold(u[:len(o)], o) {
				continue
			}
			rest := u[len(o):]
			if rest == "" || strings.ContainsRune("/?#", rune(rest[0])) {
				return public + rest, true
			}
		}
	}
	return u, false
}
