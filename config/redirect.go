package config

import (
	"net/url"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// Redirect is a route's `redirect` handler: every request is answered with
// Status and a Location built from To, nginx's `return 301 URL` and
// `rewrite ... permanent`.
type Redirect struct {
	// To is the target, an absolute URL or a path starting with "/", in
	// which "{path}" stands for the request's path, "{rest}" for the part
	// of it after the route's prefix (without the prefix's trailing "/":
	// "/old/a" under "/old/" gives "/a") and "{query}" for "?" and the
	// query, or nothing when it has none; each as the client sent it,
	// percent-encoded.
	To string
	// Status is 301, 302 (default), 303, 307 or 308.
	Status int
}

// Redirect placeholders.
const (
	PlaceholderPath  = "{path}"
	PlaceholderRest  = "{rest}"
	PlaceholderQuery = "{query}"
)

var redirectSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "to", Required: true}, {Name: "status"}}}

// redirectStatuses are the statuses a redirect answers with.
var redirectStatuses = map[int]bool{301: true, 302: true, 303: true, 307: true, 308: true}

func (d *decoder) redirect(b *hcl.Block, route string) *Redirect {
	attrs := d.attrs(b, redirectSchema)
	r := &Redirect{Status: 302}
	if a, ok := attrs["status"]; ok {
		intAttr(d, attrs, "status", route+": redirect.status", 300, 308, &r.Status)
		if !redirectStatuses[r.Status] {
			d.errorf(a.Expr.Range(), "Invalid value", "%s: redirect.status is 301, 302, 303, 307 or 308, got %d.", route, r.Status)
			return nil
		}
	}
	to, rng, ok := stringAttr(d, attrs, "to", route+": redirect.to")
	if !ok {
		return nil
	}
	if err := checkRedirectTarget(to); err != "" {
		d.errorf(rng, "Invalid value", "%s: redirect.to %s, got %q.", route, err, to)
		return nil
	}
	r.To = to
	return r
}

// checkRedirectTarget returns why to is not a redirect target, or "".
func checkRedirectTarget(to string) string {
	if hasCTL(to) || strings.ContainsAny(to, " \"<>\\") {
		return "may not hold spaces, quotes, angle brackets, backslashes or control characters"
	}
	// The placeholders are the only braces.
	rest := to
	for _, p := range []string{PlaceholderPath, PlaceholderRest, PlaceholderQuery} {
		rest = strings.ReplaceAll(rest, p, "")
	}
	if strings.ContainsAny(rest, "{}") {
		return `may use only the placeholders {path}, {rest} and {query}`
	}
	switch {
	case strings.HasPrefix(to, "//"):
		return `is a path starting with one "/" or an absolute URL such as "https://example.com{path}{query}"`
	case strings.HasPrefix(to, "/"):
		return ""
	}
	u, err := url.Parse(rest)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return `is a path starting with "/" or an absolute http or https URL such as "https://example.com{path}{query}"`
	}
	return ""
}

// proxyRewrite decodes a proxy block's strip_prefix and rewrite_prefix:
// the route's prefix replaced, in the path sent upstream, by
// RewritePrefix, as nginx's `location /app/ { proxy_pass http://up/; }`.
func (d *decoder) proxyRewrite(attrs hcl.Attributes, route string, p *Proxy) {
	var strip bool
	boolAttr(d, attrs, "strip_prefix", route+": proxy.strip_prefix", &strip)
	rp, rng, ok := stringAttr(d, attrs, "rewrite_prefix", route+": proxy.rewrite_prefix")
	switch {
	case ok && strip:
		d.errorf(rng, "Conflicting values", "%s: proxy.strip_prefix = true is rewrite_prefix = \"/\"; set one of them.", route)
	case ok && (!strings.HasPrefix(rp, "/") || strings.HasPrefix(rp, "//") || strings.ContainsAny(rp, " \t?#") || hasCTL(rp)):
		d.errorf(rng, "Invalid value", "%s: proxy.rewrite_prefix is a path starting with \"/\", without spaces, \"?\" or \"#\", got %q.", route, rp)
	case ok:
		p.RewritePrefix = rp
	case strip:
		p.RewritePrefix = "/"
	}
}

// staticFallback decodes a static block's fallback: the file served, with
// 200, for a path that names no file, as nginx's `try_files $uri $uri/
// /index.html` does for a single-page application.
func (d *decoder) staticFallback(attrs hcl.Attributes, route string, s *Static) bool {
	f, rng, ok := stringAttr(d, attrs, "fallback", route+": static.fallback")
	if !ok {
		return true
	}
	clean := strings.TrimPrefix(f, "/")
	if !strings.HasPrefix(f, "/") || clean == "" || strings.HasSuffix(f, "/") || hasCTL(f) || strings.Contains(f, "\\") ||
		strings.Contains("/"+clean+"/", "/../") || strings.Contains("/"+clean+"/", "/./") || strings.Contains(clean, "//") {
		d.errorf(rng, "Invalid value", "%s: static.fallback is the path of a file below the root, such as \"/index.html\", got %q.", route, f)
		return false
	}
	s.Fallback = clean
	return true
}

// respondRedirectStatus reports a respond block's redirect status, which
// would go out without a Location.
func (d *decoder) respondRedirectStatus(attrs hcl.Attributes, route string, status int) bool {
	if !redirectStatuses[status] {
		return true
	}
	d.errorf(attrs["status"].Expr.Range(), "Invalid value",
		"%s: respond.status %d needs a Location, which respond cannot send; use a redirect handler instead: redirect { to = \"https://example.com{path}{query}\", status = %d }.", route, status, status)
	return false
}
