package config

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

// upstreamBase is a valid file with a proxy route to upstream "app".
const upstreamBase = `
listener "http" {
  address = "127.0.0.1:0"
}
route "/api/" {
  proxy {
    upstream = "app"
  }
}
`

func TestUpstream(t *testing.T) {
	cfg := mustParse(t, upstreamBase+`
upstream "app" {
  addresses        = ["127.0.0.1:9000", "[::1]:9001"]
  connect_timeout  = "250ms"
  response_timeout = "2m"
  max_connections  = 7
  read_timeout     = "3s"
  send_timeout     = "4s"
  max_fails        = 2
  fail_timeout     = "30s"
  health_check {
    path     = "/healthz?deep=1"
    interval = "5s"
  }
}
upstream "other" {
  addresses = ["192.0.2.1:80"]
}
`)
	want := []Upstream{
		{Name: "app", Addresses: []Address{{AddrPort: netip.MustParseAddrPort("127.0.0.1:9000")}, {AddrPort: netip.MustParseAddrPort("[::1]:9001")}},
			ResolveInterval: time.Minute, ConnectTimeout: 250 * time.Millisecond, ResponseTimeout: 2 * time.Minute, ReadTimeout: 3 * time.Second,
			SendTimeout: 4 * time.Second, MaxConnections: 7, MaxFails: 2, FailTimeout: 30 * time.Second,
			HealthCheck: &HealthCheck{Path: "/healthz?deep=1", Interval: 5 * time.Second, Timeout: 2 * time.Second}},
		// The defaults.
		{Name: "other", Addresses: []Address{{AddrPort: netip.MustParseAddrPort("192.0.2.1:80")}},
			ResolveInterval: time.Minute, ConnectTimeout: 5 * time.Second, ResponseTimeout: 60 * time.Second, ReadTimeout: 60 * time.Second,
			SendTimeout: 60 * time.Second, MaxConnections: 64, MaxFails: 1, FailTimeout: 10 * time.Second},
	}
	if !reflect.DeepEqual(cfg.Upstreams, want) {
		t.Errorf("Upstreams = %+v, want %+v", cfg.Upstreams, want)
	}
	if p := cfg.Routes[0].Proxy; p == nil || p.Upstream != "app" || !p.RewriteRedirects {
		t.Errorf("route proxy = %+v, want upstream app, redirects rewritten", p)
	}
	off := mustParse(t, strings.Replace(upstreamBase, `upstream = "app"`, "upstream = \"app\"\n    rewrite_redirects = false", 1)+`
upstream "app" {
  addresses = ["127.0.0.1:9000"]
}
`)
	if p := off.Routes[0].Proxy; p.RewriteRedirects {
		t.Errorf("rewrite_redirects = false: %+v", p)
	}
	if u := cfg.Upstream("other"); u == nil || u.Name != "other" {
		t.Errorf("Upstream(other) = %v", u)
	}
	if u := cfg.Upstream("none"); u != nil {
		t.Errorf("Upstream(none) = %v, want nil", u)
	}
	// Upstream blocks may come before the routes that name them.
	mustParse(t, `
upstream "app" {
  addresses = ["127.0.0.1:9000"]
}
`+upstreamBase)
}

func TestUpstreamAddressForms(t *testing.T) {
	cfg := mustParse(t, upstreamBase+`
upstream "app" {
  addresses        = ["unix:/run/app.sock", "LocalHost:9000", "app_1.internal.:80", "[::1]:9001"]
  resolve_interval = "0s"
}
`)
	u := cfg.Upstream("app")
	want := []Address{{Unix: "/run/app.sock"}, {Host: "localhost", Port: 9000}, {Host: "app_1.internal.", Port: 80},
		{AddrPort: netip.MustParseAddrPort("[::1]:9001")}}
	if !reflect.DeepEqual(u.Addresses, want) || u.ResolveInterval != 0 || !u.HasHostNames() {
		t.Fatalf("addresses %+v, resolve_interval %s; want %+v, 0s", u.Addresses, u.ResolveInterval, want)
	}
	var shown []string
	for _, a := range u.Addresses {
		shown = append(shown, a.String())
	}
	if got := strings.Join(shown, " "); got != "unix:/run/app.sock localhost:9000 app_1.internal.:80 [::1]:9001" {
		t.Errorf("as shown: %s", got)
	}
	if cfg := mustParse(t, upstreamBase+`
upstream "app" {
  addresses = ["unix:/run/app.sock"]
}
`); cfg.Upstream("app").HasHostNames() {
		t.Errorf("a Unix socket counted as a host name")
	}
}

func TestUpstreamErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"unknown upstream in a proxy route", upstreamBase, []string{"file.hcl:7,", "Unknown upstream", `proxy.upstream names "app"`}},
		{"proxy without upstream", `
listener "http" {
  address = "127.0.0.1:0"
}
route "/" {
  proxy {}
}
`, []string{"file.hcl:6,", `"upstream" is required`}},
		{"upstream without addresses", upstreamBase + `
upstream "app" {}
`, []string{"file.hcl:11,", `"addresses" is required`}},
		{"empty addresses", upstreamBase + `
upstream "app" {
  addresses = []
}
`, []string{"file.hcl:12,", "addresses must name at least one address"}},
		{"a relative Unix socket path", upstreamBase + `
upstream "app" {
  addresses = ["127.0.0.1:9000", "unix:run/app.sock"]
}
`, []string{"file.hcl:12,34-53", `got "unix:run/app.sock": a Unix socket path must be absolute`}},
		{"a Unix socket path too long", upstreamBase + `
upstream "app" {
  addresses = ["unix:/` + strings.Repeat("s", 107) + `"]
}
`, []string{"file.hcl:12,", "holds at most 107 bytes"}},
		{"a host name without port", upstreamBase + `
upstream "app" {
  addresses = ["localhost"]
}
`, []string{"file.hcl:12,", `got "localhost"`}},
		{"a host name with a bad label", upstreamBase + `
upstream "app" {
  addresses = ["-app.internal:9000"]
}
`, []string{"file.hcl:12,", "not an IP address or a host name"}},
		{"a mistyped IPv4 address", upstreamBase + `
upstream "app" {
  addresses = ["127.0.1:9000"]
}
`, []string{"file.hcl:12,", "not an IP address or a host name"}},
		{"resolve_interval under a second", upstreamBase + `
upstream "app" {
  addresses        = ["localhost:9000"]
  resolve_interval = "500ms"
}
`, []string{"file.hcl:13,", `resolve_interval is "0s"`}},
		{"no port", upstreamBase + `
upstream "app" {
  addresses = ["127.0.0.1"]
}
`, []string{"file.hcl:12,", `got "127.0.0.1"`}},
		{"port 0", upstreamBase + `
upstream "app" {
  addresses = ["127.0.0.1:0"]
}
`, []string{"file.hcl:12,", `got "127.0.0.1:0"`}},
		{"unbracketed IPv6", upstreamBase + `
upstream "app" {
  addresses = ["::1:9000"]
}
`, []string{"file.hcl:12,", `got "::1:9000"`}},
		{"a URL", upstreamBase + `
upstream "app" {
  addresses = ["http://127.0.0.1:9000"]
}
`, []string{"file.hcl:12,", "IP:port literals"}},
		{"the bad element is named", upstreamBase + `
upstream "app" {
  addresses = ["127.0.0.1:9000", "nope"]
}
`, []string{"file.hcl:12,34-40", `got "nope"`}},
		{"addresses not a list", upstreamBase + `
upstream "app" {
  addresses = "127.0.0.1:9000"
}
`, []string{"file.hcl:12,"}},
		{"duplicate upstream", upstreamBase + `
upstream "app" {
  addresses = ["127.0.0.1:9000"]
}
upstream "app" {
  addresses = ["127.0.0.1:9001"]
}
`, []string{"file.hcl:14,", "Duplicate upstream"}},
		{"bad upstream name", `
listener "http" {
  address = "127.0.0.1:0"
}
route "/" {
  respond {}
}
upstream "a b" {
  addresses = ["127.0.0.1:9000"]
}
`, []string{"file.hcl:8,", "Invalid upstream name"}},
		{"unknown key", upstreamBase + `
upstream "app" {
  addresses = ["127.0.0.1:9000"]
  host      = "example.com"
}
`, []string{"file.hcl:13,", "Unsupported argument"}},
		{"bad duration", upstreamBase + `
upstream "app" {
  addresses       = ["127.0.0.1:9000"]
  connect_timeout = "soon"
}
`, []string{"file.hcl:13,", "Invalid duration"}},
		{"health_check without path", upstreamBase + `
upstream "app" {
  addresses = ["127.0.0.1:9000"]
  health_check {}
}
`, []string{"file.hcl:13,", `"path" is required`}},
		{"health_check path not a path", upstreamBase + `
upstream "app" {
  addresses = ["127.0.0.1:9000"]
  health_check {
    path = "http://x/"
  }
}
`, []string{"file.hcl:14,", "health_check.path must be a URL path"}},
		{"two health_check blocks", upstreamBase + `
upstream "app" {
  addresses = ["127.0.0.1:9000"]
  health_check {
    path = "/a"
  }
  health_check {
    path = "/b"
  }
}
`, []string{"file.hcl:16,", "Duplicate health_check"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse(t, tt.src)
			wantError(t, tt.src, err, tt.want...)
		})
	}
}

func TestUpstreamRanges(t *testing.T) {
	tests := []struct {
		key    string
		lo, hi string // the extremes accepted
		below  string // just under lo
		above  string // just over hi
	}{
		{"connect_timeout", `"100ms"`, `"1m"`, `"99ms"`, `"1m0.001s"`},
		{"response_timeout", `"1s"`, `"1h"`, `"999ms"`, `"1h0m1s"`},
		{"max_connections", "1", "65535", "0", "65536"},
		{"read_timeout", `"1s"`, `"1h"`, `"999ms"`, `"1h0m1s"`},
		{"send_timeout", `"1s"`, `"1h"`, `"999ms"`, `"1h0m1s"`},
		{"max_fails", "1", "100", "0", "101"},
		{"fail_timeout", `"1s"`, `"1h"`, `"999ms"`, `"1h0m1s"`},
	}
	src := func(key, v string) string {
		return upstreamBase + "upstream \"app\" {\n  addresses = [\"127.0.0.1:9000\"]\n  " + key + " = " + v + "\n}\n"
	}
	for _, tt := range tests {
		for _, v := range []string{tt.lo, tt.hi} {
			if _, err := parse(t, src(tt.key, v)); err != nil {
				t.Errorf("%s = %s: %v", tt.key, v, err)
			}
		}
		for _, v := range []string{tt.below, tt.above} {
			s := src(tt.key, v)
			_, err := parse(t, s)
			wantError(t, s, err, "file.hcl:12,", "Invalid value", "upstream app: "+tt.key+" must be between")
		}
	}
	if _, err := parse(t, src("max_connections", "1.5")); err == nil || !strings.Contains(err.Error(), "whole number") {
		t.Errorf("max_connections = 1.5: %v, want a whole-number error", err)
	}
}

// rateBase is a valid file to which rate_limit blocks are appended.
const rateBase = `
listener "http" {
  address = "127.0.0.1:0"
}
route "/" {
  respond {}
}
`

func TestRateLimitBlocks(t *testing.T) {
	cfg := mustParse(t, rateBase+`
rate_limit_entries = 5000
rate_limit "login" {
  prefix = "/login"
  rate   = 20
  per    = "60s"
  burst  = 5
}
rate_limit "api" {
  prefix = "/api/"
  rate   = 100
  per    = "1s"
  burst  = 200
}
rate_limit "api-admin" {
  prefix = "/api/admin"
  rate   = 1
  per    = "24h"
  burst  = 1
}
rate_limit "default" {
  rate  = 600
  per   = "1m"
  burst = 60
}
`)
	if cfg.RateLimitEntries != 5000 {
		t.Errorf("RateLimitEntries = %d, want 5000", cfg.RateLimitEntries)
	}
	want := RateLimit{Name: "login", Prefix: "/login", Rate: 20, Per: time.Minute, Burst: 5}
	if got := cfg.RateLimitByName("login"); got == nil || *got != want {
		t.Errorf("login = %+v, want %+v", got, want)
	}
	for _, tt := range []struct{ path, class string }{
		{"/login", "login"},
		{"/login/again", "login"},
		{"/loginx", "default"}, // prefixes match at "/" boundaries, as routes do
		{"/api/adminx", "api"},
		{"/api/x", "api"},
		{"/api/admin/users", "api-admin"}, // the longest prefix
		{"/api", "default"},
		{"/", "default"},
	} {
		got := cfg.RateClass(tt.path)
		if got == nil || got.Name != tt.class {
			t.Errorf("RateClass(%q) = %v, want %s", tt.path, got, tt.class)
		}
	}
	if cfg.RateLimitByName("none") != nil {
		t.Error("RateLimitByName(none) is not nil")
	}
	// Without a default class, unmatched paths are not limited.
	cfg = mustParse(t, rateBase+`
rate_limit "login" {
  prefix = "/login"
  rate   = 20
  per    = "60s"
  burst  = 5
}
`)
	if got := cfg.RateClass("/other"); got != nil {
		t.Errorf("RateClass(/other) = %+v, want nil", got)
	}
	if cfg.RateLimitEntries != 100000 {
		t.Errorf("default RateLimitEntries = %d, want 100000", cfg.RateLimitEntries)
	}
}

func TestRateLimitErrors(t *testing.T) {
	block := func(name, body string) string {
		return rateBase + "rate_limit \"" + name + "\" {\n" + body + "}\n"
	}
	const ok = "  rate  = 20\n  per   = \"60s\"\n  burst = 5\n"
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"default with a prefix", block("default", "  prefix = \"/\"\n"+ok), []string{"file.hcl:9,", `"default" applies to every path`}},
		{"prefix missing", block("login", ok), []string{"file.hcl:8,", "Missing prefix"}},
		{"prefix without slash", block("login", "  prefix = \"login\"\n"+ok), []string{"file.hcl:9,", "prefix must be a URL path"}},
		{"prefix with a query", block("login", "  prefix = \"/login?x\"\n"+ok), []string{"file.hcl:9,", "prefix must be a URL path"}},
		{"prefix with a space", block("login", "  prefix = \"/a b\"\n"+ok), []string{"file.hcl:9,", "prefix must be a URL path"}},
		{"prefix with a control character", block("login", "  prefix = \"/a\\tb\"\n"+ok), []string{"file.hcl:9,", "prefix must be a URL path"}},
		{"duplicate prefix", block("a", "  prefix = \"/login\"\n"+ok) + "rate_limit \"b\" {\n  prefix = \"/login\"\n" + ok + "}\n",
			[]string{"file.hcl:15,", "Duplicate prefix", `already the prefix of rate_limit "a"`}},
		{"duplicate name", block("a", "  prefix = \"/a\"\n"+ok) + "rate_limit \"a\" {\n  prefix = \"/b\"\n" + ok + "}\n",
			[]string{"file.hcl:14,", "Duplicate rate_limit"}},
		{"rate missing", block("login", "  prefix = \"/login\"\n  per = \"1s\"\n  burst = 1\n"), []string{"file.hcl:8,", `"rate" is required`}},
		{"per missing", block("login", "  prefix = \"/login\"\n  rate = 1\n  burst = 1\n"), []string{"file.hcl:8,", `"per" is required`}},
		{"burst missing", block("login", "  prefix = \"/login\"\n  rate = 1\n  per = \"1s\"\n"), []string{"file.hcl:8,", `"burst" is required`}},
		{"unknown key", block("login", "  prefix = \"/login\"\n  key = \"ip\"\n"+ok), []string{"file.hcl:10,", "Unsupported argument"}},
		{"bad per", block("login", "  prefix = \"/login\"\n  rate = 1\n  per = \"sometimes\"\n  burst = 1\n"), []string{"file.hcl:11,", "Invalid duration"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse(t, tt.src)
			wantError(t, tt.src, err, tt.want...)
		})
	}
}

func TestRateLimitRanges(t *testing.T) {
	tests := []struct {
		key, lo, hi, below, above string
	}{
		{"rate", "1", "1000000", "0", "1000001"},
		{"per", `"1s"`, `"24h"`, `"999ms"`, `"24h0m1s"`},
		{"burst", "1", "1000000", "0", "1000001"},
	}
	vals := map[string]string{"rate": "20", "per": `"60s"`, "burst": "5"}
	src := func(key, v string) string {
		s := rateBase + "rate_limit \"login\" {\n  prefix = \"/login\"\n"
		for _, k := range []string{"rate", "per", "burst"} {
			x := vals[k]
			if k == key {
				x = v
			}
			s += "  " + k + " = " + x + "\n"
		}
		return s + "}\n"
	}
	line := map[string]int{"rate": 10, "per": 11, "burst": 12}
	for _, tt := range tests {
		for _, v := range []string{tt.lo, tt.hi} {
			if _, err := parse(t, src(tt.key, v)); err != nil {
				t.Errorf("%s = %s: %v", tt.key, v, err)
			}
		}
		for _, v := range []string{tt.below, tt.above} {
			s := src(tt.key, v)
			_, err := parse(t, s)
			wantError(t, s, err, fmt.Sprintf("file.hcl:%d,", line[tt.key]), "Invalid value", "rate_limit login: "+tt.key+" must be between")
		}
	}
	for _, tt := range []struct {
		v  string
		ok bool
	}{{"1", true}, {"10000000", true}, {"0", false}, {"10000001", false}} {
		s := "\nrate_limit_entries = " + tt.v + "\n" + rateBase
		_, err := parse(t, s)
		if tt.ok && err != nil {
			t.Errorf("rate_limit_entries = %s: %v", tt.v, err)
		}
		if !tt.ok {
			wantError(t, s, err, "file.hcl:2,", "rate_limit_entries must be between")
		}
	}
}
