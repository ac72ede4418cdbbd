package e2e

import (
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// vhostSite is a harness whose routes are all limited to host names, with
// a plain listener (the harness's), a TLS listener with hsts and a plain
// listener that redirects to https.
type vhostSite struct {
	*harness
	plain, https, redirect string // addresses
	def, wildcard          testCert
}

// vhostConfig is the site's configuration, with certificates def and
// wildcard; routes are appended.
func vhostConfig(def, wildcard testCert, routes string) string {
	return fmt.Sprintf(`
listener "https" {
  address = "127.0.0.1:0"
  tls {
    certificate "default" {
      cert = %q
      key  = %q
    }
    certificate "wildcard" {
      cert = %q
      key  = %q
    }
  }
  hsts {
    max_age            = "365d"
    include_subdomains = true
  }
}
listener "redirect" {
  address        = "127.0.0.1:0"
  https_redirect = 443
}
workers {
  count       = 2
  concurrency = 4
}
log {
  access_log = false
}
sandbox {
  mode           = "strict"
  seccomp_action = "kill"
}
%s`, def.cert, def.key, wildcard.cert, wildcard.key, routes)
}

const vhostRoutes = `
route "/" {
  hosts = ["default.test"]
  respond {
    body = "default\n"
  }
}
route "/" {
  hosts = ["*.example.test"]
  respond {
    body = "wildcard\n"
  }
}
route "/api" {
  hosts = ["API.example.test"]
  respond {
    body = "api\n"
  }
}
`

func startVhosts(t *testing.T) *vhostSite {
	t.Helper()
	keys := t.TempDir()
	s := &vhostSite{
		def:      writeCert(t, keys, "default", false, "default.test"),
		wildcard: writeCert(t, keys, "wildcard", false, "*.example.test"),
	}
	s.harness = start(t, vhostConfig(s.def, s.wildcard, vhostRoutes))
	addrs := s.sup.Addrs()
	s.plain, s.https, s.redirect = addrs[0].String(), addrs[1].String(), addrs[2].String()
	return s
}

// curlHead runs curl --http1.1 for scheme://host:port(addr)path, resolving
// host to 127.0.0.1, and returns the response head and body.
func curlHead(t *testing.T, scheme, host, addr, path string, args ...string) string {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	a := append([]string{"-sS", "-i", "--http1.1", "--max-time", "10",
		"--resolve", host + ":" + port + ":127.0.0.1", scheme + "://" + host + ":" + port + path}, args...)
	out, err := exec.Command("curl", a...).CombinedOutput()
	if err != nil {
		t.Errorf("curl %q: %v\n%s", a, err, out)
	}
	return strings.ReplaceAll(string(out), "\r\n", "\n")
}

// wantIn reports every want missing from out.
func wantIn(t *testing.T, what, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("%s: %q not in\n%s", what, w, out)
		}
	}
}

const stsHeader = "Strict-Transport-Security: max-age=31536000; includeSubDomains\n"

// Routes limited to host names, on a plain and a TLS listener: exact names
// win over wildcards, a wildcard does not match its own base name, a Host
// no route serves is 404, or 421 over TLS when it is not the SNI name; the
// TLS listener's responses, errors included, carry its hsts header.
func TestVhostRoutes(t *testing.T) {
	s := startVhosts(t)
	for _, tc := range []struct {
		scheme, host, addr, path string
		args                     []string
		want                     []string
	}{
		{"https", "default.test", s.https, "/", []string{"--cacert", s.def.cert}, []string{"HTTP/1.1 200 OK", stsHeader, "\n\ndefault\n"}},
		{"https", "www.example.test", s.https, "/x", []string{"--cacert", s.wildcard.cert}, []string{"HTTP/1.1 200 OK", stsHeader, "\n\nwildcard\n"}},
		{"https", "api.example.test", s.https, "/api/v1", []string{"--cacert", s.wildcard.cert}, []string{"HTTP/1.1 200 OK", "\n\napi\n"}},
		{"https", "api.example.test", s.https, "/apiary", []string{"--cacert", s.wildcard.cert}, []string{"HTTP/1.1 404 Not Found", stsHeader}},
		// The Host names another server than the SNI name: 421.
		{"https", "www.example.test", s.https, "/", []string{"--cacert", s.wildcard.cert, "-H", "Host: other.test"}, []string{"HTTP/1.1 421 Misdirected Request", stsHeader}},
		// Host and SNI agree on a name no route serves: 404.
		{"https", "example.test", s.https, "/", []string{"-k"}, []string{"HTTP/1.1 404 Not Found", stsHeader}},
		{"https", "other.test", s.https, "/", []string{"-k"}, []string{"HTTP/1.1 404 Not Found", stsHeader}},
		// A name a route serves, sent on another server's connection, is
		// served as nginx does.
		{"https", "default.test", s.https, "/", []string{"--cacert", s.def.cert, "-H", "Host: www.example.test"}, []string{"HTTP/1.1 200 OK", "\n\nwildcard\n"}},
		// The plain listener: the same routes, 404 for other hosts.
		{"http", "WWW.Example.Test.", s.plain, "/", nil, []string{"HTTP/1.1 200 OK", "\n\nwildcard\n"}},
		{"http", "default.test", s.plain, "/", nil, []string{"HTTP/1.1 200 OK", "\n\ndefault\n"}},
		{"http", "other.test", s.plain, "/", nil, []string{"HTTP/1.1 404 Not Found"}},
	} {
		out := curlHead(t, tc.scheme, tc.host, tc.addr, tc.path, tc.args...)
		wantIn(t, tc.scheme+"://"+tc.host+tc.path+" "+strings.Join(tc.args, " "), out, tc.want...)
		if tc.scheme == "http" && strings.Contains(out, "Strict-Transport-Security") {
			t.Errorf("http://%s%s: a plain listener sent hsts:\n%s", tc.host, tc.path, out)
		}
	}

	// openssl s_client: SNI www.example.test, then two requests on the
	// connection, for a served and a misdirected Host.
	out, _ := exec.Command("sh", "-c", fmt.Sprintf(
		`printf 'GET / HTTP/1.1\r\nHost: www.example.test\r\n\r\nGET / HTTP/1.1\r\nHost: elsewhere.test\r\nConnection: close\r\n\r\n' | timeout 10 openssl s_client -quiet -connect %s -servername www.example.test 2>/dev/null`, s.https)).Output()
	wantIn(t, "openssl s_client", string(out), "HTTP/1.1 200 OK", "wildcard\n", "HTTP/1.1 421 Misdirected Request")

	// An error the worker writes itself (a malformed head) carries hsts.
	c, err := tls.Dial("tcp", s.https, &tls.Config{ServerName: "www.example.test", InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: www.example.test\r\nBad Header: x\r\n\r\n")
	buf := make([]byte, 4096)
	n, _ := c.Read(buf)
	wantIn(t, "a malformed head over TLS", strings.ReplaceAll(string(buf[:n]), "\r\n", "\n"), "HTTP/1.1 400 Bad Request", stsHeader)
	checkNoDeaths(t, s.harness)
}

// The redirecting listener answers every request with 301 (GET, HEAD) or
// 308 (other methods) to https on the configured port, only for hosts the
// routes serve, and never reads a request body.
func TestVhostHTTPSRedirect(t *testing.T) {
	s := startVhosts(t)
	out := curlHead(t, "http", "www.example.test", s.redirect, "/a%20b/c?q=1&r=2")
	wantIn(t, "GET", out, "HTTP/1.1 301 Moved Permanently", "Location: https://www.example.test/a%20b/c?q=1&r=2\n")
	out = curlHead(t, "http", "default.test", s.redirect, "/", "-I")
	wantIn(t, "HEAD", out, "HTTP/1.1 301 Moved Permanently", "Location: https://default.test/\n")
	out = curlHead(t, "http", "default.test", s.redirect, "/form", "--data", "a=1")
	wantIn(t, "POST", out, "HTTP/1.1 308 Permanent Redirect", "Location: https://default.test/form\n", "Connection: close\n")
	// A host no route serves is not redirected to.
	out = curlHead(t, "http", "evil.test", s.redirect, "/")
	wantIn(t, "unserved host", out, "HTTP/1.1 404 Not Found")
	if strings.Contains(out, "Location") {
		t.Errorf("unserved host redirected:\n%s", out)
	}

	// A large body is never read: the answer comes from the head alone,
	// and the connection is closed.
	c := dialFrom(t, "127.0.0.2", s.redirect)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(c, "PUT /upload HTTP/1.1\r\nHost: default.test\r\nContent-Length: 100000000\r\n\r\npartial")
	buf := make([]byte, 4096)
	n, _ := c.Read(buf)
	wantIn(t, "PUT with an unsent body", strings.ReplaceAll(string(buf[:n]), "\r\n", "\n"),
		"HTTP/1.1 308 Permanent Redirect", "Location: https://default.test/upload\n", "Connection: close\n")
	if err := expectClosed(c, 10*time.Second); err != nil {
		t.Errorf("after the redirect of a PUT: %v", err)
	}
	checkNoDeaths(t, s.harness)
}

// exerciseVhosts is the handler-path exerciser's part for virtual hosts,
// HSTS and redirects, on a site whose routes are all limited to host names
// (so that 421 is reachable), under the strict sandbox: no worker may die.
func exerciseVhosts(t *testing.T) {
	keys := t.TempDir()
	def := writeCert(t, keys, "default", false, "default.test")
	wildcard := writeCert(t, keys, "wildcard", false, "*.example.test")
	h := start(t, vhostConfig(def, wildcard, vhostRoutes+`
route "/echo" {
  hosts = ["*.example.test"]
  embedded {
    name = "echo"
  }
}
`))
	addrs := h.sup.Addrs()
	sts := wantHeader("Strict-Transport-Security", "max-age=31536000; includeSubDomains")
	noSTS := wantHeader("Strict-Transport-Security", "")
	closes := func(r *http.Response, _ []byte) error {
		if !r.Close {
			return fmt.Errorf("the connection stays open after a redirect whose body was not read")
		}
		return nil
	}
	upload := strings.Repeat("v", 300000)
	uploadSum := fmt.Sprintf("%x", sha256.Sum256([]byte(upload)))
	for _, part := range []struct {
		rc  *rawClient
		exs []exchange
	}{
		{&rawClient{tb: t, src: "127.0.0.1", dst: addrs[1].String(), sni: "www.example.test", host: "www.example.test"}, []exchange{
			{method: "GET", target: "/", status: 200, check: all(wantBody("wildcard\n"), sts)},
			{method: "GET", target: "/any/path?q=1", status: 200, check: all(wantBody("wildcard\n"), sts)},
			{method: "POST", target: "/echo", body: upload, status: 200, check: all(wantBody("POST 300000 "+uploadSum+"\n"), sts)},
			{method: "POST", target: "/echo", body: upload, chunked: true, status: 200, check: wantBody("POST 300000 " + uploadSum + "\n")},
			{method: "TRACE", target: "/", status: 405, check: sts},
			{method: "BREW", target: "/", status: 501, check: sts},
			{method: "GET", target: "/", hdr: []string{"Bad Header", "x"}, status: 400, check: sts},
			{method: "GET", target: "/", hdr: []string{"Content-Length", "1", "Transfer-Encoding", "chunked"}, status: 400, check: sts},
		}},
		{&rawClient{tb: t, src: "127.0.0.1", dst: addrs[1].String(), sni: "api.example.test", host: "api.example.test"}, []exchange{
			{method: "GET", target: "/api/x", status: 200, check: all(wantBody("api\n"), sts)},
			{method: "GET", target: "/other", status: 404, check: sts},
			{method: "GET", target: "/echo", status: 404, check: sts}, // exact beats wildcard; no fallback
		}},
		// Host differs from SNI: 421; the same unserved name in both: 404.
		{&rawClient{tb: t, src: "127.0.0.2", dst: addrs[1].String(), sni: "www.example.test", host: "Elsewhere.test:443"}, []exchange{
			{method: "GET", target: "/", status: 421, check: sts},
			{method: "POST", target: "/echo", body: upload, status: 421, check: sts},
			{method: "OPTIONS", target: "*", status: 200, check: sts},
		}},
		{&rawClient{tb: t, src: "127.0.0.2", dst: addrs[1].String(), sni: "elsewhere.test", host: "elsewhere.test"}, []exchange{
			{method: "GET", target: "/", status: 404, check: sts},
		}},
		// The plain listener: the same routes, 404 by host, no HSTS.
		{&rawClient{tb: t, src: "127.0.0.3", dst: addrs[0].String(), host: "x.example.test"}, []exchange{
			{method: "GET", target: "/", status: 200, check: all(wantBody("wildcard\n"), noSTS)},
			{method: "POST", target: "/echo", body: upload, status: 200, check: wantBody("POST 300000 " + uploadSum + "\n")},
		}},
		{&rawClient{tb: t, src: "127.0.0.3", dst: addrs[0].String(), host: "example.test"}, []exchange{
			{method: "GET", target: "/", status: 404, check: noSTS},
		}},
		// The redirecting listener.
		{&rawClient{tb: t, src: "127.0.0.4", dst: addrs[2].String(), host: "default.test:80"}, []exchange{
			{method: "GET", target: "/a/../b%20c?x=1", status: 301, check: all(wantHeader("Location", "https://default.test/b%20c?x=1"), noSTS)},
			{method: "HEAD", target: "/", status: 301, check: wantHeader("Location", "https://default.test/")},
			{method: "POST", target: "/form", body: upload, status: 308, check: all(wantHeader("Location", "https://default.test/form"), closes)},
			{method: "PUT", target: "/f", body: upload, chunked: true, status: 308, check: closes},
			{method: "DELETE", target: "/f", status: 308, check: wantHeader("Location", "https://default.test/f")},
		}},
		{&rawClient{tb: t, src: "127.0.0.4", dst: addrs[2].String(), host: "evil.test"}, []exchange{
			{method: "GET", target: "/", status: 404, check: wantHeader("Location", "")},
		}},
	} {
		part.rc.run(t, part.exs)
		part.rc.close()
	}
	checkNoDeaths(t, h)
}

// A reload that changes hsts, a route's hosts and https_redirect replaces
// the workers, and the new answers follow.
func TestVhostReload(t *testing.T) {
	s := startVhosts(t)
	old := map[int]bool{}
	for _, w := range s.snapshot().Workers {
		old[w.PID] = true
	}
	src := baseConfig + vhostConfig(s.def, s.wildcard, vhostRoutes+`
route "/" {
  hosts = ["new.test"]
  respond {
    body = "new\n"
  }
}
`)
	src = strings.Replace(src, `include_subdomains = true`, `include_subdomains = false`, 1)
	src = strings.Replace(src, `https_redirect = 443`, `https_redirect = 8443`, 1)
	if err := os.WriteFile(s.config, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.sup.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	s.waitFor("every worker replaced", 20*time.Second, func(snap view.Snapshot) bool {
		if !settled(2)(snap) {
			return false
		}
		for _, w := range snap.Workers {
			if old[w.PID] {
				return false
			}
		}
		return true
	})
	out := curlHead(t, "https", "default.test", s.https, "/", "--cacert", s.def.cert)
	wantIn(t, "hsts after the reload", out, "Strict-Transport-Security: max-age=31536000\n", "\n\ndefault\n")
	wantIn(t, "a host added by the reload", curlHead(t, "http", "new.test", s.plain, "/"), "HTTP/1.1 200 OK", "\n\nnew\n")
	wantIn(t, "the redirect's new port", curlHead(t, "http", "new.test", s.redirect, "/x"), "Location: https://new.test:8443/x\n")
	checkNoDeaths(t, s.harness)
}
