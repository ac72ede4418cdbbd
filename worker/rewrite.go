package worker

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/gatehouse-dev/gatehouse/config"
)

// newRedirect answers every request of a redirect route with its status
// and its target, the placeholders filled from the request. The request
// body is never read: a request with one is answered and the connection
// closed, as for https_redirect.
func newRedirect(prefix string, cfg *config.Redirect) http.Handler {
	base := strings.TrimSuffix(prefix, "/")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			w.Header().Set("Connection", "close")
		}
		query := ""
		if r.URL.RawQuery != "" {
			query = "?" + r.URL.RawQuery
		}
		path := r.URL.EscapedPath()
		rest := escapedRest(r.URL, base)
		loc := strings.NewReplacer(config.PlaceholderPath, path, config.PlaceholderRest, rest, config.PlaceholderQuery, query).Replace(cfg.To)
		w.Header().Set("Location", loc)
		http.Error(w, http.StatusText(cfg.Status), cfg.Status)
	})
}

// escapedRest returns the percent-encoded path of u after base, a prefix
// of its path without a trailing "/": "" or a path starting with "/".
func escapedRest(u *url.URL, base string) string {
	esc := u.EscapedPath()
	if eb := (&url.URL{Path: base}).EscapedPath(); strings.HasPrefix(esc, eb) {
		return esc[len(eb):]
	}
	return (&url.URL{Path: strings.TrimPrefix(u.Path, base)}).EscapedPath()
}

// slashRedirect answers the prefix without its trailing "/" with 301 to
// the prefix, the query kept, as nginx does for a location ending in "/"
// whose prefix is requested without it.
func slashRedirect(prefix string) http.Handler {
	loc := (&url.URL{Path: prefix}).EscapedPath()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			w.Header().Set("Connection", "close")
		}
		l := loc
		if r.URL.RawQuery != "" {
			l += "?" + r.URL.RawQuery
		}
		w.Header().Set("Location", l)
		http.Error(w, http.StatusText(http.StatusMovedPermanently), http.StatusMovedPermanently)
	})
}

// replacePrefix rewrites out's path for an upstream: the route's prefix
// (base, without its trailing "/") replaced by with, as nginx's
// `location /app/ { proxy_pass http://up/v2/; }` sends "/app/x" as
// "/v2/x". The percent-encoding the client chose for the rest is kept.
func replacePrefix(out *url.URL, base, with string) {
	rest := strings.TrimPrefix(out.Path, base)
	restRaw := escapedRest(out, base)
	if rest == "" {
		out.Path, out.RawPath = with, ""
		return
	}
	w := strings.TrimSuffix(with, "/")
	out.Path = w + rest
	out.RawPath = (&url.URL{Path: w}).EscapedPath() + restRaw
}
