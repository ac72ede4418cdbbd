package worker

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/hashicorp/go-hclog"
)

// vhostRouter builds a router from routes whose respond bodies name them.
func vhostRouter(t *testing.T, src string) *router {
	t.Helper()
	cfg, err := config.Parse([]byte(src), "vhost.hcl", config.ParseOptions{BaseDir: "/", SkipFSChecks: true})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := newRouter(&Worker{log: hclog.NewNullLogger()}, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

func respondRoute(prefix, body string, hosts ...string) string {
	h := ""
	if len(hosts) > 0 {
		h = `  hosts = ["` + strings.Join(hosts, `", "`) + "\"]\n"
	}
	return "route \"" + prefix + "\" {\n" + h + "  respond {\n    body = \"" + body + "\"\n  }\n}\n"
}

const vhostListeners = `listener "http" {
  address = "127.0.0.1:8080"
  https_redirect = 8443
}
listener "web" {
  address = "127.0.0.1:8081"
}
`

// serveBody runs rr's handler and returns its status and body.
func serveBody(rr *route, r *http.Request) (int, string) {
	rec := httptest.NewRecorder()
	serve(rr, rec, r)
	return rec.Code, rec.Body.String()
}

func TestVhostMatch(t *testing.T) {
	rt := vhostRouter(t, vhostListeners+
		respondRoute("/", "any")+
		respondRoute("/shared", "any-shared")+
		respondRoute("/", "exact", "example.org", "www.example.org")+
		respondRoute("/api", "exact-api", "example.org")+
		respondRoute("/", "wild", "*.example.org")+
		respondRoute("/", "deep-wild", "*.deep.example.org")+
		respondRoute("/api", "wild-only-api", "*.api.test")+
		respondRoute("/", "ip", "192.0.2.1", "2001:db8::1"))
	for _, tc := range []struct {
		host, path, want string
	}{
		{"example.org", "/", "exact"},
		{"EXAMPLE.org.:8080", "/x", "exact"},
		{"example.org", "/api/v1", "exact-api"},
		{"example.org", "/apix", "exact"},
		// No fallback to the host-less routes from a host's set.
		{"example.org", "/shared", "exact"},
		{"www.example.org", "/api", "exact"},
		{"a.example.org", "/api", "wild"},
		{"a.b.example.org", "/", "wild"},
		{"x.deep.example.org", "/", "deep-wild"},
		{"deep.example.org", "/", "wild"},
		// "*.example.org" does not match "example.org" itself, or a name
		// merely ending in "example.org".
		{"notexample.org", "/", "any"},
		{".example.org", "/", "any"},
		{"other.test", "/shared/x", "any-shared"},
		{"", "/", "any"},
		{"x.api.test", "/api", "wild-only-api"},
		{"x.api.test", "/other", ""}, // the host's set has no route for it: 404
		{"192.0.2.1:80", "/", "ip"},
		{"[2001:DB8:0::1]:443", "/", "ip"},
	} {
		rr := rt.match(tc.host, tc.path)
		r := httptest.NewRequest("GET", tc.path, nil)
		status, body := serveBody(rr, r)
		if tc.want == "" {
			if rr != nil || status != 404 {
				t.Errorf("%s %s: status %d %q, want 404", tc.host, tc.path, status, body)
			}
			continue
		}
		if status != 200 || body != tc.want {
			t.Errorf("%s %s: status %d %q, want %q", tc.host, tc.path, status, body, tc.want)
		}
	}
}

func TestVhostMisdirected(t *testing.T) {
	// No host-less routes: a host no route names has no set at all.
	rt := vhostRouter(t, vhostListeners+respondRoute("/", "a", "a.test")+respondRoute("/x", "b", "*.b.test"))
	for _, host := range []string{"c.test", "b.test", "", "a.test.evil"} {
		rr := rt.match(host, "/")
		if rr != &rt.hosts.misdirected {
			t.Fatalf("%q: got route %+v, want the misdirected route", host, rr)
		}
		// Without a TLS connection: 404.
		if status, _ := serveBody(rr, httptest.NewRequest("GET", "/", nil)); status != 404 {
			t.Errorf("%q: status %d, want 404", host, status)
		}
	}
	if rr := rt.match("x.b.test", "/"); rr != nil {
		t.Errorf("x.b.test /: %+v, want no route (404)", rr)
	}
	// A router without hosts never misdirects.
	if rr := vhostRouter(t, vhostListeners+respondRoute("/x", "x")).match("any", "/"); rr != nil {
		t.Errorf("host-less router: %+v, want nil", rr)
	}
}

func TestCanonicalHost(t *testing.T) {
	for in, want := range map[string]string{
		"example.org": "example.org", "Example.ORG:8080": "example.org", "example.org.": "example.org",
		"example.org.:80": "example.org", "[::1]:8080": "::1", "[2001:DB8::0:1]": "2001:db8::1", "": "",
		"192.0.2.1:443": "192.0.2.1", "[bad": "[bad",
	} {
		if got := canonicalHost(in); got != want {
			t.Errorf("canonicalHost(%q) = %q, want %q", in, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { canonicalHost("www.example.org:8080") }); n != 0 {
		t.Errorf("canonicalHost allocates %v times for a lower-case name", n)
	}
}

func TestHTTPSRedirect(t *testing.T) {
	for _, tc := range []struct {
		name, routes string
		port         string
		method, host string
		target       string
		body         bool
		status       int
		location     string
	}{
		{"any host", respondRoute("/", "x"), "8443", "GET", "Example.org:80", "/a%20b/c?q=1&r", false, 301, "https://example.org:8443/a%20b/c?q=1&r"},
		{"HEAD", respondRoute("/", "x"), "443", "HEAD", "example.org", "/", false, 301, "https://example.org/"},
		{"POST keeps its method", respondRoute("/", "x"), "443", "POST", "example.org", "/form", true, 308, "https://example.org/form"},
		{"IPv6", respondRoute("/", "x"), "443", "GET", "[::1]:80", "/", false, 301, "https://[::1]/"},
		{"served host", respondRoute("/", "x", "a.test", "*.b.test"), "443", "GET", "x.b.test", "/p", false, 301, "https://x.b.test/p"},
		{"unserved host", respondRoute("/", "x", "a.test", "*.b.test"), "443", "GET", "evil.test", "/p", false, 404, ""},
		{"no Host", respondRoute("/", "x"), "443", "GET", "", "/", false, 404, ""},
		{"odd Host", respondRoute("/", "x"), "443", "GET", "a!b.test", "/", false, 404, ""},
		{"wildcard as Host", respondRoute("/", "x", "*.b.test"), "443", "GET", "*.b.test", "/", false, 404, ""},
	} {
		rt := vhostRouter(t, `listener "http" {
  address = "127.0.0.1:80"
  https_redirect = `+tc.port+`
}
`+tc.routes)
		rr := rt.byListener["http"].redirect
		var body *strings.Reader
		if tc.body {
			body = strings.NewReader("never read")
		}
		r := httptest.NewRequest(tc.method, tc.target, nil)
		if body != nil {
			r.Body = readCounter{body}
		}
		r.Host = tc.host
		rec := httptest.NewRecorder()
		serve(rr, rec, r)
		if rec.Code != tc.status || rec.Header().Get("Location") != tc.location {
			t.Errorf("%s: %d %q, want %d %q", tc.name, rec.Code, rec.Header().Get("Location"), tc.status, tc.location)
		}
		if body != nil && (body.Len() != len("never read") || rec.Header().Get("Connection") != "close") {
			t.Errorf("%s: body read (%d left) or connection kept (%q)", tc.name, body.Len(), rec.Header().Get("Connection"))
		}
	}
}

type readCounter struct{ *strings.Reader }

func (readCounter) Close() error { return nil }

// vhostBenchConfig has 100 exact names with two routes each, 100
// wildcards and a host-less route.
func vhostBenchConfig() string {
	var b strings.Builder
	b.WriteString(vhostListeners)
	for i := range 100 {
		n := strconv.Itoa(i)
		b.WriteString(respondRoute("/", "e"+n, "site"+n+".example"))
		b.WriteString(respondRoute("/api", "a"+n, "site"+n+".example"))
		b.WriteString(respondRoute("/", "w"+n, "*.wild"+n+".example"))
	}
	b.WriteString(respondRoute("/", "any"))
	return b.String()
}

func TestVhostMatchAllocs(t *testing.T) {
	rt := vhostRouter(t, vhostBenchConfig())
	for _, host := range []string{"site42.example:8080", "a.b.wild7.example", "other.example"} {
		if n := testing.AllocsPerRun(100, func() { rt.match(host, "/api/x") }); n != 0 {
			t.Errorf("match(%q) allocates %v times", host, n)
		}
	}
}

func BenchmarkVhostMatch(b *testing.B) {
	c, err := config.Parse([]byte(vhostBenchConfig()), "bench.hcl", config.ParseOptions{BaseDir: "/", SkipFSChecks: true})
	if err != nil {
		b.Fatal(err)
	}
	rt, err := newRouter(&Worker{log: hclog.NewNullLogger()}, c, nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, host := range []string{"site42.example:8080", "a.b.wild7.example", "other.example"} {
		b.Run(host, func(b *testing.B) {
			for b.Loop() {
				rt.match(host, "/api/x")
			}
		})
	}
}
