// Package config loads and validates gatehouse's HCL configuration file.
//
// Every key has a documented default and range (docs/DESIGN.md §7). Load never writes
// defaults into a value the caller passed in; it returns a fresh Config whose
// fields all hold their effective values. An unknown key, a value of the wrong
// type or a value out of range is an error naming the file and line.
package config

import (
	"net/netip"
	"time"
)

// Config is one parsed, validated configuration file with every default filled.
type Config struct {
	// Source is the file's text and Filename its name, kept so that the
	// supervisor can hand the exact same file to its workers in Hello.
	Source   []byte
	Filename string
	// BaseDir is the absolute directory that relative paths in the file
	// (static roots, the admin socket) were resolved against. A worker that
	// re-parses Source passes it back in ParseOptions so both sides agree.
	BaseDir string

	Listeners      []Listener
	Workers        Workers
	Limits         Limits
	TrustedProxies []netip.Prefix
	Routes         []Route
	Admin          Admin
	Sandbox        Sandbox
	Log            Log
	// IPv6ClientPrefixLength groups IPv6 clients by this prefix (1..128, default 64).
	IPv6ClientPrefixLength int
	// User is the account the supervisor runs as once its listeners are
	// bound, when started as root. Unset: the "gatehouse" account where one
	// exists, else "nobody" (logged loudly).
	User string
	// WorkerUser is the account workers run as ("NAME" or "UID:GID"),
	// never the supervisor's. Unset: the "gatehouse-worker" account where
	// one exists, else the first uid:gid of the supervisor account's
	// subordinate ranges (/etc/subuid, /etc/subgid), else 65533:65533.
	WorkerUser string
	// CORS, when set, adds CORS headers to every response, transport errors
	// included.
	CORS *CORS
	// Upstreams are the servers proxy routes forward to.
	Upstreams []Upstream
	// RateLimits are the rate limit classes; none means no rate limiting.
	RateLimits []RateLimit
	// Streams is the budget of stream-class requests and upgraded
	// connections, which run outside the request pool (docs/DESIGN.md §10).
	Streams Streams
	// ErrorPages are the top-level error_page blocks: for every route
	// (a route's own win for their statuses) and for requests no route
	// matches.
	ErrorPages []ErrorPage
	// RateLimitEntries bounds the rate limiter's table of buckets
	// (1..10000000, default 100000); the least recently used is evicted.
	RateLimitEntries int
	// Cluster, when set, names the store several instances share ticket
	// keys, rate limits and penalties through (nil: all state in process).
	Cluster *Cluster
	// Warnings are the problems found that do not stop the file from
	// loading, such as an expired certificate, one
	// "file:line,col-col: warning: Summary; Detail" line each.
	Warnings []string
}

// Streams is the `streams` block: how many stream-class requests and
// upgraded connections may be open at once, in all and per client key.
type Streams struct {
	Max       int // 1..1000000, default 1024
	PerClient int // 1..65535, default 16
}

// CORS is the `cors` block.
type CORS struct {
	AllowOrigins     []string // origins, or "*"
	AllowMethods     []string // default GET, HEAD, POST
	AllowHeaders     []string
	ExposeHeaders    []string
	AllowCredentials bool          // never with a "*" origin
	MaxAge           time.Duration // preflight cache, 0s..24h, default 10m
}

// AllowsAnyOrigin reports whether the origins include "*".
func (c *CORS) AllowsAnyOrigin() bool {
	for _, o := range c.AllowOrigins {
		if o == "*" {
			return true
		}
	}
	return false
}

// Allows reports whether origin may read responses.
func (c *CORS) Allows(origin string) bool {
	for _, o := range c.AllowOrigins {
		if o == "*" || o == origin {
			return true
		}
	}
	return false
}

// Listener is one `listener "NAME" { address = "..." }` block.
type Listener struct {
	Name    string
	Address netip.AddrPort
	// ProxyProtocol makes the listener read a PROXY protocol header (v1
	// or v2) first on every connection, accepted only from
	// trusted_proxies, and key the client by its source address.
	ProxyProtocol bool
	// TLS, when set, makes it an HTTPS listener (docs/DESIGN.md §9).
	TLS *TLS
	// HSTS, only with TLS, adds Strict-Transport-Security to every
	// response on the listener.
	HSTS *HSTS
	// HTTPSRedirect, only without TLS, answers every request on the
	// listener with a redirect to https.
	HTTPSRedirect *HTTPSRedirect
	// Headers are the listener's response header rules, applied to every
	// response on it before the route's (`headers` blocks, in order).
	Headers []HeaderRules
}

// Workers is the `workers` block.
type Workers struct {
	Count       int // 1..256, default 4
	Concurrency int // 1..1024, default 16
	// HotWindow is how long a worker keeps a kept-alive connection after a
	// response, waiting for its next request, while no connection waits
	// for a slot (default 50 ms, 0 off).
	HotWindow time.Duration
	// MaxRoundsPerWorker recycles a worker after this many rounds; it is
	// replaced before it leaves (0..2^40, default 0: never).
	MaxRoundsPerWorker int64
	// TLSMaxIdleSessions caps the idle TLS connections one worker keeps
	// between requests (affinity); over it the oldest gets close_notify
	// (1..3072, default 2048: each holds a descriptor, under the worker's
	// limit of 4096).
	TLSMaxIdleSessions int
	// MaxKeptConnections caps the idle plain kept-alive connections whose
	// descriptor a worker keeps between rounds, so that their next request
	// comes back to it without one (affinity; 0..1024, default 0: off, as
	// it measured no faster). A worker at the cap closes its copy instead:
	// the supervisor's serves on.
	MaxKeptConnections int
	// Threads is how many threads run one worker's Go code at once
	// (its GOMAXPROCS; 0..256, default 0: the supervisor's CPUs shared
	// among the workers, at least one each).
	Threads int
}

// ThreadsFor is the worker's GOMAXPROCS when the supervisor may use cpus
// CPUs: Threads, or cpus shared among Count workers, at least one each. The
// workers then together run as many threads as there are CPUs, as nginx's
// single-threaded workers do, instead of each running one per CPU and
// waking one another's idle threads for every hand-off.
func (w Workers) ThreadsFor(cpus int) int {
	if w.Threads > 0 {
		return w.Threads
	}
	return max(1, cpus/w.Count)
}

// Pool is the number of connections that may be out at workers at once.
func (w Workers) Pool() int { return w.Count * w.Concurrency }

// Share is how many of the pool's slots one client key may hold: max(1, pool/4).
func (w Workers) Share() int { return max(1, w.Pool()/4) }

// Limits is the `limits` block.
type Limits struct {
	FirstByteTimeout        time.Duration // 1s..60s, default 5s
	KeepAliveIdleTimeout    time.Duration // 1s..300s, default 15s
	KeepAliveMaxConnections int           // 1..1000000, default 10000
	MaxConnectionsPerClient int           // 1..65535, default 256
	MaxQueuedConnections    int           // 0..1000000, default 1024; 0 disables
	MaxBodyBytes            int64         // 0..1<<40, default 1 MiB
	NoWorkerTimeout         time.Duration // 1s..60s, default 5s
	WriteTimeout            time.Duration // 1s..600s, default 30s
	ShutdownGrace           time.Duration // 0s..600s, default 10s
	// UpgradeGrace bounds how long the old supervisor of a binary upgrade
	// keeps what cannot move (streams, upgraded and TLS connections)
	// before it closes them and exits (docs/DESIGN.md §11): 1s..24h,
	// default 60s.
	UpgradeGrace time.Duration
	// IPCMaxInFlightRequests caps the requests one worker channel may have
	// outstanding at the supervisor (docs/DESIGN.md §7): 1..65536, default 256.
	IPCMaxInFlightRequests int
	// The body budget: request bodies being received outside the request
	// pool (docs/DESIGN.md §3.3), in bytes charged (Content-Length, or
	// max_body_bytes when chunked) and in connections, globally and per
	// client key.
	BodyBufferBytes                int64 // 1 MiB..1 TiB, default 256 MiB
	BodyBufferConnections          int   // 1..1000000, default 1024
	BodyBufferBytesPerClient       int64 // 1 MiB..1 TiB, default 32 MiB
	BodyBufferConnectionsPerClient int   // 1..65535, default 64
	// DeathPenaltyThreshold: a client key that had a connection at a dying
	// worker in this many deaths within a minute is refused for
	// DeathPenaltyDuration, like OpenSSH's PerSourcePenalties (0..1000,
	// default 3; 0 turns penalties off). Trusted proxies are exempt.
	DeathPenaltyThreshold int
	// DeathPenaltyDuration is how long a penalized client key is refused
	// (1s..24h, default 60s).
	DeathPenaltyDuration time.Duration
	// DeathPenaltyMaxClients bounds the client keys the penalty box
	// remembers; the least recently struck is forgotten first
	// (1..1000000, default 10000).
	DeathPenaltyMaxClients int
}

// Route is one `route "PREFIX" { ... }` block; exactly one handler (Static,
// Respond, Redirect, Proxy, Metrics, Embedded) is non-nil. Config.Routes
// keeps the order of the file.
type Route struct {
	Prefix string
	// Hosts limits the route to requests whose Host matches one of these
	// patterns, in canonical form (see ParseHostPattern); nil matches any
	// host (docs/DESIGN.md §3.6).
	Hosts    []string
	Static   *Static
	Respond  *Respond
	Proxy    *Proxy
	Metrics  *Metrics
	Embedded *Embedded
	// MaxBodyBytes is the route's own body cap, in place of
	// limits.max_body_bytes (0..1 TiB); nil: the global one. A body over it
	// gets 413.
	MaxBodyBytes *int64
	// MaxUploadBytes raises the body cap for requests whose head carries an
	// accepted bearer token (0: no raise).
	MaxUploadBytes int64
	// UploadTokenSHA256 are the SHA-256 hashes of the accepted bearer tokens.
	UploadTokenSHA256 [][32]byte
	// AllowTrace passes TRACE requests to the handler (default false: 405).
	AllowTrace bool
	// StreamBody is `request_buffering = false`: the request body is
	// streamed to the handler as it arrives, the request holding its pool
	// slot meanwhile. By default (false) a body up to max_body_bytes is
	// received before the request takes a pool slot.
	StreamBody bool
	// Stream is `class = "stream"`: the route's requests are long-lived
	// (SSE, long-poll, big downloads) and leave the request pool for the
	// stream budget (docs/DESIGN.md §10). Default "request": false.
	Stream bool
	// Compress compresses the route's responses on the fly; nil (the
	// default, as nginx's gzip off) compresses nothing.
	Compress *Compress
	// Redirect answers every request with a redirect.
	Redirect *Redirect
	// Access is the route's allow and deny list, evaluated in order on
	// the client's address; nil admits every address. A non-empty list
	// ends with a rule for every address ("allow all" or "deny all").
	Access []AccessRule
	// BasicAuth, when set, asks for a user and password from its htpasswd
	// file before the handler runs.
	BasicAuth *BasicAuth
	// SlashRedirect answers the prefix without its trailing "/" ("/app"
	// for "/app/") with 301 to the prefix, as nginx does for a location
	// ending in "/" (default false: such a request matches another route,
	// or gets 404).
	SlashRedirect bool
	// Headers are the route's response header rules, applied after the
	// listener's (`headers` blocks, in order).
	Headers []HeaderRules
	// RequestHeaders (proxy routes) changes the fields the upstream
	// receives; nil changes none.
	RequestHeaders *RequestHeaders
	// HideUpstreamHeaders (proxy routes) are removed from the upstream's
	// responses, canonical.
	HideUpstreamHeaders []string
	// ErrorPages are the route's error_page blocks, which win over the
	// top-level ones for their statuses.
	ErrorPages []ErrorPage
}

// Static serves files under Root.
type Static struct {
	// Root is absolute and clean: a relative root in the file is resolved
	// against Config.BaseDir.
	Root string
	// Index is the file served for a directory, default "index.html".
	Index string
	// Listing enables directory listings (default false).
	Listing bool
	// DefaultType is the Content-Type of a file whose extension is not in
	// the built-in table (default "application/octet-stream"); the type is
	// never guessed from the content.
	DefaultType string
	// Precompressed serves a file's "NAME.br" or "NAME.gz" sibling, with
	// Content-Encoding and Vary: Accept-Encoding, to a client that accepts
	// that coding (default true).
	Precompressed bool
	// MaxRanges caps the ranges of one Range request after overlapping and
	// nearby ranges are merged: over it the whole file is sent (0..1000,
	// default 16; 0 turns range requests off).
	MaxRanges int
	// Fallback is the file below Root, without its leading "/", served
	// with 200 for a path that names no file ("" for none: 404).
	Fallback string
}

// Respond answers every request with a fixed status and body.
type Respond struct {
	Status      int // 100..599 excluding 1xx: 200..599, default 200
	Body        string
	ContentType string // default "text/plain; charset=utf-8"
}

// Admin is the `admin` block.
type Admin struct {
	// Socket is the admin socket's path, absolute and clean; default ""
	// (no admin socket).
	Socket string
}

// Sandbox is the `sandbox` block.
type Sandbox struct {
	Mode string // "strict" (default) or "best-effort"
	// SeccompAction is "kill" (default) or "log": a diagnosis mode that logs
	// a disallowed system call (SECCOMP_RET_LOG) instead of killing. "log"
	// is refused in strict mode: it enforces nothing.
	SeccompAction string
	// Chroot is an empty directory to confine workers to; "" means a private
	// directory created and unlinked by each worker.
	Chroot string
}

// Log is the `log` block.
type Log struct {
	Format string // "text" (default) or "json"
	Level  string // "trace", "debug", "info" (default), "warn", "error"
	// AccessLog writes a line per request (default true).
	AccessLog bool
	// AccessLogPath is the file the access log is appended to; "" (the
	// default) is the supervisor's standard error. The supervisor opens it
	// and reopens it on SIGUSR1 and on reload; workers write to it.
	AccessLogPath string
	// AccessLogFormat is "json" (default), "combined" or "vhost_combined"
	// (the request's host, then combined).
	AccessLogFormat string
	// AccessLogQuery logs the request's and the referer's query strings,
	// left out by default: they may hold tokens.
	AccessLogQuery bool
	// AccessLogBuffer is how many bytes of lines a worker gathers before it
	// writes them (default 64 KiB, 0 writes every line at once).
	AccessLogBuffer int
	// AccessLogFlush bounds how long a line waits in a worker's buffer
	// (default 1 s).
	AccessLogFlush time.Duration
	// ClientAddresses logs client keys whole; false masks them to /24
	// (IPv4) or /48 (IPv6). Default true.
	ClientAddresses bool
}
