package config

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// minimal is the smallest valid file: one listener and one route.
const minimal = `
listener "http" {
  address = "127.0.0.1:0"
}
route "/" {
  respond {}
}
`

// parse parses src as "file.hcl" against /base without touching the disk.
func parse(tb testing.TB, src string) (*Config, error) {
	tb.Helper()
	return Parse([]byte(src), "file.hcl", ParseOptions{BaseDir: "/base", SkipFSChecks: true})
}

// mustParse parses src and fails the test on error.
func mustParse(tb testing.TB, src string) *Config {
	tb.Helper()
	cfg, err := parse(tb, src)
	if err != nil {
		tb.Fatalf("Parse:\n%s\nerror:\n%v", src, err)
	}
	return cfg
}

// wantError checks that err is an *Error whose text holds every string in want.
func wantError(tb testing.TB, src string, err error, want ...string) {
	tb.Helper()
	if err == nil {
		tb.Fatalf("Parse:\n%s\nerror = nil, want one containing %q", src, want)
	}
	var e *Error
	if !errors.As(err, &e) {
		tb.Fatalf("Parse error is %T (%v), want *Error", err, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			tb.Errorf("Parse:\n%s\nerror:\n%v\nwant it to contain %q", src, err, w)
		}
	}
}

// TestDefaultPoolMatchesUpstreamCap: the default pool is an upstream's
// default max_connections (docs/DESIGN.md §7), so that under the defaults a
// proxied request is refused at the upstream's cap no sooner than it would
// wait for a pool slot.
func TestDefaultPoolMatchesUpstreamCap(t *testing.T) {
	if pool := DefaultWorkerCount * DefaultWorkerConcurrency; pool != defaultMaxConnections {
		t.Errorf("default pool %d, upstream max_connections default %d", pool, defaultMaxConnections)
	}
}

func TestDefaults(t *testing.T) {
	cfg := mustParse(t, minimal)
	// The values of docs/DESIGN.md §7, written out rather than taken from the
	// Default* constants so that a changed constant fails here.
	tests := []struct {
		name      string
		got, want any
	}{
		{"workers.count", cfg.Workers.Count, 4},
		{"workers.concurrency", cfg.Workers.Concurrency, 16},
		{"Workers.Share", cfg.Workers.Share(), 16},
		{"workers.hot_window", cfg.Workers.HotWindow, 50 * time.Millisecond},
		{"workers.threads", cfg.Workers.Threads, 0},
		{"first_byte_timeout", cfg.Limits.FirstByteTimeout, 5 * time.Second},
		{"keep_alive_idle_timeout", cfg.Limits.KeepAliveIdleTimeout, 15 * time.Second},
		{"keep_alive_max_connections", cfg.Limits.KeepAliveMaxConnections, 10000},
		{"max_connections_per_client", cfg.Limits.MaxConnectionsPerClient, 256},
		{"max_queued_connections", cfg.Limits.MaxQueuedConnections, 1024},
		{"max_body_bytes", cfg.Limits.MaxBodyBytes, int64(1 << 20)},
		{"no_worker_timeout", cfg.Limits.NoWorkerTimeout, 5 * time.Second},
		{"write_timeout", cfg.Limits.WriteTimeout, 30 * time.Second},
		{"shutdown_grace", cfg.Limits.ShutdownGrace, 10 * time.Second},
		{"upgrade_grace", cfg.Limits.UpgradeGrace, 60 * time.Second},
		{"ipc_max_in_flight_requests", cfg.Limits.IPCMaxInFlightRequests, 256},
		{"body_buffer_bytes", cfg.Limits.BodyBufferBytes, int64(256 << 20)},
		{"body_buffer_connections", cfg.Limits.BodyBufferConnections, 1024},
		{"body_buffer_bytes_per_client", cfg.Limits.BodyBufferBytesPerClient, int64(32 << 20)},
		{"body_buffer_connections_per_client", cfg.Limits.BodyBufferConnectionsPerClient, 64},
		{"route request_buffering", cfg.Routes[0].StreamBody, false},
		{"death_penalty_threshold", cfg.Limits.DeathPenaltyThreshold, 3},
		{"death_penalty_duration", cfg.Limits.DeathPenaltyDuration, 60 * time.Second},
		{"death_penalty_max_clients", cfg.Limits.DeathPenaltyMaxClients, 10000},
		{"ipv6_client_prefix_length", cfg.IPv6ClientPrefixLength, 64},
		{"trusted_proxies", len(cfg.TrustedProxies), 0},
		{"user", cfg.User, ""},
		{"admin.socket", cfg.Admin.Socket, ""},
		{"sandbox.mode", cfg.Sandbox.Mode, "strict"},
		{"log.format", cfg.Log.Format, "text"},
		{"log.level", cfg.Log.Level, "info"},
		{"respond.status", cfg.Routes[0].Respond.Status, 200},
		{"respond.body", cfg.Routes[0].Respond.Body, ""},
		{"respond.content_type", cfg.Routes[0].Respond.ContentType, "text/plain; charset=utf-8"},
		{"Filename", cfg.Filename, "file.hcl"},
		{"BaseDir", cfg.BaseDir, "/base"},
		{"Source", string(cfg.Source), minimal},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %v, want %v", tt.name, tt.got, tt.want)
		}
	}

	cfg = mustParse(t, minimal+`route "/s" {
  static {
    root = "www"
  }
}`)
	if got, want := *cfg.Routes[1].Static, (Static{Root: "/base/www", Index: "index.html", DefaultType: "application/octet-stream", Precompressed: true, MaxRanges: 16}); got != want {
		t.Errorf("static = %+v, want %+v", got, want)
	}
}

// TestRanges checks both edges of every numeric and duration key, and one
// step beyond each.
func TestRanges(t *testing.T) {
	type key struct {
		src    string // %s is the value; the key is on line 2
		lo, hi any    // int64 or time.Duration
		get    func(*Config) any
	}
	limit := func(k string) string { return "limits {\n  " + k + " = %s\n}\n" + minimal }
	keys := map[string]key{
		"workers.count":       {"workers {\n  count = %s\n}\n" + minimal, int64(1), int64(256), func(c *Config) any { return int64(c.Workers.Count) }},
		"workers.concurrency": {"workers {\n  concurrency = %s\n}\n" + minimal, int64(1), int64(1024), func(c *Config) any { return int64(c.Workers.Concurrency) }},
		"first_byte_timeout":  {limit("first_byte_timeout"), time.Second, 60 * time.Second, func(c *Config) any { return c.Limits.FirstByteTimeout }},
		"keep_alive_idle_timeout": {limit("keep_alive_idle_timeout"), time.Second, 300 * time.Second,
			func(c *Config) any { return c.Limits.KeepAliveIdleTimeout }},
		"keep_alive_max_connections": {limit("keep_alive_max_connections"), int64(1), int64(1000000),
			func(c *Config) any { return int64(c.Limits.KeepAliveMaxConnections) }},
		"max_connections_per_client": {limit("max_connections_per_client"), int64(1), int64(65535),
			func(c *Config) any { return int64(c.Limits.MaxConnectionsPerClient) }},
		"max_queued_connections": {limit("max_queued_connections"), int64(0), int64(1000000),
			func(c *Config) any { return int64(c.Limits.MaxQueuedConnections) }},
		"max_body_bytes":    {limit("max_body_bytes"), int64(0), int64(1 << 40), func(c *Config) any { return c.Limits.MaxBodyBytes }},
		"no_worker_timeout": {limit("no_worker_timeout"), time.Second, 60 * time.Second, func(c *Config) any { return c.Limits.NoWorkerTimeout }},
		"write_timeout":     {limit("write_timeout"), time.Second, 600 * time.Second, func(c *Config) any { return c.Limits.WriteTimeout }},
		"shutdown_grace":    {limit("shutdown_grace"), time.Duration(0), 600 * time.Second, func(c *Config) any { return c.Limits.ShutdownGrace }},
		"upgrade_grace":     {limit("upgrade_grace"), time.Second, 24 * time.Hour, func(c *Config) any { return c.Limits.UpgradeGrace }},
		"ipc_max_in_flight_requests": {limit("ipc_max_in_flight_requests"), int64(1), int64(65536),
			func(c *Config) any { return int64(c.Limits.IPCMaxInFlightRequests) }},
		"death_penalty_threshold": {limit("death_penalty_threshold"), int64(0), int64(1000),
			func(c *Config) any { return int64(c.Limits.DeathPenaltyThreshold) }},
		"death_penalty_duration": {limit("death_penalty_duration"), time.Second, 24 * time.Hour,
			func(c *Config) any { return c.Limits.DeathPenaltyDuration }},
		"death_penalty_max_clients": {limit("death_penalty_max_clients"), int64(1), int64(1000000),
			func(c *Config) any { return int64(c.Limits.DeathPenaltyMaxClients) }},
		"workers.hot_window": {"workers {\n  hot_window = %s\n}\n" + minimal, time.Duration(0), 10 * time.Second,
			func(c *Config) any { return c.Workers.HotWindow }},
		"workers.tls_max_idle_sessions": {"workers {\n  tls_max_idle_sessions = %s\n}\n" + minimal, int64(1), int64(3072),
			func(c *Config) any { return int64(c.Workers.TLSMaxIdleSessions) }},
		"workers.max_kept_connections": {"workers {\n  max_kept_connections = %s\n}\n" + minimal, int64(0), int64(1024),
			func(c *Config) any { return int64(c.Workers.MaxKeptConnections) }},
		"workers.threads": {"workers {\n  threads = %s\n}\n" + minimal, int64(0), int64(256),
			func(c *Config) any { return int64(c.Workers.Threads) }},
		"access_log_buffer": {"log {\n  access_log_buffer = %s\n}\n" + minimal, int64(0), int64(1 << 20),
			func(c *Config) any { return int64(c.Log.AccessLogBuffer) }},
		"access_log_flush": {"log {\n  access_log_flush = %s\n}\n" + minimal, 10 * time.Millisecond, time.Minute,
			func(c *Config) any { return c.Log.AccessLogFlush }},
		"body_buffer_bytes": {limit("body_buffer_bytes"), int64(1 << 20), int64(1 << 40),
			func(c *Config) any { return c.Limits.BodyBufferBytes }},
		"body_buffer_connections": {limit("body_buffer_connections"), int64(1), int64(1000000),
			func(c *Config) any { return int64(c.Limits.BodyBufferConnections) }},
		"body_buffer_bytes_per_client": {limit("body_buffer_bytes_per_client"), int64(1 << 20), int64(1 << 40),
			func(c *Config) any { return c.Limits.BodyBufferBytesPerClient }},
		"body_buffer_connections_per_client": {limit("body_buffer_connections_per_client"), int64(1), int64(65535),
			func(c *Config) any { return int64(c.Limits.BodyBufferConnectionsPerClient) }},
		"ipv6_client_prefix_length": {"\nipv6_client_prefix_length = %s\n" + minimal, int64(1), int64(128),
			func(c *Config) any { return int64(c.IPv6ClientPrefixLength) }},
		"respond.status": {"listener \"a\" {\n  address = \"[::1]:80\"\n}\nroute \"/\" {\n  respond {\n    status = %s\n  }\n}\n", int64(200), int64(599),
			func(c *Config) any { return int64(c.Routes[0].Respond.Status) }},
		"static.max_ranges": {"listener \"a\" {\n  address = \"[::1]:80\"\n}\nroute \"/\" {\n  static {\n    root = \"/\"\n    max_ranges = %s\n  }\n}\n", int64(0), int64(1000),
			func(c *Config) any { return int64(c.Routes[0].Static.MaxRanges) }},
	}
	literal := func(v any) string {
		if d, ok := v.(time.Duration); ok {
			return fmt.Sprintf("%q", d)
		}
		return fmt.Sprint(v)
	}
	step := func(v any, by int64) any {
		if d, ok := v.(time.Duration); ok {
			return d + time.Duration(by)
		}
		return v.(int64) + by
	}
	for name, k := range keys {
		line := 2
		switch name {
		case "respond.status":
			line = 6
		case "static.max_ranges":
			line = 7
		}
		for _, v := range []any{k.lo, k.hi} {
			src := fmt.Sprintf(k.src, literal(v))
			cfg, err := parse(t, src)
			if err != nil {
				t.Errorf("%s = %s: %v", name, literal(v), err)
				continue
			}
			if got := k.get(cfg); got != v {
				t.Errorf("%s = %s: got %v, want %v", name, literal(v), got, v)
			}
		}
		for _, v := range []any{step(k.lo, -1), step(k.hi, +1)} {
			src := fmt.Sprintf(k.src, literal(v))
			_, err := parse(t, src)
			wantError(t, src, err, fmt.Sprintf("file.hcl:%d,", line), "Invalid value", "must be between")
		}
	}
}

func TestUnknownKey(t *testing.T) {
	tests := []struct {
		src  string
		want []string
	}{
		{"limits {\n  idel_timeout = \"5s\"\n}\n" + minimal,
			[]string{`file.hcl:2,3-15: Unsupported argument; An argument named "idel_timeout" is not expected here.`}},
		{"limits {\n  keep_alive_idel_timeout = \"5s\"\n}\n" + minimal,
			[]string{`file.hcl:2,3-26: Unsupported argument`, `Did you mean "keep_alive_idle_timeout"?`}},
		{"worker {\n  count = 2\n}\n" + minimal,
			[]string{`file.hcl:1,1-7: Unsupported block type`, `Did you mean "workers"?`}},
		{"\ntrusted_proxys = []\n" + minimal,
			[]string{`file.hcl:2,1-15: Unsupported argument`, `Did you mean "trusted_proxies"?`}},
		{minimal + "route \"/x\" {\n  static {\n    root = \"/\"\n    listin = true\n  }\n}\n",
			[]string{`file.hcl:11,5-11: Unsupported argument`, `Did you mean "listing"?`}},
	}
	for _, tt := range tests {
		_, err := parse(t, tt.src)
		wantError(t, tt.src, err, tt.want...)
	}
}

func TestWrongType(t *testing.T) {
	tests := []struct {
		src  string
		want string
	}{
		{"workers {\n  count = \"4\"\n}\n" + minimal, `file.hcl:2,11-14: Incorrect attribute value type; workers.count must be a whole number, got string.`},
		{"limits {\n  write_timeout = 30\n}\n" + minimal, `file.hcl:2,19-21: Incorrect attribute value type; limits.write_timeout must be a string, got number.`},
		{"limits {\n  first_byte_timeout = \"5\"\n}\n" + minimal, `file.hcl:2,24-27: Invalid duration`},
		{"workers {\n  count = 2.5\n}\n" + minimal, `file.hcl:2,11-14: Invalid value; workers.count must be a whole number, got 2.5.`},
		{"workers {\n  count = null\n}\n" + minimal, `file.hcl:2,11-15: Invalid value; workers.count must be a whole number, not null.`},
		{"workers {\n  count = local.n\n}\n" + minimal, `file.hcl:2,11-16: Variables not allowed`},
		{"workers {\n  count = max(1, 2)\n}\n" + minimal, `file.hcl:2,11-20: Function calls not allowed`},
		{"\ntrusted_proxies = \"10.0.0.0/8\"\n" + minimal, `file.hcl:2,19-31: Incorrect attribute value type; trusted_proxies must be a list of strings, got string.`},
		{"\nuser = 0\n" + minimal, `file.hcl:2,8-9: Incorrect attribute value type; user must be a string, got number.`},
		{"listener \"a\" {\n  address = 8080\n}\n" + minimal, `file.hcl:2,13-17: Incorrect attribute value type`},
		{minimal + "route \"/x\" {\n  static {\n    root = \"/\"\n    listing = \"yes\"\n  }\n}\n", `file.hcl:11,15-20: Incorrect attribute value type; route "/x": static.listing must be true or false, got string.`},
		{minimal + "route \"/x\" {\n  respond {\n    body = 1\n  }\n}\n", `file.hcl:10,12-13: Incorrect attribute value type`},
		{minimal + "route \"/x\" {\n  respond {\n    status = 204\n    body = \"x\"\n  }\n}\n", `file.hcl:11,12-15: Invalid value; route "/x": respond.status 204 never carries a body; remove respond.body.`},
		{minimal + "route \"/x\" {\n  respond {\n    status = 304\n    body = \"x\"\n  }\n}\n", `file.hcl:11,12-15: Invalid value; route "/x": respond.status 304 never carries a body`},
		{"sandbox {\n  mode = true\n}\n" + minimal, `file.hcl:2,10-14: Incorrect attribute value type`},
	}
	for _, tt := range tests {
		_, err := parse(t, tt.src)
		wantError(t, tt.src, err, tt.want)
	}
}

func TestMultipleErrors(t *testing.T) {
	src := `listener "http" {
  address = "localhost:8080"
}
workers {
  count = 0
}
workers {
}
limits {
  idel_timeout = "5s"
  shutdown_grace = "11m"
}
route "/" {
}
sandbox {
  mode = "strcit"
}
`
	_, err := parse(t, src)
	want := []string{
		`file.hcl:2,13-29: Invalid listener address; listener "http": address: "localhost:8080": an IP literal is required`,
		`file.hcl:5,11-12: Invalid value; workers.count must be between 1 and 256, got 0.`,
		`file.hcl:7,1-8: Duplicate workers block`,
		`file.hcl:10,3-15: Unsupported argument`,
		`file.hcl:11,20-25: Invalid value; limits.shutdown_grace must be between 0s and 10m, got 11m.`,
		`file.hcl:13,1-10: Missing route handler`,
		`file.hcl:16,10-18: Invalid value; sandbox.mode must be one of "strict", "best-effort", got "strcit".`,
	}
	wantError(t, src, err, want...)
	var e *Error
	errors.As(err, &e)
	if len(e.Diagnostics) != len(want) {
		t.Errorf("got %d diagnostics, want %d:\n%v", len(e.Diagnostics), len(want), err)
	}
	// One per line, in file order.
	lines := strings.Split(err.Error(), "\n")
	for i := range min(len(lines), len(want)) {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("line %d = %q, want prefix %q", i, lines[i], want[i])
		}
	}
	var d *hcl.Diagnostic
	if !errors.As(err, &d) || d.Subject.Start.Line != 2 {
		t.Errorf("errors.As(*hcl.Diagnostic) = %v, want the line 2 diagnostic", d)
	}
	var buf bytes.Buffer
	if err := e.WriteText(&buf, 0, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "  on file.hcl line 5, in workers:\n   5:   count = 0\n") {
		t.Errorf("WriteText has no source snippet:\n%s", buf.String())
	}
}

func TestSyntaxError(t *testing.T) {
	src := minimal + "workers {\n  count = \n}\n"
	_, err := parse(t, src)
	wantError(t, src, err, "file.hcl:9,")
}

func TestMissingListenerAndRoute(t *testing.T) {
	for _, src := range []string{"", "# nothing\n", "workers {\n  count = 1\n}\n"} {
		_, err := parse(t, src)
		wantError(t, src, err, "file.hcl:1,1-1: Missing listener block", "file.hcl:1,1-1: Missing route block")
	}
}

func TestTrustedProxies(t *testing.T) {
	tests := []struct {
		in   string
		want []string // nil: an error
	}{
		{`[]`, []string{}},
		{`["10.0.0.0/8"]`, []string{"10.0.0.0/8"}},
		{`["10.1.2.3/8"]`, []string{"10.0.0.0/8"}},
		{`["192.0.2.1"]`, []string{"192.0.2.1/32"}},
		{`["2001:db8::1"]`, []string{"2001:db8::1/128"}},
		{`["2001:db8::1/32"]`, []string{"2001:db8::/32"}},
		{`["0.0.0.0/0", "::/0"]`, []string{"0.0.0.0/0", "::/0"}},
		{`["10.0.0.0/8", "192.0.2.1", "fd00::/8"]`, []string{"10.0.0.0/8", "192.0.2.1/32", "fd00::/8"}},
		{`["nope"]`, nil},
		{`["10.0.0.0/33"]`, nil},
		{`["10.0.0.0/"]`, nil},
		{`["fe80::1%eth0"]`, nil},
		{`["example.com"]`, nil},
		{`[""]`, nil},
		{`[1]`, nil},
		{`[["10.0.0.0/8"]]`, nil},
		{`{a = "10.0.0.0/8"}`, nil},
	}
	for _, tt := range tests {
		src := "\ntrusted_proxies = " + tt.in + "\n" + minimal
		cfg, err := parse(t, src)
		if tt.want == nil {
			wantError(t, src, err, "file.hcl:2,", "trusted_proxies")
			continue
		}
		if err != nil {
			t.Errorf("trusted_proxies = %s: %v", tt.in, err)
			continue
		}
		got := []string{}
		for _, p := range cfg.TrustedProxies {
			got = append(got, p.String())
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("trusted_proxies = %s: got %q, want %q", tt.in, got, tt.want)
		}
	}
	// The error names the offending element, not the whole list.
	src := "\ntrusted_proxies = [\"10.0.0.0/8\", \"nope\"]\n" + minimal
	_, err := parse(t, src)
	wantError(t, src, err, `file.hcl:2,34-40: Invalid value; trusted_proxies: "nope" is not`)
}

func TestListeners(t *testing.T) {
	const route = "route \"/\" {\n  respond {}\n}\n"
	listener := func(name, addr string) string {
		return fmt.Sprintf("listener %q {\n  address = %q\n}\n", name, addr)
	}
	tests := []struct {
		src  string
		want []Listener
		err  string // non-empty: a substring of the expected error
	}{
		{listener("http", "127.0.0.1:8080"), []Listener{{"http", netip.MustParseAddrPort("127.0.0.1:8080"), false, nil, nil, nil, nil}}, ""},
		{listener("v6", "[::1]:8080"), []Listener{{"v6", netip.MustParseAddrPort("[::1]:8080"), false, nil, nil, nil, nil}}, ""},
		{listener("any", "[::]:443"), []Listener{{"any", netip.MustParseAddrPort("[::]:443"), false, nil, nil, nil, nil}}, ""},
		{listener("a", "127.0.0.1:80") + listener("b", "[::1]:80"),
			[]Listener{{"a", netip.MustParseAddrPort("127.0.0.1:80"), false, nil, nil, nil, nil}, {"b", netip.MustParseAddrPort("[::1]:80"), false, nil, nil, nil, nil}}, ""},
		{listener("a", "127.0.0.1:0") + listener("b", "127.0.0.1:0"),
			[]Listener{{"a", netip.MustParseAddrPort("127.0.0.1:0"), false, nil, nil, nil, nil}, {"b", netip.MustParseAddrPort("127.0.0.1:0"), false, nil, nil, nil, nil}}, ""},
		{listener("http", "localhost:8080"), nil, `file.hcl:2,13-29: Invalid listener address; listener "http": address: "localhost:8080": an IP literal is required`},
		{listener("http", ":8080"), nil, `file.hcl:2,13-20: Invalid listener address; listener "http": address: ":8080" has no IP address`},
		{listener("http", "127.0.0.1"), nil, `file.hcl:2,13-24: Invalid listener address`},
		{listener("http", "::1:8080"), nil, `file.hcl:2,13-23: Invalid listener address`},
		{listener("http", "127.0.0.1:65536"), nil, `has an invalid port`},
		{listener("http", "127.0.0.1:http"), nil, `has an invalid port`},
		{listener("http", ""), nil, `file.hcl:2,13-15: Invalid listener address`},
		{listener("a", "127.0.0.1:80") + listener("a", "127.0.0.1:81"), nil, `file.hcl:4,10-13: Duplicate listener name; A listener named "a" is already defined at file.hcl:1,1-13.`},
		{listener("a", "127.0.0.1:80") + listener("b", "127.0.0.1:80"), nil, `file.hcl:5,13-27: Duplicate listener address; listener "b": address: listener "a" already listens on 127.0.0.1:80.`},
		{listener("", "127.0.0.1:80"), nil, `file.hcl:1,10-12: Invalid listener name`},
		{"listener \"a\" {\n}\n", nil, `file.hcl:1,14-14: Missing required argument; The argument "address" is required`},
		{"listener {\n  address = \"127.0.0.1:80\"\n}\n", nil, `file.hcl:1,10-11: Missing name for listener`},
		{"listener \"lb\" {\n  address = \"127.0.0.1:80\"\n  proxy_protocol = true\n}\n", []Listener{{"lb", netip.MustParseAddrPort("127.0.0.1:80"), true, nil, nil, nil, nil}}, ""},
		{"listener \"lb\" {\n  address = \"127.0.0.1:80\"\n  proxy_protocol = \"yes\"\n}\n", nil, `listener "lb": proxy_protocol`},
	}
	for _, tt := range tests {
		src := tt.src + route
		cfg, err := parse(t, src)
		if tt.err != "" {
			wantError(t, src, err, tt.err)
			continue
		}
		if err != nil {
			t.Errorf("Parse:\n%s\nerror: %v", src, err)
			continue
		}
		if !reflect.DeepEqual(cfg.Listeners, tt.want) {
			t.Errorf("Parse:\n%s\nListeners = %v, want %v", src, cfg.Listeners, tt.want)
		}
	}
}

func TestRoutes(t *testing.T) {
	const listener = "listener \"http\" {\n  address = \"127.0.0.1:80\"\n}\n"
	src := listener + `route "/" {
  static {
    root    = "www"
    index   = "home.html"
    listing = true
  }
}
route "/healthz" {
  respond {
    status       = 200
    body         = "ok\n"
    content_type = "text/plain"
  }
}
route "/api/" {
  respond {
    status = 503
  }
}
`
	cfg := mustParse(t, src)
	want := []Route{
		{Prefix: "/", Static: &Static{Root: "/base/www", Index: "home.html", Listing: true, DefaultType: "application/octet-stream", Precompressed: true, MaxRanges: 16}},
		{Prefix: "/healthz", Respond: &Respond{Status: 200, Body: "ok\n", ContentType: "text/plain"}},
		{Prefix: "/api/", Respond: &Respond{Status: 503, ContentType: "text/plain; charset=utf-8"}},
	}
	if !reflect.DeepEqual(cfg.Routes, want) {
		t.Errorf("Routes:\n got %+v\nwant %+v", cfg.Routes, want)
		for i := range min(len(cfg.Routes), len(want)) {
			t.Logf("%d: %+v %+v / %+v %+v", i, cfg.Routes[i].Static, cfg.Routes[i].Respond, want[i].Static, want[i].Respond)
		}
	}

	respond := func(prefix string) string {
		return fmt.Sprintf("route %q {\n  respond {}\n}\n", prefix)
	}
	tests := []struct {
		routes string // starts on line 4
		err    string
	}{
		{respond("healthz"), `file.hcl:4,7-16: Invalid route prefix; A route prefix must start with "/", got "healthz".`},
		{respond(""), `file.hcl:4,7-9: Invalid route prefix`},
		{respond("/a b"), `file.hcl:4,7-13: Invalid route prefix`},
		{respond("/a\tb"), `file.hcl:4,7-14: Invalid route prefix`},
		{respond("/a\nb"), `file.hcl:4,7-14: Invalid route prefix`},
		{respond("/a?b"), `file.hcl:4,7-13: Invalid route prefix`},
		{respond("/x") + respond("/x"), `file.hcl:7,7-11: Duplicate route; Route "/x" is already defined at file.hcl:4,1-11.`},
		{"route \"/x\" {\n}\n", `file.hcl:4,1-11: Missing route handler; route "/x" needs one handler block (static, respond, redirect, proxy, metrics or embedded).`},
		{"route \"/x\" {\n  respond {}\n  static {\n    root = \"/\"\n  }\n}\n", `file.hcl:6,3-9: Duplicate route handler`},
		{"route \"/x\" {\n  respond {}\n  respond {}\n}\n", `file.hcl:6,3-10: Duplicate route handler`},
		{"route \"/x\" {\n  fastcgi {}\n}\n", `file.hcl:5,3-10: Unsupported block type`},
		{"route \"/x\" {\n  static {}\n}\n", `file.hcl:5,10-10: Missing required argument; The argument "root" is required`},
		{"route \"/x\" {\n  static {\n    root = \"\"\n  }\n}\n", `file.hcl:6,12-14: Invalid value; route "/x": static.root must be a directory path`},
		{"route \"/x\" {\n  static {\n    root = \"/\"\n    index = \"a/b.html\"\n  }\n}\n", `file.hcl:7,13-23: Invalid value; route "/x": static.index must be a file name`},
		{"route \"/x\" {\n  static {\n    root = \"/\"\n    index = \"..\"\n  }\n}\n", `file.hcl:7,13-17: Invalid value`},
		{"route \"/x\" {\n  static {\n    root = \"/\"\n    default_type = \"text/html\\r\\nX: y\"\n  }\n}\n", `file.hcl:7,20-39: Invalid value; route "/x": static.default_type must be a media type`},
		{"route \"/x\" {\n  static {\n    root = \"/\"\n    default_type = \"nonsense\"\n  }\n}\n", `file.hcl:7,20-30: Invalid value; route "/x": static.default_type must be a media type`},
		{"route \"/x\" {\n  static {\n    root = \"/\"\n    precompressed = \"yes\"\n  }\n}\n", `file.hcl:7,21-26: Incorrect attribute value type; route "/x": static.precompressed must be true or false`},
		{"route \"/x\" {\n  respond {\n    content_type = \"text/plain\\r\\nX-Evil: 1\"\n  }\n}\n", `file.hcl:6,20-45: Invalid value; route "/x": respond.content_type must be a media type`},
		{"route \"/x\" {\n  respond {\n    content_type = \"\"\n  }\n}\n", `file.hcl:6,20-22: Invalid value`},
		{"route \"/x\" {\n  respond {\n    status = 404\n    status = 200\n  }\n}\n", `file.hcl:7,5-11: Attribute redefined`},
		{"route \"/x\" \"/y\" {\n  respond {}\n}\n", `file.hcl:4,12-16: Extraneous label for route`},
	}
	for _, tt := range tests {
		src := listener + tt.routes
		_, err := parse(t, src)
		wantError(t, src, err, tt.err)
	}
}

func TestEnumsAndUser(t *testing.T) {
	tests := []struct {
		src  string
		get  func(*Config) string
		want string // "" : an error on line 2
	}{
		{"sandbox {\n  mode = \"best-effort\"\n}\n", func(c *Config) string { return c.Sandbox.Mode }, "best-effort"},
		{"sandbox {\n  mode = \"strict\"\n}\n", func(c *Config) string { return c.Sandbox.Mode }, "strict"},
		{"sandbox {\n  mode = \"off\"\n}\n", nil, ""},
		{"sandbox {\n  seccomp_action = \"log\"\n}\n", nil, ""},
		{"sandbox {\n  seccomp_action = \"log\"\n  mode = \"strict\"\n}\n", nil, ""},
		{"sandbox {\n  mode = \"best-effort\"\n  seccomp_action = \"log\"\n}\n", func(c *Config) string { return c.Sandbox.SeccompAction }, "log"},
		{"log {\n  format = \"json\"\n}\n", func(c *Config) string { return c.Log.Format }, "json"},
		{"log {\n  format = \"JSON\"\n}\n", nil, ""},
		{"log {\n  level = \"trace\"\n}\n", func(c *Config) string { return c.Log.Level }, "trace"},
		{"log {\n  level = \"error\"\n}\n", func(c *Config) string { return c.Log.Level }, "error"},
		{"log {\n  level = \"warning\"\n}\n", nil, ""},
		{"log {\n  access_log_format = \"combined\"\n}\n", func(c *Config) string { return c.Log.AccessLogFormat }, "combined"},
		{"log {\n  access_log_format = \"common\"\n}\n", nil, ""},
		{"log {\n  access_log_format = \"vhost_combined\"\n}\n", func(c *Config) string { return c.Log.AccessLogFormat }, "vhost_combined"},
		{"log {\n  access_log_query = true\n}\n", func(c *Config) string { return fmt.Sprint(c.Log.AccessLogQuery) }, "true"},
		{"log {\n  access_log_path = \"logs/access.log\"\n}\n", func(c *Config) string { return c.Log.AccessLogPath }, "/base/logs/access.log"},
		{"log {\n  access_log_path = \"\"\n}\n", func(c *Config) string { return c.Log.AccessLogPath }, ""},
		{"\nuser = \"gatehouse\"\n", func(c *Config) string { return c.User }, "gatehouse"},
		{"\nuser = \"\"\n", nil, ""},
		{"\nuser = \"a b\"\n", nil, ""},
		{"admin {\n  socket = \"/run/gatehouse/admin.sock\"\n}\n", func(c *Config) string { return c.Admin.Socket }, "/run/gatehouse/admin.sock"},
		{"admin {\n  socket = \"run/../admin.sock\"\n}\n", func(c *Config) string { return c.Admin.Socket }, "/base/admin.sock"},
		{"admin {\n  socket = \"\"\n}\n", nil, ""},
		{"admin {\n  socket = \"/" + strings.Repeat("a", 103) + "\"\n}\n", nil, ""},
		{"admin {\n}\n", func(c *Config) string { return c.Admin.Socket }, ""},
	}
	for _, tt := range tests {
		src := tt.src + minimal
		cfg, err := parse(t, src)
		if tt.get == nil {
			wantError(t, src, err, "file.hcl:2,", "Invalid value")
			continue
		}
		if err != nil {
			t.Errorf("Parse:\n%s\nerror: %v", src, err)
			continue
		}
		if got := tt.get(cfg); got != tt.want {
			t.Errorf("Parse:\n%s\ngot %q, want %q", src, got, tt.want)
		}
	}
}

func TestDuplicateBlocks(t *testing.T) {
	for _, typ := range []string{"workers", "limits", "admin", "sandbox", "log"} {
		src := minimal + typ + " {\n}\n" + typ + " {\n}\n"
		_, err := parse(t, src)
		wantError(t, src, err, "file.hcl:10,1-", "Duplicate "+typ+" block", "the first is at file.hcl:8,1-")
	}
}

func TestDefault(t *testing.T) {
	t.Chdir("..") // the source tree's root, where examples/www is
	cfg, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	wantListeners := []Listener{{"http", netip.MustParseAddrPort("127.0.0.1:8080"), false, nil, nil, nil, nil}}
	if !reflect.DeepEqual(cfg.Listeners, wantListeners) {
		t.Errorf("Listeners = %v, want %v", cfg.Listeners, wantListeners)
	}
	wantRoutes := []Route{
		{Prefix: "/", Static: &Static{Root: filepath.Join(wd, "examples/www"), Index: "index.html", DefaultType: "application/octet-stream", Precompressed: true, MaxRanges: 16}},
		{Prefix: "/healthz", Respond: &Respond{Status: 200, Body: "ok\n", ContentType: "text/plain; charset=utf-8"}},
	}
	if !reflect.DeepEqual(cfg.Routes, wantRoutes) {
		t.Errorf("Routes = %+v, want %+v", cfg.Routes, wantRoutes)
	}
	if cfg.Filename != DefaultFilename || !bytes.Equal(cfg.Source, defaultSource) || cfg.BaseDir != wd {
		t.Errorf("Filename, BaseDir = %q, %q; want %q, %q and the embedded source", cfg.Filename, cfg.BaseDir, DefaultFilename, wd)
	}
	// A worker re-parsing Source with the supervisor's BaseDir gets the same Config.
	again, err := Parse(cfg.Source, cfg.Filename, ParseOptions{BaseDir: cfg.BaseDir, SkipFSChecks: true})
	if err != nil || !reflect.DeepEqual(again, cfg) {
		t.Errorf("re-parse = %+v, %v; want %+v", again, err, cfg)
	}
}

func TestStaticRoot(t *testing.T) {
	base := readableTempDir(t)
	if err := os.Mkdir(filepath.Join(base, "www"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		root, baseDir string
		skipFS        bool
		want          string // "" : an error
	}{
		{"www", base, false, filepath.Join(base, "www")},
		{"./www/", base, false, filepath.Join(base, "www")},
		{"www/../www", base, false, filepath.Join(base, "www")},
		{"www", base + "/", false, filepath.Join(base, "www")},
		{filepath.Join(base, "www"), "/elsewhere", false, filepath.Join(base, "www")},
		{"missing", base, false, ""},
		{"file", base, false, ""},
		{"missing", base, true, filepath.Join(base, "missing")},
		{"file", base, true, filepath.Join(base, "file")},
		{"../up", "/srv/gatehouse", true, "/srv/up"},
	}
	for _, tt := range tests {
		src := minimal + fmt.Sprintf("route \"/s\" {\n  static {\n    root = %q\n  }\n}\n", tt.root)
		cfg, err := Parse([]byte(src), "file.hcl", ParseOptions{BaseDir: tt.baseDir, SkipFSChecks: tt.skipFS})
		if tt.want == "" {
			wantError(t, src, err, "file.hcl:10,12-", "Invalid static root")
			continue
		}
		if err != nil {
			t.Errorf("root %q in %q: %v", tt.root, tt.baseDir, err)
			continue
		}
		if got := cfg.Routes[1].Static.Root; got != tt.want {
			t.Errorf("root %q in %q = %q, want %q", tt.root, tt.baseDir, got, tt.want)
		}
	}
}

func TestRelativeBaseDir(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	cfg := mustParseOpt(t, minimal, ParseOptions{BaseDir: "sub", SkipFSChecks: true})
	if want := filepath.Join(dir, "sub"); cfg.BaseDir != want {
		t.Errorf("BaseDir = %q, want %q", cfg.BaseDir, want)
	}
	cfg = mustParseOpt(t, minimal, ParseOptions{SkipFSChecks: true})
	if cfg.BaseDir != dir {
		t.Errorf("BaseDir = %q, want the working directory %q", cfg.BaseDir, dir)
	}
}

func mustParseOpt(tb testing.TB, src string, opt ParseOptions) *Config {
	tb.Helper()
	cfg, err := Parse([]byte(src), "file.hcl", opt)
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

func TestLoad(t *testing.T) {
	dir := readableTempDir(t)
	t.Chdir(dir)
	if err := os.Mkdir("www", 0o755); err != nil {
		t.Fatal(err)
	}
	src := minimal + "route \"/s\" {\n  static {\n    root = \"www\"\n  }\n}\n"
	if err := os.WriteFile("gatehouse.hcl", []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load("gatehouse.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.Routes[1].Static.Root, filepath.Join(dir, "www"); got != want {
		t.Errorf("root = %q, want %q", got, want)
	}
	if cfg.Filename != "gatehouse.hcl" || string(cfg.Source) != src {
		t.Errorf("Filename = %q, Source = %q", cfg.Filename, cfg.Source)
	}

	if err := os.WriteFile("bad.hcl", []byte(src+"workers {\n  count = 0\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load("bad.hcl")
	wantError(t, src, err, "bad.hcl:14,11-12: Invalid value; workers.count must be between 1 and 256, got 0.")

	if _, err := Load("missing.hcl"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing.hcl) = %v, want ErrNotExist", err)
	}
}

func TestSourceIsCopied(t *testing.T) {
	src := []byte(minimal)
	cfg, err := Parse(src, "file.hcl", ParseOptions{BaseDir: "/", SkipFSChecks: true})
	if err != nil {
		t.Fatal(err)
	}
	src[1] = 'X'
	if string(cfg.Source) != minimal {
		t.Errorf("Source changed with the caller's slice: %q", cfg.Source)
	}
}

// The kept connections of both kinds and those in flight must fit a
// worker's descriptors.
func TestWorkerDescriptorBudget(t *testing.T) {
	src := "workers {\n  concurrency = 8\n  tls_max_idle_sessions = 3072\n  max_kept_connections = 1024\n}\n" + minimal
	_, err := Parse([]byte(src), "file.hcl", ParseOptions{SkipFSChecks: true})
	if err == nil || !strings.Contains(err.Error(), "over the 4032 descriptors") {
		t.Fatalf("got %v, want the descriptor budget error", err)
	}
	src = "workers {\n  concurrency = 8\n  tls_max_idle_sessions = 2048\n  max_kept_connections = 1024\n}\n" + minimal
	if _, err := Parse([]byte(src), "file.hcl", ParseOptions{SkipFSChecks: true}); err != nil {
		t.Fatal(err)
	}
}

// A worker's threads: those set, or the CPUs shared among the workers, at
// least one each.
func TestThreadsFor(t *testing.T) {
	for _, tt := range []struct{ count, threads, cpus, want int }{
		{4, 0, 2, 1},
		{2, 0, 2, 1},
		{1, 0, 2, 2},
		{2, 0, 8, 4},
		{3, 0, 8, 2},
		{4, 0, 1, 1},
		{4, 3, 2, 3},
	} {
		w := Workers{Count: tt.count, Threads: tt.threads}
		if got := w.ThreadsFor(tt.cpus); got != tt.want {
			t.Errorf("count %d threads %d on %d CPUs: %d, want %d", tt.count, tt.threads, tt.cpus, got, tt.want)
		}
	}
}
