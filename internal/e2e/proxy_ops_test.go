package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// What an operator relies on from the proxy beyond its basics (issue 17):
// forwarded fields from a trusted front, bodiless responses framed whatever
// the upstream declares, a stalled upstream cut off at read_timeout,
// redirects that name the public host, trailers.

// rawUpstream is a Go TCP server that answers each request on a keep-alive
// connection with the bytes its handler returns, written as they are, so a
// test controls the framing exactly. A handler that reports stall leaves the
// connection open and silent after writing; one that returns "" closes the
// connection without answering.
type rawUpstream struct {
	addr string
}

func startRawUpstream(tb testing.TB, handle func(r *http.Request, self string) (resp string, stall bool)) *rawUpstream {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	u := &rawUpstream{addr: l.Addr().String()}
	done := make(chan struct{})
	tb.Cleanup(func() {
		close(done)
		l.Close()
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					resp, stall := handle(req, u.addr)
					if resp == "" {
						return // closed without a response byte
					}
					if _, err := io.WriteString(c, resp); err != nil {
						return
					}
					if stall {
						<-done
						return
					}
				}
			}()
		}
	}()
	return u
}

// rawResponses answers the paths of TestProxyOperator.
func rawResponses(r *http.Request, self string) (string, bool) {
	switch strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, "/rawnr"), "/raw") {
	case "/304":
		// RFC 9110 §8.6 allows a 304 to declare the representation's
		// length; no body follows.
		return "HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nContent-Length: 1234\r\n\r\n", false
	case "/204":
		return "HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n", false
	case "/stall":
		return "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\nhello", true
	case "/stall-chunked":
		return "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", true
	case "/redirect":
		return "HTTP/1.1 302 Found\r\nLocation: http://" + self + "/app/target?x=1\r\n" +
			"Refresh: 3; url=http://" + self + "/app/next\r\nContent-Length: 0\r\n\r\n", false
	case "/redirect-elsewhere":
		return "HTTP/1.1 302 Found\r\nLocation: http://other.example/app\r\nContent-Length: 0\r\n\r\n", false
	case "/early-hints":
		return "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n" +
			"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok", false
	case "/trailers":
		return "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n" +
			"5\r\nhello\r\n0\r\nX-Checksum: abc123\r\n\r\n", false
	}
	return "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", false
}

func operatorConfig(echo, raw, dead, flaky string) string {
	return `
workers {
  count = 2
}
log {
  access_log = false
}
trusted_proxies = ["127.0.0.5"]
upstream "echo" {
  addresses = ["` + echo + `"]
}
upstream "raw" {
  addresses    = ["` + raw + `"]
  read_timeout = "1s"
}
upstream "flaky" {
  addresses = ["` + dead + `", "` + flaky + `"]
}
route "/echo/" {
  proxy {
    upstream = "echo"
  }
}
route "/flaky/" {
  proxy {
    upstream = "flaky"
  }
}
route "/raw/" {
  proxy {
    upstream = "raw"
  }
}
route "/rawnr/" {
  proxy {
    upstream          = "raw"
    rewrite_redirects = false
  }
}
route "/nocontent" {
  respond {
    status = 204
  }
}
route "/ok" {
  respond {
    body = "ok\n"
  }
}
`
}

func TestProxyOperator(t *testing.T) {
	echo := startEchoUpstream(t)
	raw := startRawUpstream(t, rawResponses)
	// flaky: one address closes every connection without answering, the
	// other answers GET and does the same to anything else.
	var deadSaw, flakySaw atomic.Int64
	dead := startRawUpstream(t, func(r *http.Request, _ string) (string, bool) {
		deadSaw.Add(1)
		return "", false
	})
	flaky := startRawUpstream(t, func(r *http.Request, _ string) (string, bool) {
		flakySaw.Add(1)
		if r.Method != "GET" {
			return "", false
		}
		return "HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nflaky\n", false
	})
	h := start(t, operatorConfig(echo.addr, raw.addr, dead.addr, flaky.addr))
	_, port, _ := net.SplitHostPort(h.addr)

	t.Run("forwarded", func(t *testing.T) {
		const sent = "X-Forwarded-Proto: https\r\nX-Forwarded-Host: public.example\r\nX-Forwarded-Port: 443\r\n" +
			"Forwarded: for=198.51.100.7;proto=https\r\nX-Forwarded-For: 198.51.100.7\r\n"
		for _, tt := range []struct {
			src                          string
			proto, host, port, forwarded string
		}{
			// An untrusted client's claims are dropped and replaced by
			// what the connection shows.
			{"127.0.0.2", "http", "test.example", port, `for=127.0.0.2;host="test.example";proto=http`},
			// A trusted front's reach the upstream, its Forwarded list
			// extended by this hop.
			{"127.0.0.5", "https", "public.example", "443", `for=198.51.100.7;proto=https, for=127.0.0.5;host="test.example";proto=http`},
		} {
			cl := newClient(t, tt.src, h.addr)
			resp, _, err := cl.do("GET", "/echo/fwd", sent, nil, false)
			if err != nil {
				t.Fatal(err)
			}
			for k, want := range map[string]string{
				"X-Echo-Forwarded-Proto": tt.proto,
				"X-Echo-Forwarded-Host":  tt.host,
				"X-Echo-Forwarded-Port":  tt.port,
				"X-Echo-Forwarded":       tt.forwarded,
			} {
				if got := resp.Header.Get(k); got != want {
					t.Errorf("from %s: %s = %q, want %q", tt.src, k, got, want)
				}
			}
		}
		// A trusted front's invalid values are not relayed.
		cl := newClient(t, "127.0.0.5", h.addr)
		resp, _, err := cl.do("GET", "/echo/fwd", "X-Forwarded-Proto: gopher\r\nX-Forwarded-Host: a b\r\nX-Forwarded-Port: 99999\r\n", nil, false)
		if err != nil {
			t.Fatal(err)
		}
		if p, hst, prt := resp.Header.Get("X-Echo-Forwarded-Proto"), resp.Header.Get("X-Echo-Forwarded-Host"), resp.Header.Get("X-Echo-Forwarded-Port"); p != "http" || hst != "test.example" || prt != port {
			t.Errorf("invalid values from a trusted front: upstream saw %q %q %q, want http test.example %s", p, hst, prt, port)
		}
	})

	t.Run("bodiless-pipelined", func(t *testing.T) {
		// Each bodiless response is followed, on the same connection, by
		// the pipelined request behind it.
		for _, tt := range []struct {
			method, path string
			status       int
		}{
			{"GET", "/raw/304", 304},
			{"GET", "/raw/204", 204},
			{"HEAD", "/echo/head", 200},
			{"GET", "/nocontent", 204},
		} {
			c := dialFrom(t, "127.0.0.2", h.addr)
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: test.example\r\n\r\nGET /ok HTTP/1.1\r\nHost: test.example\r\n\r\n", tt.method, tt.path)
			br := bufio.NewReader(c)
			resp, body, err := readResponse(br, tt.method)
			if err != nil {
				t.Fatalf("%s %s: %v", tt.method, tt.path, err)
			}
			if resp.StatusCode != tt.status || body != "" || resp.Close || resp.Header.Get("Transfer-Encoding") != "" {
				t.Errorf("%s %s: status %d, body %q, close %v, header %v; want %d, no body, kept alive", tt.method, tt.path, resp.StatusCode, body, resp.Close, resp.Header, tt.status)
			}
			if tt.status == 204 && resp.Header.Get("Content-Length") != "" {
				t.Errorf("%s %s: 204 with Content-Length %q", tt.method, tt.path, resp.Header.Get("Content-Length"))
			}
			resp, body, err = readResponse(br, "GET")
			if err != nil || resp.StatusCode != 200 || body != "ok\n" {
				t.Errorf("%s %s: the pipelined request behind it: %v, want 200 ok", tt.method, tt.path, err)
			}
		}
	})

	t.Run("early-hints", func(t *testing.T) {
		// A 1xx before the final response is not relayed, and the
		// connection carries the pipelined request behind it.
		c := dialFrom(t, "127.0.0.2", h.addr)
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprint(c, "GET /raw/early-hints HTTP/1.1\r\nHost: test.example\r\n\r\nGET /ok HTTP/1.1\r\nHost: test.example\r\n\r\n")
		br := bufio.NewReader(c)
		for _, want := range []string{"ok", "ok\n"} {
			resp, body, err := readResponse(br, "GET")
			if err != nil || resp.StatusCode != 200 || body != want {
				t.Fatalf("got %v %v %q, want 200 %q", err, resp, body, want)
			}
		}
	})

	t.Run("retry", func(t *testing.T) {
		// A GET whose connection closes before any response byte is sent
		// again on a fresh connection; the rotation takes it to the other
		// address.
		cl := newClient(t, "127.0.0.2", h.addr)
		for i := 0; i < 10; i++ {
			resp, body, err := cl.get("/flaky/x")
			if err != nil || resp.StatusCode != 200 || body != "flaky\n" {
				t.Fatalf("GET %d: %v %v %q, want 200 from the answering address", i, err, resp, body)
			}
		}
		if deadSaw.Load() == 0 {
			t.Errorf("the closing address was never tried: the retry was not exercised")
		}
		// A request with a body is never sent twice.
		before := deadSaw.Load() + flakySaw.Load()
		resp, _, err := cl.do("POST", "/flaky/x", "", []byte("once"), false)
		if err != nil || resp.StatusCode != 502 {
			t.Fatalf("POST: %v %v, want 502", err, resp)
		}
		if n := deadSaw.Load() + flakySaw.Load() - before; n != 1 {
			t.Errorf("the POST reached the upstreams %d times, want once", n)
		}
	})

	t.Run("stalled-body", func(t *testing.T) {
		for _, path := range []string{"/raw/stall", "/raw/stall-chunked"} {
			c := dialFrom(t, "127.0.0.3", h.addr)
			defer c.Close()
			c.SetDeadline(time.Now().Add(20 * time.Second))
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: test.example\r\n\r\n", path)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			start := time.Now()
			body, err := io.ReadAll(resp.Body)
			took := time.Since(start)
			// The body ends short of its framing: the connection was
			// closed, not completed (no terminating chunk).
			if !errors.Is(err, io.ErrUnexpectedEOF) || string(body) != "hello" {
				t.Errorf("%s: body %q, error %v; want the 5 bytes sent and an unexpected EOF", path, body, err)
			}
			if took > 1*time.Second+4*time.Second {
				t.Errorf("%s: closed after %v, want within read_timeout 1s (with slack)", path, took)
			}
		}
		// The worker slots are free again.
		h.waitFor("no connection at a worker", 5*time.Second, func(s view.Snapshot) bool { return s.AtWorkers == 0 })
		cl := newClient(t, "127.0.0.3", h.addr)
		if resp, _, err := cl.get("/ok"); err != nil || resp.StatusCode != 200 {
			t.Errorf("a request after the stalls: %v", err)
		}
	})

	t.Run("redirect", func(t *testing.T) {
		for _, tt := range []struct {
			src, path, hdr, location, refresh string
		}{
			{"127.0.0.2", "/raw/redirect", "", "http://test.example/app/target?x=1", "3; url=http://test.example/app/next"},
			// Behind a trusted TLS front: its scheme and public host.
			{"127.0.0.5", "/raw/redirect", "X-Forwarded-Proto: https\r\nX-Forwarded-Host: public.example\r\n",
				"https://public.example/app/target?x=1", "3; url=https://public.example/app/next"},
			// Another origin is left alone, and so is everything when off.
			{"127.0.0.2", "/raw/redirect-elsewhere", "", "http://other.example/app", ""},
			{"127.0.0.2", "/rawnr/redirect", "", "http://" + raw.addr + "/app/target?x=1", "3; url=http://" + raw.addr + "/app/next"},
		} {
			cl := newClient(t, tt.src, h.addr)
			resp, _, err := cl.do("GET", tt.path, tt.hdr, nil, false)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 302 || resp.Header.Get("Location") != tt.location || resp.Header.Get("Refresh") != tt.refresh {
				t.Errorf("%s from %s: %d Location %q Refresh %q, want 302 %q %q", tt.path, tt.src, resp.StatusCode,
					resp.Header.Get("Location"), resp.Header.Get("Refresh"), tt.location, tt.refresh)
			}
		}
	})

	t.Run("trailers", func(t *testing.T) {
		cl := newClient(t, "127.0.0.2", h.addr)
		resp, body, err := cl.do("GET", "/raw/trailers", "TE: trailers\r\n", nil, false)
		if err != nil {
			t.Fatal(err)
		}
		if body != "hello" || resp.Trailer.Get("X-Checksum") != "abc123" {
			t.Errorf("with TE: trailers: body %q, trailer %v; want hello and X-Checksum abc123", body, resp.Trailer)
		}
		resp, body, err = cl.do("GET", "/raw/trailers", "", nil, false)
		if err != nil {
			t.Fatal(err)
		}
		if body != "hello" || resp.Header.Get("Trailer") != "" || len(resp.Trailer) != 0 {
			t.Errorf("without TE: trailers: body %q, Trailer %q, trailers %v; want hello, none announced or sent", body, resp.Header.Get("Trailer"), resp.Trailer)
		}
	})
}
