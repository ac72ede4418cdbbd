package config

import (
	"net/netip"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// Upstream is one `upstream "NAME"` block: where a proxy route's requests
// go. Workers name an upstream; only the supervisor dials it.
type Upstream struct {
	Name      string
	Addresses []netip.AddrPort // tried round robin
	// ConnectTimeout bounds one dial, 100ms..60s, default 5s.
	ConnectTimeout time.Duration
	// ResponseTimeout bounds the wait for a response head, 1s..3600s,
	// default 60s; past it the client gets 504.
	ResponseTimeout time.Duration
	// MaxConnections caps the connections held to it by all workers,
	// 1..65535, default 64. Over it a request is refused at once (503).
	MaxConnections int
}

// Metrics serves the supervisor's metrics in the Prometheus text format to
// clients whose address is in Allow; workers fetch them over their channel.
type Metrics struct {
	Allow []netip.Prefix
}

// Embedded routes to a handler an embedding program registered under Name
// (worker.Options.Handlers); a worker without it refuses to start.
type Embedded struct {
	Name string
}

// Proxy forwards a route's requests to an upstream.
type Proxy struct {
	Upstream string
}

// RateLimit is one `rate_limit "NAME"` block: a token bucket per client and
// class. A request's class is the rate_limit with the longest prefix of its
// path; a class named "default" (without prefix) takes the rest.
type RateLimit struct {
	Name   string
	Prefix string // "" only for "default"
	Rate   int    // tokens per Per, 1..1000000
	Per    time.Duration
	Burst  int // bucket size, 1..1000000
}

const (
	defaultConnectTimeout  = 5 * time.Second
	defaultResponseTimeout = 60 * time.Second
	defaultMaxConnections  = 64
	// DefaultRateLimitEntries bounds the rate limiter's bucket table.
	DefaultRateLimitEntries = 100000
)

var (
	upstreamSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
		{Name: "addresses", Required: true}, {Name: "connect_timeout"}, {Name: "response_timeout"}, {Name: "max_connections"},
	}}
	proxySchema     = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "upstream", Required: true}}}
	metricsSchema   = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "allow", Required: true}}}
	embeddedSchema  = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "name", Required: true}}}
	rateLimitSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
		{Name: "prefix"}, {Name: "rate", Required: true}, {Name: "per", Required: true}, {Name: "burst", Required: true},
	}}
)

func (d *decoder) upstream(b *hcl.Block, cfg *Config, seen map[string]hcl.Range) {
	name := b.Labels[0]
	if first, dup := seen[name]; dup {
		d.errorf(b.LabelRanges[0], "Duplicate upstream", "Upstream %q is already defined at %s.", name, first)
		return
	}
	seen[name] = b.DefRange
	if !isToken(name) {
		d.errorf(b.LabelRanges[0], "Invalid upstream name", "An upstream name is a token such as \"app\", got %q.", name)
		return
	}
	attrs := d.attrs(b, upstreamSchema)
	u := Upstream{Name: name, ConnectTimeout: defaultConnectTimeout, ResponseTimeout: defaultResponseTimeout, MaxConnections: defaultMaxConnections}
	what := "upstream " + name
	addrs, rngs := stringListAttr(d, attrs, "addresses", what+": addresses")
	for i, s := range addrs {
		ap, err := netip.ParseAddrPort(s)
		if err != nil || ap.Port() == 0 {
			d.errorf(rngs[i], "Invalid value", "%s: addresses holds IP:port literals such as \"127.0.0.1:9000\", got %q.", what, s)
			continue
		}
		u.Addresses = append(u.Addresses, ap)
	}
	if a, ok := attrs["addresses"]; ok && len(addrs) == 0 {
		d.errorf(a.Range, "Invalid value", "%s: addresses must name at least one address.", what)
	}
	durationAttr(d, attrs, "connect_timeout", what+": connect_timeout", 100*time.Millisecond, time.Minute, &u.ConnectTimeout)
	durationAttr(d, attrs, "response_timeout", what+": response_timeout", time.Second, time.Hour, &u.ResponseTimeout)
	intAttr(d, attrs, "max_connections", what+": max_connections", 1, 65535, &u.MaxConnections)
	cfg.Upstreams = append(cfg.Upstreams, u)
}

func (d *decoder) proxy(b *hcl.Block, route string) *Proxy {
	attrs := d.attrs(b, proxySchema)
	name, _, ok := stringAttr(d, attrs, "upstream", route+": proxy.upstream")
	if !ok {
		return nil
	}
	d.proxies = append(d.proxies, proxyRef{name: name, rng: attrs["upstream"].Expr.Range(), route: route})
	return &Proxy{Upstream: name}
}

// proxyRef is a proxy route's upstream name, checked once every upstream
// block is known.
type proxyRef struct {
	name, route string
	rng         hcl.Range
}

func (d *decoder) checkProxies(cfg *Config) {
	for _, p := range d.proxies {
		if cfg.Upstream(p.name) == nil {
			d.errorf(p.rng, "Unknown upstream", "%s: proxy.upstream names %q, which no upstream block defines.", p.route, p.name)
		}
	}
}

func (d *decoder) rateLimit(b *hcl.Block, cfg *Config, seen map[string]hcl.Range, prefixes map[string]string) {
	name := b.Labels[0]
	if first, dup := seen[name]; dup {
		d.errorf(b.LabelRanges[0], "Duplicate rate_limit", "rate_limit %q is already defined at %s.", name, first)
		return
	}
	seen[name] = b.DefRange
	what := "rate_limit " + name
	attrs := d.attrs(b, rateLimitSchema)
	rl := RateLimit{Name: name}
	prefix, rng, hasPrefix := stringAttr(d, attrs, "prefix", what+": prefix")
	switch {
	case name == "default" && hasPrefix:
		d.errorf(rng, "Invalid value", `rate_limit "default" applies to every path no other class matches; it takes no prefix.`)
	case name != "default" && !hasPrefix:
		if _, set := attrs["prefix"]; !set {
			d.errorf(b.DefRange, "Missing prefix", `%s needs a prefix such as "/login" (only "default" has none).`, what)
		}
	case hasPrefix && (!strings.HasPrefix(prefix, "/") || hasCTL(prefix) || strings.ContainsAny(prefix, " ?#")):
		d.errorf(rng, "Invalid value", "%s: prefix must be a URL path starting with \"/\", got %q.", what, prefix)
	case hasPrefix && prefixes[prefix] != "":
		d.errorf(rng, "Duplicate prefix", "%s: prefix %q is already the prefix of rate_limit %q.", what, prefix, prefixes[prefix])
	case hasPrefix:
		prefixes[prefix] = name
		rl.Prefix = prefix
	}
	intAttr(d, attrs, "rate", what+": rate", 1, 1000000, &rl.Rate)
	durationAttr(d, attrs, "per", what+": per", time.Second, 24*time.Hour, &rl.Per)
	intAttr(d, attrs, "burst", what+": burst", 1, 1000000, &rl.Burst)
	cfg.RateLimits = append(cfg.RateLimits, rl)
}

// Upstream returns the upstream named name, or nil.
func (c *Config) Upstream(name string) *Upstream {
	for i := range c.Upstreams {
		if c.Upstreams[i].Name == name {
			return &c.Upstreams[i]
		}
	}
	return nil
}

// RateClass returns the rate limit class for a request path: the longest
// matching prefix, else "default" when defined, else nil (not limited).
func (c *Config) RateClass(path string) *RateLimit {
	var best, def *RateLimit
	for i := range c.RateLimits {
		rl := &c.RateLimits[i]
		switch {
		case rl.Prefix == "":
			def = rl
		case strings.HasPrefix(path, rl.Prefix) && (best == nil || len(rl.Prefix) > len(best.Prefix)):
			best = rl
		}
	}
	if best != nil {
		return best
	}
	return def
}

// RateLimitByName returns the class named name, or nil.
func (c *Config) RateLimitByName(name string) *RateLimit {
	for i := range c.RateLimits {
		if c.RateLimits[i].Name == name {
			return &c.RateLimits[i]
		}
	}
	return nil
}

func (d *decoder) metrics(b *hcl.Block, route string) *Metrics {
	attrs := d.attrs(b, metricsSchema)
	m := &Metrics{}
	ss, rngs := stringListAttr(d, attrs, "allow", route+": metrics.allow")
	for i, s := range ss {
		p, err := parsePrefix(s)
		if err != nil {
			d.errorf(rngs[i], "Invalid value", "%s: metrics.allow: %s.", route, err)
			continue
		}
		m.Allow = append(m.Allow, p)
	}
	return m
}

func (d *decoder) embedded(b *hcl.Block, route string) *Embedded {
	attrs := d.attrs(b, embeddedSchema)
	name, rng, ok := stringAttr(d, attrs, "name", route+": embedded.name")
	if !ok {
		return nil
	}
	if !isToken(name) {
		d.errorf(rng, "Invalid value", "%s: embedded.name is a token such as \"app\", got %q.", route, name)
		return nil
	}
	return &Embedded{Name: name}
}
