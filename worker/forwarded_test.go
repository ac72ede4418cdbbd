package worker

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"testing"

	"github.com/gatehouse-dev/gatehouse/config"
)

// The forwarded fields and the redirect rewriting follow the listener the
// request came on: its scheme (Request.TLS) and its port, unless a trusted
// front says otherwise.
func TestForwardedListenerScheme(t *testing.T) {
	w := &Worker{setup: &setup{cfg: &config.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.5/32")}}}}
	front := http.Header{
		"X-Forwarded-Proto": {"http"}, "X-Forwarded-Host": {"public.example"}, "X-Forwarded-Port": {"80"},
	}
	for _, tt := range []struct {
		name      string
		peer      string
		tls       bool
		port      string
		header    http.Header
		proto     string
		fport     string
		forwarded string
		location  string
	}{
		{"tls", "127.0.0.2:4000", true, "8443", nil,
			"https", "8443", `for=127.0.0.2;host="site-a.test:8443";proto=https`, "https://site-a.test:8443/next"},
		{"plain", "127.0.0.2:4000", false, "8080", nil,
			"http", "8080", `for=127.0.0.2;host="site-a.test:8080";proto=http`, "http://site-a.test:8080/next"},
		{"untrusted claims over tls", "127.0.0.2:4000", true, "8443", front,
			"https", "8443", `for=127.0.0.2;host="site-a.test:8443";proto=https`, "https://site-a.test:8443/next"},
		{"trusted front over tls", "127.0.0.5:4000", true, "8443", front,
			"http", "80", `for=127.0.0.5;host="site-a.test:8443";proto=https`, "http://public.example/next"},
	} {
		cs := &connServer{port: tt.port, portAsked: true}
		cs.parent = connContext{Context: t.Context(), cs: cs}
		in, _ := http.NewRequestWithContext(&cs.parent, "GET", "/app", nil)
		in.Host = "site-a.test:" + tt.port
		in.RemoteAddr = tt.peer
		if tt.header != nil {
			in.Header = tt.header.Clone()
		}
		if tt.tls {
			in.TLS = &tls.ConnectionState{}
		}
		out := in.Clone(in.Context())
		out.Header.Del("X-Forwarded-Proto")
		out.Header.Del("X-Forwarded-Host")
		w.setForwarded(&httputil.ProxyRequest{In: in, Out: out})
		for k, want := range map[string]string{"X-Forwarded-Proto": tt.proto, "X-Forwarded-Port": tt.fport, "Forwarded": tt.forwarded} {
			if got := out.Header.Get(k); got != want {
				t.Errorf("%s: %s = %q, want %q", tt.name, k, got, want)
			}
		}
		res := &http.Response{Header: http.Header{"Location": {"http://127.0.0.1:18600/next"}}, Request: out}
		testPool().rewriteRedirects(res)
		if got := res.Header.Get("Location"); got != tt.location {
			t.Errorf("%s: Location rewritten to %q, want %q", tt.name, got, tt.location)
		}
	}
}

// The local port is known on a TLS connection too, from its transport's
// descriptor (X-Forwarded-Port).
func TestLocalPortTLS(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f, err := s.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, want, _ := net.SplitHostPort(l.Addr().String())
	for _, cs := range []*connServer{{fd: int(f.Fd())}, {fd: -1, tls: true, tfd: int(f.Fd())}} {
		if got := cs.localPort(); got != want {
			t.Errorf("tls %v: localPort %q, want %q", cs.tls, got, want)
		}
	}
}
