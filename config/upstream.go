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
	Name string
	// Addresses are tried round robin, a host name's resolved addresses
	// each in its place.
	Addresses []Address
	// ResolveInterval is how often the supervisor resolves the host names
	// among Addresses again (0: only at start and at a reload), 0 or
	// 1s..24h, default 60s.
	ResolveInterval time.Duration
	// ConnectTimeout bounds one dial, 100ms..60s, default 5s.
	ConnectTimeout time.Duration
	// ResponseTimeout bounds the wait for a response head, 1s..3600s,
	// default 60s; past it the client gets 504.
	ResponseTimeout time.Duration
	// ReadTimeout bounds each wait for bytes from the upstream (the head's
	// included), 1s..3600s, default 60s; past it a request still waiting
	// for its head gets 504 and a response under way is cut off with the
	// client connection closed.
	ReadTimeout time.Duration
	// SendTimeout bounds each write of a request to the upstream, 1s..3600s,
	// default 60s.
	SendTimeout time.Duration
	// MaxConnections caps the connections in use to it by all workers,
	// 1..65535, default 64. Each worker holds at most its share
	// (WorkerShare); idle pooled connections are reclaimed when another
	// worker needs the budget. A request that finds its worker's share in
	// use by as many requests, or the whole budget in use, is refused at
	// once (503).
	MaxConnections int
	// MaxFails consecutive connect failures or timeouts take an address out
	// of rotation for FailTimeout (1..100, default 1); after it one request
	// probes the address (1s..3600s, default 10s).
	MaxFails    int
	FailTimeout time.Duration
	// HealthCheck, when set, has the supervisor probe every address.
	HealthCheck *HealthCheck
}

// WorkerShare is how many connections to u one of workers processes may
// hold: MaxConnections divided among them, rounded up. The supervisor
// refuses a dial past it, and the worker never asks for one.
func (u *Upstream) WorkerShare(workers int) int {
	n := max(1, workers)
	return (u.MaxConnections + n - 1) / n
}

// HealthCheck is an upstream's `health_check` block: the supervisor sends
// `GET Path` to every address each Interval and takes an address out of
// rotation while it fails (no answer within Timeout, or a status outside
// 200..399), back in at its first success.
type HealthCheck struct {
	Path     string
	Interval time.Duration // 1s..3600s, default 10s
	Timeout  time.Duration // 100ms..60s, default 2s
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
	// RewriteRedirects rewrites Location and Refresh URLs that point at one
	// of the upstream's own addresses to the client's scheme and host
	// (default true, as nginx's `proxy_redirect default`).
	RewriteRedirects bool
	// Upgrade names the protocols (lower case, as "websocket") whose
	// Upgrade requests are forwarded; an upgraded connection is relayed
	// byte for byte (docs/DESIGN.md §10). Empty: Upgrade is dropped as a
	// hop-by-hop field, as any proxy does.
	Upgrade []string
	// IdleTimeout closes an upgraded connection after this long without a
	// byte in either direction (1s..24h, default 60s).
	IdleTimeout time.Duration
	// RewritePrefix replaces the route's prefix in the path sent upstream
	// ("" leaves the path as the client sent it; strip_prefix is "/").
	RewritePrefix string
}

// Upgrades reports whether the proxy forwards an Upgrade to protocol
// (compared case-insensitively, without its version).
func (p *Proxy) Upgrades(protocol string) bool {
	name, _, _ := strings.Cut(protocol, "/")
	for _, u := range p.Upgrade {
		if strings.EqualFold(u, strings.TrimSpace(name)) {
			return true
		}
	}
	return false
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
	defaultReadTimeout     = 60 * time.Second
	defaultSendTimeout     = 60 * time.Second
	defaultMaxFails        = 1
	defaultFailTimeout     = 10 * time.Second
	defaultHealthInterval  = 10 * time.Second
	defaultHealthTimeout   = 2 * time.Second
	// defaultResolveInterval follows a host name whose addresses change (a
	// container restarted) within a minute, as Caddy's dynamic upstreams
	// refresh; resolving names from /etc/hosts costs nothing.
	defaultResolveInterval = time.Minute
	// DefaultRateLimitEntries bounds the rate limiter's bucket table.
	DefaultRateLimitEntries = 100000
)

var (
	upstreamSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
		{Name: "addresses", Required: true}, {Name: "connect_timeout"}, {Name: "response_timeout"}, {Name: "max_connections"},
		{Name: "read_timeout"}, {Name: "send_timeout"}, {Name: "max_fails"}, {Name: "fail_timeout"},
		{Name: "resolve_interval"},
	}, Blocks: []hcl.BlockHeaderSchema{{Type: "health_check"}}}
	healthCheckSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
		{Name: "path", Required: true}, {Name: "interval"}, {Name: "timeout"},
	}}
	proxySchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
		{Name: "upstream", Required: true}, {Name: "rewrite_redirects"}, {Name: "upgrade"}, {Name: "idle_timeout"},
		{Name: "strip_prefix"}, {Name: "rewrite_prefix"},
	}}
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
	content, diags := b.Body.Content(upstreamSchema)
	d.add(diags)
	attrs := content.Attributes
	u := Upstream{
		Name: name, ConnectTimeout: defaultConnectTimeout, ResponseTimeout: defaultResponseTimeout,
		ReadTimeout: defaultReadTimeout, SendTimeout: defaultSendTimeout, MaxConnections: defaultMaxConnections,
		MaxFails: defaultMaxFails, FailTimeout: defaultFailTimeout, ResolveInterval: defaultResolveInterval,
	}
	what := "upstream " + name
	addrs, rngs := stringListAttr(d, attrs, "addresses", what+": addresses")
	for i, s := range addrs {
		a, err := ParseAddress(s)
		if err != nil {
			d.errorf(rngs[i], "Invalid value", "%s: addresses holds IP:port literals such as \"127.0.0.1:9000\", "+
				"host names with a port such as \"app.internal:9000\" or Unix socket paths such as \"unix:/run/app.sock\", got %q: %s.", what, s, err)
			continue
		}
		u.Addresses = append(u.Addresses, a)
	}
	if a, ok := attrs["addresses"]; ok && len(addrs) == 0 {
		d.errorf(a.Range, "Invalid value", "%s: addresses must name at least one address.", what)
	}
	durationAttr(d, attrs, "connect_timeout", what+": connect_timeout", 100*time.Millisecond, time.Minute, &u.ConnectTimeout)
	durationAttr(d, attrs, "response_timeout", what+": response_timeout", time.Second, time.Hour, &u.ResponseTimeout)
	durationAttr(d, attrs, "read_timeout", what+": read_timeout", time.Second, time.Hour, &u.ReadTimeout)
	durationAttr(d, attrs, "send_timeout", what+": send_timeout", time.Second, time.Hour, &u.SendTimeout)
	intAttr(d, attrs, "max_connections", what+": max_connections", 1, 65535, &u.MaxConnections)
	intAttr(d, attrs, "max_fails", what+": max_fails", 1, 100, &u.MaxFails)
	durationAttr(d, attrs, "fail_timeout", what+": fail_timeout", time.Second, time.Hour, &u.FailTimeout)
	durationAttr(d, attrs, "resolve_interval", what+": resolve_interval", 0, 24*time.Hour, &u.ResolveInterval)
	if u.ResolveInterval > 0 && u.ResolveInterval < time.Second {
		d.errorf(attrs["resolve_interval"].Expr.Range(), "Invalid value", "%s: resolve_interval is \"0s\" (only at start and reload) or between 1s and 24h, got %s.", what, formatDuration(u.ResolveInterval))
	}
	if blocks := content.Blocks.OfType("health_check"); len(blocks) > 0 {
		if len(blocks) > 1 {
			d.errorf(blocks[1].DefRange, "Duplicate health_check", "%s already has a health_check block at %s.", what, blocks[0].DefRange)
		}
		u.HealthCheck = d.healthCheck(blocks[0], what)
	}
	cfg.Upstreams = append(cfg.Upstreams, u)
}

func (d *decoder) healthCheck(b *hcl.Block, what string) *HealthCheck {
	attrs := d.attrs(b, healthCheckSchema)
	hc := &HealthCheck{Interval: defaultHealthInterval, Timeout: defaultHealthTimeout}
	path, rng, ok := stringAttr(d, attrs, "path", what+": health_check.path")
	if ok {
		// It becomes a request line: an origin-form path only.
		if !strings.HasPrefix(path, "/") || hasCTL(path) || strings.ContainsAny(path, " #") {
			d.errorf(rng, "Invalid value", "%s: health_check.path must be a URL path starting with \"/\", got %q.", what, path)
		}
		hc.Path = path
	}
	durationAttr(d, attrs, "interval", what+": health_check.interval", time.Second, time.Hour, &hc.Interval)
	durationAttr(d, attrs, "timeout", what+": health_check.timeout", 100*time.Millisecond, time.Minute, &hc.Timeout)
	return hc
}

func (d *decoder) proxy(b *hcl.Block, route string) *Proxy {
	attrs := d.attrs(b, proxySchema)
	name, _, ok := stringAttr(d, attrs, "upstream", route+": proxy.upstream")
	if !ok {
		return nil
	}
	d.proxies = append(d.proxies, proxyRef{name: name, rng: attrs["upstream"].Expr.Range(), route: route})
	p := &Proxy{Upstream: name, RewriteRedirects: true, IdleTimeout: DefaultUpgradeIdleTimeout}
	boolAttr(d, attrs, "rewrite_redirects", route+": proxy.rewrite_redirects", &p.RewriteRedirects)
	protocols, rngs := stringListAttr(d, attrs, "upgrade", route+": proxy.upgrade")
	for i, u := range protocols {
		if !isToken(u) {
			d.errorf(rngs[i], "Invalid value", "%s: proxy.upgrade names protocols such as \"websocket\", got %q.", route, u)
			continue
		}
		p.Upgrade = append(p.Upgrade, strings.ToLower(u))
	}
	durationAttr(d, attrs, "idle_timeout", route+": proxy.idle_timeout", time.Second, 24*time.Hour, &p.IdleTimeout)
	d.proxyRewrite(attrs, route, p)
	return p
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
// matching prefix (at a "/" boundary, as routes match), else "default" when
// defined, else nil (not limited). path is the normalised request path.
func (c *Config) RateClass(path string) *RateLimit {
	var best, def *RateLimit
	for i := range c.RateLimits {
		rl := &c.RateLimits[i]
		switch {
		case rl.Prefix == "":
			def = rl
		case pathHasPrefix(path, rl.Prefix) && (best == nil || len(rl.Prefix) > len(best.Prefix)):
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
	if d.host != nil && !d.checkEmbedded(route, name, rng) {
		return nil
	}
	return &Embedded{Name: name}
}

// pathHasPrefix reports whether path is prefix or continues it at a "/"
// boundary, as routes match: "/login" covers "/login/x", not "/loginx".
func pathHasPrefix(path, prefix string) bool {
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	return len(path) == len(prefix) || strings.HasSuffix(prefix, "/") || path[len(prefix)] == '/'
}
