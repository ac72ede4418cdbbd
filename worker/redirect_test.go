package worker

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/config"
)

func testPool() *upstreamPool {
	return &upstreamPool{up: &config.Upstream{Name: "app", Addresses: []config.Address{
		{AddrPort: netip.MustParseAddrPort("127.0.0.1:18600")}, {AddrPort: netip.MustParseAddrPort("[::1]:80")},
		{Host: "app.internal", Port: 80}, {Unix: "/run/app.sock"},
	}}}
}

func TestRewriteRedirects(t *testing.T) {
	tests := []struct {
		location, refresh         string
		wantLocation, wantRefresh string
	}{
		{"http://127.0.0.1:18600/app/target", "", "https://public.example/app/target", ""},
		{"http://127.0.0.1:18600", "", "https://public.example", ""},
		{"HTTP://127.0.0.1:18600?x=1", "", "https://public.example?x=1", ""},
		{"http://[::1]/x", "0;URL='http://[::1]:80/y'", "https://public.example/x", "0;URL='https://public.example/y'"},
		// A host name address, with and without its port 80.
		{"http://app.internal:80/a", "", "https://public.example/a", ""},
		{"http://APP.internal/a", "", "https://public.example/a", ""},
		// Not the upstream's origin: another port, host, or scheme.
		{"http://app.internal:8080/a", "", "http://app.internal:8080/a", ""},
		{"http://unix:/run/app.sock/a", "", "http://unix:/run/app.sock/a", ""},
		{"http://127.0.0.1:186001/x", "", "http://127.0.0.1:186001/x", ""},
		{"http://127.0.0.1:18600.evil/x", "", "http://127.0.0.1:18600.evil/x", ""},
		{"https://127.0.0.1:18600/x", "", "https://127.0.0.1:18600/x", ""},
		{"/relative", "5", "/relative", "5"},
		{"", "5; url=http://127.0.0.1:18600/next", "", "5; url=https://public.example/next"},
	}
	for _, tt := range tests {
		res := &http.Response{Header: http.Header{}, Request: &http.Request{Header: http.Header{
			"X-Forwarded-Proto": {"https"}, "X-Forwarded-Host": {"public.example"},
		}}}
		if tt.location != "" {
			res.Header.Set("Location", tt.location)
		}
		if tt.refresh != "" {
			res.Header.Set("Refresh", tt.refresh)
		}
		testPool().rewriteRedirects(res)
		if got := res.Header.Get("Location"); got != tt.wantLocation {
			t.Errorf("Location %q: got %q, want %q", tt.location, got, tt.wantLocation)
		}
		if got := res.Header.Get("Refresh"); got != tt.wantRefresh {
			t.Errorf("Refresh %q: got %q, want %q", tt.refresh, got, tt.wantRefresh)
		}
	}
}

func FuzzRewriteRedirects(f *testing.F) {
	for _, s := range []string{"http://127.0.0.1:18600/a", "5; url=http://[::1]/b", "0;url=\"", "url=", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		res := &http.Response{Header: http.Header{"Location": {v}, "Refresh": {v}}, Request: &http.Request{Header: http.Header{
			"X-Forwarded-Proto": {"http"}, "X-Forwarded-Host": {"h.example"},
		}}}
		testPool().rewriteRedirects(res)
		for _, k := range []string{"Location", "Refresh"} {
			got := res.Header.Get(k)
			if got != v && !strings.Contains(got, "http://h.example") {
				t.Errorf("%s %q rewritten to %q without the public origin", k, v, got)
			}
		}
	})
}

func TestForwardedElement(t *testing.T) {
	for _, tt := range []struct {
		peer, host string
		tls        bool
		want       string
	}{
		{"127.0.0.2:5000", "test.example", false, `for=127.0.0.2;host="test.example";proto=http`},
		{"[::ffff:10.0.0.1]:1", "a:8080", true, `for=10.0.0.1;host="a:8080";proto=https`},
		{"[2001:db8::1]:1", "", false, `for="[2001:db8::1]";proto=http`},
		{"", "bad host", false, `for=unknown;proto=http`},
	} {
		peer, _ := netip.ParseAddrPort(tt.peer)
		if got := forwardedElement(peer, tt.host, tt.tls); got != tt.want {
			t.Errorf("forwardedElement(%s, %q, %v) = %q, want %q", tt.peer, tt.host, tt.tls, got, tt.want)
		}
	}
}

func TestClientAcceptsTrailers(t *testing.T) {
	for _, tt := range []struct {
		te   []string
		want bool
	}{
		{nil, false},
		{[]string{"trailers"}, true},
		{[]string{"gzip, Trailers;q=1"}, true},
		{[]string{"gzip", "trailers"}, true},
		{[]string{"trailersx"}, false},
	} {
		r := &http.Request{Header: http.Header{"Te": tt.te}}
		if got := clientAcceptsTrailers(r); got != tt.want {
			t.Errorf("TE %q: %v, want %v", tt.te, got, tt.want)
		}
	}
}
