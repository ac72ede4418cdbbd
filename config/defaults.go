package config

import (
	_ "embed"
	"time"
)

// Defaults for every key the file may leave out (docs/DESIGN.md §7).
const (
	DefaultWorkerCount = 4
	// DefaultWorkerConcurrency makes the pool 64, an upstream's default
	// max_connections: enough slots that busy kept-alive connections from
	// many clients stay hot, and no more, so that a proxied route under the
	// defaults meets the upstream's cap (a 503 at once) no sooner than the
	// pool (a wait) (docs/DESIGN.md §7).
	DefaultWorkerConcurrency = 16
	// DefaultHotWindow outlasts a busy client's gap between a response and
	// its next request on a loaded machine, or over a network; a hot
	// connection gives its slot back the moment anyone waits, so a longer
	// window holds nobody up.
	DefaultHotWindow = 50 * time.Millisecond
	// DefaultTLSMaxIdleSessions leaves room under the worker's descriptor
	// limit (4096) for its connections in flight and upstream connections.
	DefaultTLSMaxIdleSessions      = 2048
	DefaultMaxKeptConnections      = 0
	DefaultFirstByteTimeout        = 5 * time.Second
	DefaultKeepAliveIdleTimeout    = 15 * time.Second
	DefaultKeepAliveMaxConnections = 10000
	DefaultMaxConnectionsPerClient = 256
	DefaultMaxQueuedConnections    = 1024
	DefaultMaxBodyBytes            = 1 << 20
	DefaultNoWorkerTimeout         = 5 * time.Second
	DefaultWriteTimeout            = 30 * time.Second
	DefaultShutdownGrace           = 10 * time.Second
	DefaultUpgradeGrace            = 60 * time.Second
	DefaultIPCMaxInFlightRequests  = 256
	// The body budget (docs/DESIGN.md §3.3).
	DefaultStreamsMax                     = 1024
	DefaultStreamsPerClient               = 16
	DefaultUpgradeIdleTimeout             = 60 * time.Second
	DefaultBodyBufferBytes                = 256 << 20
	DefaultBodyBufferConnections          = 1024
	DefaultBodyBufferBytesPerClient       = 32 << 20
	DefaultBodyBufferConnectionsPerClient = 64
	DefaultDeathPenaltyThreshold          = 3
	DefaultDeathPenaltyDuration           = 60 * time.Second
	DefaultDeathPenaltyMaxClients         = 10000
	DefaultIPv6ClientPrefixLength         = 64

	defaultIndex = "index.html"
	// DefaultStaticType is static.default_type's default, as nginx's.
	DefaultStaticType = "application/octet-stream"
	// DefaultMaxRanges is static.max_ranges's default.
	DefaultMaxRanges   = 16
	defaultStatus      = 200
	defaultContentType = "text/plain; charset=utf-8"
)

// defaultSource is the built-in configuration Default parses.
//
//go:embed default.hcl
var defaultSource []byte

// DefaultFilename is the Filename of the Config Default returns.
const DefaultFilename = "default.hcl"

// Default returns the built-in configuration: listener "http" on
// 127.0.0.1:8080, route "/" serving the static root "examples/www" and route
// "/healthz" answering 200 "ok\n". Relative paths resolve against the current
// working directory and the host checks apply, so run elsewhere than in the
// source tree it fails: its root does not exist there.
// Its Source holds the built-in text, so workers re-parse it like any file.
func Default() (*Config, error) {
	return Parse(defaultSource, DefaultFilename, ParseOptions{})
}

// defaults returns a Config holding the default of every key.
func defaults() Config {
	return Config{
		Workers: Workers{
			Count:       DefaultWorkerCount,
			Concurrency: DefaultWorkerConcurrency,
			HotWindow:   DefaultHotWindow,

			TLSMaxIdleSessions: DefaultTLSMaxIdleSessions,
			MaxKeptConnections: DefaultMaxKeptConnections,
		},
		Limits: Limits{
			FirstByteTimeout:               DefaultFirstByteTimeout,
			KeepAliveIdleTimeout:           DefaultKeepAliveIdleTimeout,
			KeepAliveMaxConnections:        DefaultKeepAliveMaxConnections,
			MaxConnectionsPerClient:        DefaultMaxConnectionsPerClient,
			MaxQueuedConnections:           DefaultMaxQueuedConnections,
			MaxBodyBytes:                   DefaultMaxBodyBytes,
			NoWorkerTimeout:                DefaultNoWorkerTimeout,
			WriteTimeout:                   DefaultWriteTimeout,
			ShutdownGrace:                  DefaultShutdownGrace,
			UpgradeGrace:                   DefaultUpgradeGrace,
			IPCMaxInFlightRequests:         DefaultIPCMaxInFlightRequests,
			BodyBufferBytes:                DefaultBodyBufferBytes,
			BodyBufferConnections:          DefaultBodyBufferConnections,
			BodyBufferBytesPerClient:       DefaultBodyBufferBytesPerClient,
			BodyBufferConnectionsPerClient: DefaultBodyBufferConnectionsPerClient,
			DeathPenaltyThreshold:          DefaultDeathPenaltyThreshold,
			DeathPenaltyDuration:           DefaultDeathPenaltyDuration,
			DeathPenaltyMaxClients:         DefaultDeathPenaltyMaxClients,
		},
		Sandbox: Sandbox{Mode: "strict", SeccompAction: "kill"},
		Log: Log{Format: "text", Level: "info", AccessLog: true, ClientAddresses: true,
			AccessLogFormat: "json", AccessLogBuffer: 64 << 10, AccessLogFlush: time.Second},
		Streams:                Streams{Max: DefaultStreamsMax, PerClient: DefaultStreamsPerClient},
		IPv6ClientPrefixLength: DefaultIPv6ClientPrefixLength,
		RateLimitEntries:       DefaultRateLimitEntries,
	}
}
