// Package site is what an operator's configuration adds to the answers of
// a site: header rules on responses and on a proxy route's upstream
// messages, error pages in place of gatehouse's own text (and of an
// upstream's), and the CORS headers and preflight answers.
package site

import (
	"net/http"

	"github.com/gatehouse-dev/gatehouse/config"
)

// Header rules (issue 30): the listener's `headers` blocks, then
// the route's, rewrite a response's fields just before its head is written;
// a route's request_headers and hide_upstream_headers rewrite what goes to
// and comes from its upstream.

// HeaderRules are `headers` blocks ready to apply: each value already a
// one-element slice, so that applying them allocates only for add.
type HeaderRules []headerRule

type headerRule struct {
	onOK   func(int) bool // config.HeaderRules.OnStatus
	remove []string
	set    []fieldValue
	add    []fieldValue
}

// fieldValue is a field and its value as the header map holds it.
type fieldValue struct {
	name  string
	value []string // one element, capacity one: never appended to in place
}

// NewHeaderRules readies a listener's or a route's `headers` blocks.
func NewHeaderRules(blocks []config.HeaderRules) HeaderRules {
	var rules HeaderRules
	for i := range blocks {
		b := &blocks[i]
		r := headerRule{onOK: b.OnStatus, remove: b.Remove}
		for _, f := range b.Set {
			r.set = append(r.set, fieldValue{f.Name, []string{f.Value}})
		}
		for _, f := range b.Add {
			r.add = append(r.add, fieldValue{f.Name, []string{f.Value}})
		}
		rules = append(rules, r)
	}
	return rules
}

// Apply rewrites h, a response's fields, for its status: each block in
// order removes, then sets, then adds.
func (rules HeaderRules) Apply(h http.Header, status int) {
	for i := range rules {
		r := &rules[i]
		if !r.onOK(status) {
			continue
		}
		for _, name := range r.remove {
			delete(h, name)
		}
		for _, f := range r.set {
			h[f.name] = f.value[:1:1]
		}
		for _, f := range r.add {
			h[f.name] = append(h[f.name], f.value[0])
		}
	}
}

// RequestRules is a proxy route's request_headers and
// hide_upstream_headers.
type RequestRules struct {
	set    []fieldValue
	host   string // a set Host, or ""
	remove []string
	hide   []string
}

// NewRequestRules readies route r's request_headers and
// hide_upstream_headers.
func NewRequestRules(r *config.Route) RequestRules {
	var rr RequestRules
	if r.RequestHeaders != nil {
		for _, f := range r.RequestHeaders.Set {
			if f.Name == "Host" {
				rr.host = f.Value
				continue
			}
			rr.set = append(rr.set, fieldValue{f.Name, []string{f.Value}})
		}
		rr.remove = r.RequestHeaders.Remove
	}
	rr.hide = r.HideUpstreamHeaders
	return rr
}

// Request rewrites an upstream request's fields, after the forwarded
// fields are set: an operator's rule wins.
func (rr *RequestRules) Request(out *http.Request) {
	for _, name := range rr.remove {
		delete(out.Header, name)
	}
	for _, f := range rr.set {
		out.Header[f.name] = f.value[:1:1]
	}
	if rr.host != "" {
		out.Host = rr.host
	}
}

// Response removes the hidden fields from an upstream's response.
func (rr *RequestRules) Response(res *http.Response) {
	for _, name := range rr.hide {
		delete(res.Header, name)
	}
}
