package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// HSTS is a TLS listener's `hsts { ... }` block: every response on the
// listener carries Strict-Transport-Security (RFC 6797).
type HSTS struct {
	// MaxAge is max-age, whole seconds, 0s..730d (default 365d); 0 tells
	// browsers to forget the policy.
	MaxAge time.Duration
	// IncludeSubdomains adds includeSubDomains (default false).
	IncludeSubdomains bool
	// Preload adds preload (default false); it needs IncludeSubdomains and
	// a MaxAge of at least 365d, as the browsers' preload lists do.
	Preload bool
}

// Header returns the Strict-Transport-Security field value.
func (h *HSTS) Header() string {
	v := "max-age=" + strconv.FormatInt(int64(h.MaxAge/time.Second), 10)
	if h.IncludeSubdomains {
		v += "; includeSubDomains"
	}
	if h.Preload {
		v += "; preload"
	}
	return v
}

// HTTPSRedirect is a plain listener's `https_redirect`: every request is
// answered with a redirect to the same host and path over https
// (docs/DESIGN.md §9).
type HTTPSRedirect struct {
	// Listener is the TLS listener named (`https_redirect = "https"`),
	// whose port the redirect uses; "" when a port was given.
	Listener string
	// Port is the port of the Location; 443 is left out of it.
	Port uint16
}

// HSTS limits.
const (
	defaultHSTSMaxAge = 365 * 24 * time.Hour
	maxHSTSMaxAge     = 730 * 24 * time.Hour
	preloadMinMaxAge  = 365 * 24 * time.Hour
)

var hstsSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "max_age"}, {Name: "include_subdomains"}, {Name: "preload"}},
}

// redirectRef is an https_redirect naming a listener, resolved once every
// listener is read.
type redirectRef struct {
	from, to string
	rng      hcl.Range
}

// listenerHTTP decodes a listener's hsts block and https_redirect into l,
// and reports whether they are valid.
func (d *decoder) listenerHTTP(content *hcl.BodyContent, l *Listener) bool {
	ok := true
	for i, b := range content.Blocks.OfType("hsts") {
		switch {
		case i > 0:
			d.errorf(b.DefRange, "Duplicate hsts block", "listener %q has more than one hsts block.", l.Name)
			ok = false
		case l.TLS == nil:
			d.errorf(b.DefRange, "Invalid hsts block", "listener %q: hsts is sent only over TLS (RFC 6797 §7.2); put it in a listener with a tls block.", l.Name)
			ok = false
		default:
			if l.HSTS = d.hsts(b, l.Name); l.HSTS == nil {
				ok = false
			}
		}
	}
	attr, found := content.Attributes["https_redirect"]
	if !found {
		return ok
	}
	name := fmt.Sprintf("listener %q: https_redirect", l.Name)
	if l.TLS != nil {
		d.errorf(attr.Range, "Invalid https_redirect", "%s: a TLS listener cannot redirect to https; https_redirect belongs in a plain listener.", name)
		return false
	}
	v, diags := attr.Expr.Value(nil)
	d.add(diags)
	switch {
	case diags.HasErrors():
		return false
	case v.IsKnown() && !v.IsNull() && v.Type() == cty.String:
		to, rng, _ := stringAttr(d, content.Attributes, "https_redirect", name)
		d.redirects = append(d.redirects, redirectRef{from: l.Name, to: to, rng: rng})
		l.HTTPSRedirect = &HTTPSRedirect{Listener: to}
	case v.IsKnown() && !v.IsNull() && v.Type() == cty.Number:
		port := 0
		intAttr(d, content.Attributes, "https_redirect", name, 1, 65535, &port)
		if port == 0 {
			return false
		}
		l.HTTPSRedirect = &HTTPSRedirect{Port: uint16(port)}
	default:
		d.errorf(attr.Expr.Range(), "Invalid value", `%s must name a TLS listener, as in "https", or give a port, as in 443.`, name)
		return false
	}
	return ok
}

// hsts decodes an hsts block, or returns nil after reporting its errors.
func (d *decoder) hsts(b *hcl.Block, listener string) *HSTS {
	attrs := d.attrs(b, hstsSchema)
	name := fmt.Sprintf("listener %q: hsts", listener)
	h := &HSTS{MaxAge: defaultHSTSMaxAge}
	ok := true
	if s, rng, found := stringAttr(d, attrs, "max_age", name+".max_age"); found {
		v, err := ParseMaxAge(s)
		switch {
		case err != nil:
			d.errorf(rng, "Invalid duration", "%s.max_age: %s.", name, err)
			ok = false
		case v > maxHSTSMaxAge:
			d.errorf(rng, "Invalid value", "%s.max_age must be between 0s and 730d, got %s.", name, s)
			ok = false
		default:
			h.MaxAge = v
		}
	}
	boolAttr(d, attrs, "include_subdomains", name+".include_subdomains", &h.IncludeSubdomains)
	boolAttr(d, attrs, "preload", name+".preload", &h.Preload)
	if a, found := attrs["preload"]; found && h.Preload && ok && (!h.IncludeSubdomains || h.MaxAge < preloadMinMaxAge) {
		d.errorf(a.Expr.Range(), "Invalid value", "%s.preload needs include_subdomains = true and a max_age of at least 365d, as the browsers' preload lists require.", name)
		ok = false
	}
	if !ok {
		return nil
	}
	return h
}

// resolveRedirects checks that every https_redirect naming a listener
// names a TLS listener with a fixed port, and takes that port.
func (d *decoder) resolveRedirects(cfg *Config) {
	for _, ref := range d.redirects {
		i := cfg.listener(ref.from)
		if i < 0 {
			continue // the listener had errors of its own
		}
		r := cfg.Listeners[i].HTTPSRedirect
		j := cfg.listener(ref.to)
		switch {
		case j < 0 || cfg.Listeners[j].TLS == nil:
			d.errorf(ref.rng, "Invalid https_redirect", "listener %q: https_redirect names %q, which is not a TLS listener of this file.", ref.from, ref.to)
		case cfg.Listeners[j].Address.Port() == 0:
			d.errorf(ref.rng, "Invalid https_redirect", "listener %q: https_redirect names %q, whose port is chosen by the kernel (0); give the port itself, as in https_redirect = 443.", ref.from, ref.to)
		default:
			r.Port = cfg.Listeners[j].Address.Port()
		}
	}
}

// listener returns the index of the listener called name, or -1.
func (c *Config) listener(name string) int {
	for i := range c.Listeners {
		if c.Listeners[i].Name == name {
			return i
		}
	}
	return -1
}

// ParseMaxAge parses an HSTS max_age: a whole number of days ("365d") or a
// Go duration ("8760h", "31536000s") of whole seconds, not negative.
func ParseMaxAge(s string) (time.Duration, error) {
	const bad = "must be a duration of whole seconds such as \"365d\" or \"86400s\", got %q"
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseUint(days, 10, 16)
		if err != nil {
			return 0, fmt.Errorf(bad, s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 || v%time.Second != 0 {
		return 0, fmt.Errorf(bad, s)
	}
	return v, nil
}
