package config

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// The file's shape (docs/DESIGN.md §8). HCL itself rejects any attribute or block not
// named here, with a "Did you mean" hint.
var (
	rootSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "trusted_proxies"},
			{Name: "ipv6_client_prefix_length"},
			{Name: "user"},
			{Name: "worker_user"},
			{Name: "rate_limit_entries"},
		},
		Blocks: []hcl.BlockHeaderSchema{
			{Type: "listener", LabelNames: []string{"name"}},
			{Type: "workers"},
			{Type: "limits"},
			{Type: "route", LabelNames: []string{"prefix"}},
			{Type: "admin"},
			{Type: "cors"},
			{Type: "upstream", LabelNames: []string{"name"}},
			{Type: "rate_limit", LabelNames: []string{"name"}},
			{Type: "sandbox"},
			{Type: "log"},
			{Type: "streams"},
			{Type: "error_page"},
			{Type: "cluster"},
		},
	}
	streamsSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "max"}, {Name: "per_client"}},
	}
	listenerSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "address", Required: true}, {Name: "proxy_protocol"}, {Name: "https_redirect"}},
		Blocks:     listenerBlocks,
	}
	workersSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "count"}, {Name: "concurrency"}, {Name: "max_rounds_per_worker"}, {Name: "hot_window"}, {Name: "tls_max_idle_sessions"}, {Name: "max_kept_connections"}, {Name: "threads"}},
	}
	limitsSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "first_byte_timeout"},
			{Name: "keep_alive_idle_timeout"},
			{Name: "keep_alive_max_connections"},
			{Name: "max_connections_per_client"},
			{Name: "max_queued_connections"},
			{Name: "max_body_bytes"},
			{Name: "no_worker_timeout"},
			{Name: "write_timeout"},
			{Name: "shutdown_grace"},
			{Name: "upgrade_grace"},
			{Name: "ipc_max_in_flight_requests"},
			{Name: "body_buffer_bytes"},
			{Name: "body_buffer_connections"},
			{Name: "body_buffer_bytes_per_client"},
			{Name: "body_buffer_connections_per_client"},
			{Name: "death_penalty_threshold"},
			{Name: "death_penalty_duration"},
			{Name: "death_penalty_max_clients"},
		},
	}
	routeSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "max_body_bytes"}, {Name: "max_upload_bytes"}, {Name: "upload_token_sha256"}, {Name: "allow_trace"}, {Name: "request_buffering"}, {Name: "class"}, {Name: "hosts"},
			{Name: "hide_upstream_headers"}, {Name: "access"}, {Name: "slash_redirect"}},
		Blocks: []hcl.BlockHeaderSchema{{Type: "static"}, {Type: "respond"}, {Type: "proxy"}, {Type: "metrics"}, {Type: "embedded"},
			{Type: "redirect"}, {Type: "basic_auth"}, {Type: "compress"}, {Type: "headers"}, {Type: "request_headers"}, {Type: "error_page"}},
	}
	staticSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "root", Required: true},
			{Name: "index"},
			{Name: "listing"},
			{Name: "default_type"},
			{Name: "precompressed"},
			{Name: "max_ranges"},
			{Name: "fallback"},
		},
	}
	respondSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "status"},
			{Name: "body"},
			{Name: "content_type"},
		},
	}
	adminSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "socket"}},
	}
	sandboxSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "mode"}, {Name: "seccomp_action"}, {Name: "chroot"}},
	}
	logSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "format"}, {Name: "level"}, {Name: "access_log"}, {Name: "log_client_addresses"},
			{Name: "access_log_path"}, {Name: "access_log_format"}, {Name: "access_log_buffer"}, {Name: "access_log_flush"},
			{Name: "access_log_query"}},
	}
)

// maxSocketPath is the longest admin socket path accepted: sun_path is 104
// bytes on OpenBSD (108 on Linux), including the terminating NUL.
const maxSocketPath = 103

func (d *decoder) root(body hcl.Body, cfg *Config) {
	content, diags := body.Content(rootSchema)
	d.add(diags)

	intAttr(d, content.Attributes, "ipv6_client_prefix_length", "ipv6_client_prefix_length", 1, 128, &cfg.IPv6ClientPrefixLength)
	d.trustedProxies(content.Attributes, cfg)
	userRange := body.MissingItemRange()
	userOK := true
	if s, rng, ok := stringAttr(d, content.Attributes, "user", "user"); ok {
		userRange = rng
		if s == "" || strings.ContainsAny(s, " :/") || hasCTL(s) {
			d.errorf(rng, "Invalid value", "user must be an account name, got %q.", s)
			userOK = false
		} else {
			cfg.User = s
		}
	}
	if s, rng, ok := stringAttr(d, content.Attributes, "worker_user", "worker_user"); ok {
		userRange = rng
		if !validWorkerUser(s) {
			d.errorf(rng, "Invalid value", "worker_user must be an account name or UID:GID, got %q.", s)
			userOK = false
		} else {
			cfg.WorkerUser = s
		}
	}
	if d.host != nil && userOK {
		d.checkUser(cfg.User, cfg.WorkerUser, userRange)
	}

	blocks := content.Blocks.ByType()
	names, addrs := map[string]hcl.Range{}, map[netip.AddrPort]string{}
	for _, b := range blocks["listener"] {
		d.listener(b, cfg, names, addrs)
	}
	d.resolveRedirects(cfg)
	if len(blocks["listener"]) == 0 {
		d.errorf(body.MissingItemRange(), "Missing listener block",
			`At least one listener block is required, such as: listener "http" { address = "127.0.0.1:8080" }.`)
	}
	if b := d.single(blocks, "workers"); b != nil {
		d.workers(b, &cfg.Workers)
	}
	if b := d.single(blocks, "streams"); b != nil {
		attrs := d.attrs(b, streamsSchema)
		intAttr(d, attrs, "max", "streams.max", 1, 1_000_000, &cfg.Streams.Max)
		intAttr(d, attrs, "per_client", "streams.per_client", 1, 65535, &cfg.Streams.PerClient)
	}
	if b := d.single(blocks, "limits"); b != nil {
		d.limits(b, &cfg.Limits)
	}
	routeKeys := map[routeKey]hcl.Range{}
	for _, b := range blocks["route"] {
		d.route(b, cfg, routeKeys)
	}
	if len(blocks["route"]) == 0 {
		d.errorf(body.MissingItemRange(), "Missing route block",
			`At least one route block is required, such as: route "/" { static { root = "www" } }.`)
	}
	cfg.ErrorPages = d.errorPages(content.Blocks, "", cfg.BaseDir)
	d.placeErrorPages(cfg)
	upstreams := map[string]hcl.Range{}
	for _, b := range blocks["upstream"] {
		d.upstream(b, cfg, upstreams)
	}
	d.checkProxies(cfg)
	classes, classPrefixes := map[string]hcl.Range{}, map[string]string{}
	for _, b := range blocks["rate_limit"] {
		d.rateLimit(b, cfg, classes, classPrefixes)
	}
	d.checkAuths(cfg)
	intAttr(d, content.Attributes, "rate_limit_entries", "rate_limit_entries", 1, 10000000, &cfg.RateLimitEntries)
	if b := d.single(blocks, "cors"); b != nil {
		cfg.CORS = d.cors(b)
	}
	if b := d.single(blocks, "cluster"); b != nil {
		cfg.Cluster = d.cluster(b, cfg.BaseDir)
	}
	if b := d.single(blocks, "admin"); b != nil {
		d.admin(b, &cfg.Admin, cfg.BaseDir)
	}
	if b := d.single(blocks, "sandbox"); b != nil {
		attrs := d.attrs(b, sandboxSchema)
		enumAttr(d, attrs, "mode", "sandbox.mode", []string{"strict", "best-effort"}, &cfg.Sandbox.Mode)
		enumAttr(d, attrs, "seccomp_action", "sandbox.seccomp_action", []string{"kill", "log"}, &cfg.Sandbox.SeccompAction)
		// A filter that only logs enforces nothing: strict mode, which
		// promises every layer, refuses it rather than report it applied.
		if a, ok := attrs["seccomp_action"]; ok && cfg.Sandbox.SeccompAction == "log" && cfg.Sandbox.Mode == "strict" {
			d.errorf(a.Expr.Range(), "Invalid value", `sandbox.seccomp_action = "log" enforces nothing and is refused in strict mode; set sandbox { mode = "best-effort" } to diagnose the allow-list.`)
		}
		if dir, rng, ok := stringAttr(d, attrs, "chroot", "sandbox.chroot"); ok {
			if dir == "" || strings.ContainsRune(dir, 0) {
				d.errorf(rng, "Invalid value", "sandbox.chroot must be a directory path, got %q.", dir)
			} else {
				cfg.Sandbox.Chroot = resolve(cfg.BaseDir, dir)
				if d.host != nil {
					d.checkChroot(cfg.Sandbox.Chroot, rng)
				}
			}
		}
	}
	if b := d.single(blocks, "log"); b != nil {
		attrs := d.attrs(b, logSchema)
		enumAttr(d, attrs, "format", "log.format", []string{"text", "json"}, &cfg.Log.Format)
		enumAttr(d, attrs, "level", "log.level", []string{"trace", "debug", "info", "warn", "error"}, &cfg.Log.Level)
		boolAttr(d, attrs, "access_log", "log.access_log", &cfg.Log.AccessLog)
		boolAttr(d, attrs, "log_client_addresses", "log.log_client_addresses", &cfg.Log.ClientAddresses)
		if p, rng, ok := stringAttr(d, attrs, "access_log_path", "log.access_log_path"); ok {
			if strings.ContainsRune(p, 0) {
				d.errorf(rng, "Invalid value", "log.access_log_path must be a file path or \"\" (standard error), got %q.", p)
			} else if p != "" {
				cfg.Log.AccessLogPath = resolve(cfg.BaseDir, p)
			}
		}
		enumAttr(d, attrs, "access_log_format", "log.access_log_format", []string{"json", "combined", "vhost_combined"}, &cfg.Log.AccessLogFormat)
		boolAttr(d, attrs, "access_log_query", "log.access_log_query", &cfg.Log.AccessLogQuery)
		intAttr(d, attrs, "access_log_buffer", "log.access_log_buffer", 0, 1<<20, &cfg.Log.AccessLogBuffer)
		durationAttr(d, attrs, "access_log_flush", "log.access_log_flush", 10*time.Millisecond, time.Minute, &cfg.Log.AccessLogFlush)
	}
}

// single returns the one block of type typ, or nil if there is none. Every
// further block of that type is an error.
func (d *decoder) single(blocks map[string]hcl.Blocks, typ string) *hcl.Block {
	bs := blocks[typ]
	if len(bs) == 0 {
		return nil
	}
	for _, b := range bs[1:] {
		d.errorf(b.DefRange, "Duplicate "+typ+" block",
			"Only one %s block is allowed; the first is at %s.", typ, bs[0].DefRange)
	}
	return bs[0]
}

// attrs returns the attributes of b's body, checked against schema.
func (d *decoder) attrs(b *hcl.Block, schema *hcl.BodySchema) hcl.Attributes {
	content, diags := b.Body.Content(schema)
	d.add(diags)
	return content.Attributes
}

func (d *decoder) trustedProxies(attrs hcl.Attributes, cfg *Config) {
	ss, rngs := stringListAttr(d, attrs, "trusted_proxies", "trusted_proxies")
	for i, s := range ss {
		p, err := parsePrefix(s)
		if err != nil {
			d.errorf(rngs[i], "Invalid value", "trusted_proxies: %s.", err)
			continue
		}
		cfg.TrustedProxies = append(cfg.TrustedProxies, p)
	}
}

// parsePrefix parses a CIDR prefix or a bare address, which stands for the
// single-address prefix (/32 or /128). Host bits are masked off, so
// "10.1.2.3/8" is 10.0.0.0/8.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "%") {
		return netip.Prefix{}, fmt.Errorf("%q has a zone; write the address without it", s)
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR prefix such as \"10.0.0.0/8\"", s)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR prefix such as \"10.0.0.0/8\"", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// listener decodes one listener block. names and addrs hold the names and
// addresses of earlier listener blocks, valid or not, and where they are.
func (d *decoder) listener(b *hcl.Block, cfg *Config, names map[string]hcl.Range, addrs map[netip.AddrPort]string) {
	name := b.Labels[0]
	ok := true
	if name == "" || hasCTL(name) {
		d.errorf(b.LabelRanges[0], "Invalid listener name", "A listener name must be non-empty and printable, got %q.", name)
		ok = false
	}
	if first, dup := names[name]; dup {
		d.errorf(b.LabelRanges[0], "Duplicate listener name", "A listener named %q is already defined at %s.", name, first)
		ok = false
	} else {
		names[name] = b.DefRange
	}
	content, diags := b.Body.Content(listenerSchema)
	d.add(diags)
	attrs := content.Attributes
	qname := fmt.Sprintf("listener %q: address", name)
	s, rng, found := stringAttr(d, attrs, "address", qname)
	if !found {
		return
	}
	ap, err := parseAddrPort(s)
	if err != nil {
		d.errorf(rng, "Invalid listener address", "%s: %s.", qname, err)
		return
	}
	// Port 0 asks the kernel for a free port, so two such listeners on one
	// address do not collide.
	if other, dup := addrs[ap]; dup && ap.Port() != 0 {
		d.errorf(rng, "Duplicate listener address", "%s: listener %q already listens on %s.", qname, other, ap)
		return
	}
	addrs[ap] = name
	var proxy bool
	boolAttr(d, attrs, "proxy_protocol", fmt.Sprintf("listener %q: proxy_protocol", name), &proxy)
	var tls *TLS
	for i, tb := range content.Blocks.OfType("tls") {
		if i > 0 {
			d.errorf(tb.DefRange, "Duplicate tls block", "listener %q has more than one tls block.", name)
			ok = false
			continue
		}
		if tls = d.tls(tb, name, cfg.BaseDir); tls == nil {
			ok = false
		}
	}
	l := Listener{Name: name, Address: ap, ProxyProtocol: proxy, TLS: tls, Headers: d.headerBlocks(content.Blocks, fmt.Sprintf("listener %q", name))}
	if d.listenerHTTP(content, &l) && ok {
		cfg.Listeners = append(cfg.Listeners, l)
	}
}

// parseAddrPort parses "IP:PORT" or "[IPv6]:PORT". Host names are refused:
// the supervisor binds before it could sensibly resolve them.
func parseAddrPort(s string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(s)
	if err == nil {
		return ap, nil
	}
	host, _, serr := net.SplitHostPort(s)
	switch {
	case serr != nil:
		return netip.AddrPort{}, fmt.Errorf("%q is not IP:PORT, such as \"127.0.0.1:8080\" or \"[::1]:8080\"", s)
	case host == "":
		return netip.AddrPort{}, fmt.Errorf("%q has no IP address; write \"0.0.0.0:PORT\" or \"[::]:PORT\" to listen on every address", s)
	}
	if _, aerr := netip.ParseAddr(host); aerr != nil {
		return netip.AddrPort{}, fmt.Errorf("%q: an IP literal is required, not the host name %q; write \"127.0.0.1:PORT\" or \"[::1]:PORT\"", s, host)
	}
	return netip.AddrPort{}, fmt.Errorf("%q has an invalid port; use 0..65535", s)
}

func (d *decoder) workers(b *hcl.Block, w *Workers) {
	attrs := d.attrs(b, workersSchema)
	intAttr(d, attrs, "count", "workers.count", 1, 256, &w.Count)
	intAttr(d, attrs, "concurrency", "workers.concurrency", 1, 1024, &w.Concurrency)
	intAttr(d, attrs, "max_rounds_per_worker", "workers.max_rounds_per_worker", 0, 1<<40, &w.MaxRoundsPerWorker)
	durationAttr(d, attrs, "hot_window", "workers.hot_window", 0, 10*time.Second, &w.HotWindow)
	intAttr(d, attrs, "tls_max_idle_sessions", "workers.tls_max_idle_sessions", 1, 3072, &w.TLSMaxIdleSessions)
	intAttr(d, attrs, "max_kept_connections", "workers.max_kept_connections", 0, 1024, &w.MaxKeptConnections)
	intAttr(d, attrs, "threads", "workers.threads", 0, 256, &w.Threads)
	// Every kept connection and every one in flight holds a descriptor,
	// under the worker's RLIMIT_NOFILE (4096), with room for the channel,
	// the access log and upstream connections.
	if n := w.TLSMaxIdleSessions + w.MaxKeptConnections + w.Concurrency; n > workerDescriptors {
		d.errorf(b.DefRange, "Invalid value", "workers.tls_max_idle_sessions + workers.max_kept_connections + workers.concurrency is %d, over the %d descriptors a worker may use for them.", n, workerDescriptors)
	}
}

// workerDescriptors is how many of a worker's 4096 descriptors its client
// connections (kept and in flight) may use.
const workerDescriptors = 4096 - 64

func (d *decoder) limits(b *hcl.Block, l *Limits) {
	attrs := d.attrs(b, limitsSchema)
	durationAttr(d, attrs, "first_byte_timeout", "limits.first_byte_timeout", time.Second, 60*time.Second, &l.FirstByteTimeout)
	durationAttr(d, attrs, "keep_alive_idle_timeout", "limits.keep_alive_idle_timeout", time.Second, 300*time.Second, &l.KeepAliveIdleTimeout)
	intAttr(d, attrs, "keep_alive_max_connections", "limits.keep_alive_max_connections", 1, 1_000_000, &l.KeepAliveMaxConnections)
	intAttr(d, attrs, "max_connections_per_client", "limits.max_connections_per_client", 1, 65535, &l.MaxConnectionsPerClient)
	intAttr(d, attrs, "max_queued_connections", "limits.max_queued_connections", 0, 1_000_000, &l.MaxQueuedConnections)
	intAttr(d, attrs, "max_body_bytes", "limits.max_body_bytes", 0, 1<<40, &l.MaxBodyBytes)
	durationAttr(d, attrs, "no_worker_timeout", "limits.no_worker_timeout", time.Second, 60*time.Second, &l.NoWorkerTimeout)
	durationAttr(d, attrs, "write_timeout", "limits.write_timeout", time.Second, 600*time.Second, &l.WriteTimeout)
	durationAttr(d, attrs, "shutdown_grace", "limits.shutdown_grace", 0, 600*time.Second, &l.ShutdownGrace)
	durationAttr(d, attrs, "upgrade_grace", "limits.upgrade_grace", time.Second, 24*time.Hour, &l.UpgradeGrace)
	intAttr(d, attrs, "ipc_max_in_flight_requests", "limits.ipc_max_in_flight_requests", 1, 65536, &l.IPCMaxInFlightRequests)
	intAttr(d, attrs, "body_buffer_bytes", "limits.body_buffer_bytes", 1<<20, 1<<40, &l.BodyBufferBytes)
	intAttr(d, attrs, "body_buffer_connections", "limits.body_buffer_connections", 1, 1_000_000, &l.BodyBufferConnections)
	intAttr(d, attrs, "body_buffer_bytes_per_client", "limits.body_buffer_bytes_per_client", 1<<20, 1<<40, &l.BodyBufferBytesPerClient)
	intAttr(d, attrs, "body_buffer_connections_per_client", "limits.body_buffer_connections_per_client", 1, 65535, &l.BodyBufferConnectionsPerClient)
	intAttr(d, attrs, "death_penalty_threshold", "limits.death_penalty_threshold", 0, 1000, &l.DeathPenaltyThreshold)
	durationAttr(d, attrs, "death_penalty_duration", "limits.death_penalty_duration", time.Second, 24*time.Hour, &l.DeathPenaltyDuration)
	intAttr(d, attrs, "death_penalty_max_clients", "limits.death_penalty_max_clients", 1, 1_000_000, &l.DeathPenaltyMaxClients)
}

func (d *decoder) admin(b *hcl.Block, a *Admin, base string) {
	attrs := d.attrs(b, adminSchema)
	s, rng, ok := stringAttr(d, attrs, "socket", "admin.socket")
	if !ok {
		return
	}
	if s == "" || strings.ContainsRune(s, 0) {
		d.errorf(rng, "Invalid value", "admin.socket must be a file path, got %q; leave the admin block out for no admin socket.", s)
		return
	}
	p := resolve(base, s)
	if len(p) > maxSocketPath {
		d.errorf(rng, "Invalid value", "admin.socket %q is %d bytes long; a Unix socket path may be at most %d.", p, len(p), maxSocketPath)
		return
	}
	if d.host != nil {
		d.checkSocketDir(p, rng)
	}
	a.Socket = p
}

// validWorkerUser reports whether s is an account name or "UID:GID".
func validWorkerUser(s string) bool {
	if u, g, ok := strings.Cut(s, ":"); ok {
		_, err1 := strconv.ParseUint(u, 10, 31)
		_, err2 := strconv.ParseUint(g, 10, 31)
		return err1 == nil && err2 == nil
	}
	return s != "" && !strings.ContainsAny(s, " /") && !hasCTL(s)
}
