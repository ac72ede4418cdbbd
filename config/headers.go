package config

import (
	"fmt"
	"net/textproto"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// Header rules (issue 30): response headers set, added and
// removed per listener and per route (nginx add_header), request headers set
// and removed toward a proxy route's upstream (proxy_set_header), and
// upstream response headers hidden (proxy_hide_header).

// HeaderRules is one `headers { ... }` block of a listener or a route.
type HeaderRules struct {
	// Set replaces the handler's fields of these names (nginx has no
	// direct equivalent: proxy_hide_header plus add_header).
	Set []Header
	// Add appends a field, whatever the handler sent (nginx add_header).
	Add []Header
	// Remove deletes every field of these names, canonical.
	Remove []string
	// Always applies the rules to every status, errors and gatehouse's own
	// answers included (nginx add_header ... always); otherwise only to
	// 200, 201, 204, 206, 301, 302, 303, 304, 307 and 308, as nginx.
	Always bool
}

// Header is one header field; Name is canonical (textproto).
type Header struct {
	Name, Value string
}

// RequestHeaders is a proxy route's `request_headers { ... }` block: what
// the upstream receives in place of the client's fields.
type RequestHeaders struct {
	// Set replaces the fields of these names ("Host" sets the Host the
	// upstream sees).
	Set []Header
	// Remove deletes them, canonical.
	Remove []string
}

// forbiddenHeaders are the fields a rule may not name: the transport owns
// framing and connection management (RFC 9112 §6, RFC 9110 §7.6.1), and
// sends X-Content-Type-Options: nosniff on every response itself.
var forbiddenHeaders = map[string]string{
	"Connection":             "hop-by-hop",
	"Keep-Alive":             "hop-by-hop",
	"Proxy-Connection":       "hop-by-hop",
	"Te":                     "hop-by-hop",
	"Trailer":                "hop-by-hop",
	"Upgrade":                "hop-by-hop",
	"Transfer-Encoding":      "framing",
	"Content-Length":         "framing",
	"X-Content-Type-Options": "always nosniff",
}

var (
	headersSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "set"}, {Name: "add"}, {Name: "remove"}, {Name: "always"}},
	}
	requestHeadersSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "set"}, {Name: "remove"}},
	}
)

// headerBlocks decodes every `headers` block in blocks; owner names the
// listener or route in messages.
func (d *decoder) headerBlocks(blocks hcl.Blocks, owner string) []HeaderRules {
	var all []HeaderRules
	for _, b := range blocks.OfType("headers") {
		attrs := d.attrs(b, headersSchema)
		name := owner + ": headers"
		var h HeaderRules
		h.Set = d.headerMap(attrs, "set", name, false)
		h.Add = d.headerMap(attrs, "add", name, false)
		h.Remove = d.headerNames(attrs, "remove", name+".remove")
		boolAttr(d, attrs, "always", name+".always", &h.Always)
		all = append(all, h)
	}
	return all
}

// requestHeaders decodes a route's request_headers block.
func (d *decoder) requestHeaders(b *hcl.Block, owner string) *RequestHeaders {
	attrs := d.attrs(b, requestHeadersSchema)
	name := owner + ": request_headers"
	return &RequestHeaders{
		Set:    d.headerMap(attrs, "set", name, true),
		Remove: d.headerNames(attrs, "remove", name+".remove"),
	}
}

// headerMap decodes attrs[key], an object of field names to values, in
// the order written. host allows Host as a name (a request field).
func (d *decoder) headerMap(attrs hcl.Attributes, key, name string, host bool) []Header {
	attr, ok := attrs[key]
	if !ok {
		return nil
	}
	what := name + "." + key
	pairs, diags := hcl.ExprMap(attr.Expr)
	if diags.HasErrors() {
		d.errorf(attr.Expr.Range(), "Invalid value", `%s must be an object of field names to values, such as { "Cache-Control" = "no-cache" }.`, what)
		return nil
	}
	var hs []Header
	seen := map[string]hcl.Range{}
	for _, p := range pairs {
		kv, diags := p.Key.Value(nil)
		d.add(diags)
		if diags.HasErrors() {
			continue
		}
		k, ok := d.check(kv, p.Key.Range(), what+" key", cty.String, "a field name")
		if !ok {
			continue
		}
		field, ok := d.headerName(k.AsString(), p.Key.Range(), what, host)
		if !ok {
			continue
		}
		if first, dup := seen[field]; dup {
			d.errorf(p.Key.Range(), "Duplicate header", "%s names %s twice (field names ignore case); the first is at %s.", what, field, first)
			continue
		}
		seen[field] = p.Key.Range()
		vv, diags := p.Value.Value(nil)
		d.add(diags)
		if diags.HasErrors() {
			continue
		}
		v, ok := d.check(vv, p.Value.Range(), fmt.Sprintf("%s[%q]", what, field), cty.String, "a string")
		if !ok {
			continue
		}
		if !validFieldValue(v.AsString()) {
			d.errorf(p.Value.Range(), "Invalid header value", "%s[%q] may not hold CR, LF or other control characters, nor begin or end with a space, got %q.", what, field, v.AsString())
			continue
		}
		hs = append(hs, Header{Name: field, Value: v.AsString()})
	}
	return hs
}

// headerNames decodes attrs[key], a list of field names, canonical; what
// names it in messages.
func (d *decoder) headerNames(attrs hcl.Attributes, key, what string) []string {
	ss, rngs := stringListAttr(d, attrs, key, what)
	var names []string
	for i, s := range ss {
		if field, ok := d.headerName(s, rngs[i], what, false); ok {
			names = append(names, field)
		}
	}
	return names
}

// headerName checks a field name a rule names and returns it canonical.
func (d *decoder) headerName(s string, rng hcl.Range, what string, host bool) (string, bool) {
	if !validFieldName(s) {
		d.errorf(rng, "Invalid header name", "%s: %q is not a header field name (letters, digits and !#$%%&'*+-.^_`|~, RFC 9110 §5.1).", what, s)
		return "", false
	}
	field := textproto.CanonicalMIMEHeaderKey(s)
	if why, bad := forbiddenHeaders[field]; bad {
		switch why {
		case "always nosniff":
			d.errorf(rng, "Forbidden header", "%s: gatehouse sends X-Content-Type-Options: nosniff on every response itself; it cannot be changed.", what)
		default:
			d.errorf(rng, "Forbidden header", "%s: %s is a %s field, which gatehouse sets from the connection and the body; a rule cannot name it.", what, field, why)
		}
		return "", false
	}
	if field == "Host" && !host {
		d.errorf(rng, "Forbidden header", "%s: Host can only be set, toward an upstream (request_headers.set).", what)
		return "", false
	}
	return field, true
}

// validFieldName reports whether s is a token (RFC 9110 §5.6.2).
func validFieldName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// validFieldValue reports whether s is a field value (RFC 9110 §5.5):
// visible characters, spaces and tabs inside, none at either end.
func validFieldValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return s == strings.Trim(s, " \t")
}

// OnStatus reports whether the rules apply to a response with status.
func (h *HeaderRules) OnStatus(status int) bool {
	if h.Always {
		return true
	}
	switch status {
	case 200, 201, 204, 206, 301, 302, 303, 304, 307, 308:
		return true
	}
	return false
}

// routeSite decodes a route's site blocks and attributes (header rules,
// error pages), which may stand beside its handler, into r, and returns
// the other blocks: the handlers.
func (d *decoder) routeSite(content *hcl.BodyContent, name, base string, r *Route) hcl.Blocks {
	var handlers hcl.Blocks
	proxy := false
	for _, b := range content.Blocks {
		switch b.Type {
		case "headers", "request_headers", "error_page":
		case "proxy":
			proxy = true
			handlers = append(handlers, b)
		default:
			handlers = append(handlers, b)
		}
	}
	r.Headers = d.headerBlocks(content.Blocks, name)
	r.ErrorPages = d.errorPages(content.Blocks, name, base)
	for i, b := range content.Blocks.OfType("request_headers") {
		switch {
		case i > 0:
			d.errorf(b.DefRange, "Duplicate request_headers block", "%s has more than one request_headers block.", name)
		case !proxy:
			d.errorf(b.DefRange, "Invalid request_headers block", "%s: request_headers are sent to an upstream; they need a proxy handler.", name)
		default:
			r.RequestHeaders = d.requestHeaders(b, name)
		}
	}
	if a, ok := content.Attributes["hide_upstream_headers"]; ok {
		r.HideUpstreamHeaders = d.headerNames(content.Attributes, "hide_upstream_headers", name+": hide_upstream_headers")
		if !proxy {
			d.errorf(a.Range, "Invalid hide_upstream_headers", "%s: hide_upstream_headers removes fields of an upstream's responses; it needs a proxy handler.", name)
		}
	}
	return handlers
}
