package e2e

import (
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
)

// Routes and rate-limit classes see the normalised path (issue 16 item 8):
// the tricks that slip past a raw-prefix match reach neither the upstream
// nor an unlimited class, and what a client could use to pass for another
// address never reaches the upstream.

// startDumpUpstream answers every request with its request target and its
// header fields, one "Name: value" line each, sorted; it counts requests.
func startDumpUpstream(tb testing.TB) (addr string, requests *atomic.Int64) {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	requests = new(atomic.Int64)
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		io.Copy(io.Discard, r.Body)
		var lines []string
		for k, vs := range r.Header {
			for _, v := range vs {
				lines = append(lines, k+": "+v)
			}
		}
		sort.Strings(lines)
		io.WriteString(rw, r.Method+" "+r.RequestURI+"\n"+strings.Join(lines, "\n")+"\n")
	})}
	go srv.Serve(l)
	tb.Cleanup(func() { srv.Close() })
	return l.Addr().String(), requests
}

func pathNormConfig(upstream string) string {
	return `
workers {
  count = 2
}
log {
  access_log = false
}
upstream "app" {
  addresses = ["` + upstream + `"]
}
rate_limit "login" {
  prefix = "/app/login"
  rate   = 1
  per    = "1h"
  burst  = 2
}
route "/internal/" {
  respond {
    status = 403
    body   = "denied\n"
  }
}
route "/traced/" {
  allow_trace = true
  proxy {
    upstream = "app"
  }
}
route "/" {
  proxy {
    upstream = "app"
  }
}
`
}

func TestDenyRouteOnNormalisedPath(t *testing.T) {
	up, requests := startDumpUpstream(t)
	h := start(t, pathNormConfig(up))
	cl := newClient(t, "127.0.0.2", h.addr)
	for _, p := range []string{"/internal/x", "//internal/x", "/./internal/x", "/a/../internal/x", "/%69nternal/x", "/a/%2e%2e/internal/x", "/..//internal//x", "/internal%2Fx"} {
		resp, body, err := cl.do("GET", p, "", nil, false)
		if err != nil {
			t.Fatalf("GET %s: %v", p, err)
		}
		if resp.StatusCode != http.StatusForbidden || body != "denied\n" {
			t.Errorf("GET %s = %d %q, want the deny route's 403", p, resp.StatusCode, body)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("the upstream saw %d requests, want none", n)
	}
	// What is forwarded is the normalised path.
	resp, body, err := cl.do("GET", "//app/./x/../y%7e?q=1", "", nil, false)
	if err != nil || resp.StatusCode != 200 || !strings.HasPrefix(body, "GET /app/y~?q=1\n") {
		t.Errorf("GET //app/./x/../y%%7e?q=1 = %v %q %v, want the upstream to see /app/y~?q=1", resp, body, err)
	}
	// An encoded slash that would climb after decoding is refused.
	resp, _, err = cl.do("GET", "/a%2F..%2Finternal/x", "", nil, false)
	if err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("GET /a%%2F..%%2Finternal/x = %v, %v; want 400", resp, err)
	}
}

func TestRateLimitOnNormalisedPath(t *testing.T) {
	up, _ := startDumpUpstream(t)
	h := start(t, pathNormConfig(up))
	cl := newClient(t, "127.0.0.3", h.addr)
	// A burst of 2 for the class, whichever spelling is used.
	for i, p := range []string{"/app/login", "//app/login", "/app//login", "/x/../app/login"} {
		resp, _, err := cl.do("GET", p, "", nil, false)
		if err != nil {
			t.Fatalf("GET %s: %v", p, err)
		}
		want := http.StatusOK
		if i >= 2 {
			want = http.StatusTooManyRequests
		}
		if resp.StatusCode != want {
			t.Errorf("request %d, GET %s = %d, want %d", i, p, resp.StatusCode, want)
		}
	}
	// Prefixes match at "/" boundaries: /app/loginx is another path.
	if resp, _, err := cl.do("GET", "/app/loginx", "", nil, false); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET /app/loginx = %v, %v; want 200 (not in the login class)", resp, err)
	}
}

func TestProxyStripsAddressHeadersAndTrace(t *testing.T) {
	up, requests := startDumpUpstream(t)
	h := start(t, pathNormConfig(up))
	cl := newClient(t, "127.0.0.4", h.addr)
	hdr := "X-Real-IP: 10.9.9.9\r\nX_Forwarded_For: 10.9.9.9\r\nX_Real_IP: 10.9.9.9\r\nX-Forwarded-For: 10.9.9.9\r\nX-Kept: yes\r\n"
	resp, body, err := cl.do("GET", "/app/x", hdr, nil, false)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /app/x = %v, %v", resp, err)
	}
	if strings.Contains(body, "10.9.9.9") || strings.Contains(strings.ToLower(body), "real") || strings.Contains(body, "_") {
		t.Errorf("the upstream saw a client-supplied address header:\n%s", body)
	}
	if !strings.Contains(body, "X-Kept: yes") || !strings.Contains(body, "X-Forwarded-For: 127.0.0.4") {
		t.Errorf("the upstream lacks X-Kept or this hop's X-Forwarded-For:\n%s", body)
	}
	// TRACE is refused where no route allows it, forwarded where one does.
	before := requests.Load()
	resp, _, err = cl.do("TRACE", "/app/x", "Cookie: secret\r\n", nil, false)
	if err != nil || resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") == "" {
		t.Errorf("TRACE /app/x = %v, %v; want 405 with Allow", resp, err)
	}
	if requests.Load() != before {
		t.Errorf("a refused TRACE reached the upstream")
	}
	resp, body, err = cl.do("TRACE", "/traced/x", "", nil, false)
	if err != nil || resp.StatusCode != 200 || !strings.HasPrefix(body, "TRACE /traced/x\n") {
		t.Errorf("TRACE /traced/x = %v %q %v; want it forwarded", resp, body, err)
	}
}
