package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// Stream-class routes and the stream budget (docs/DESIGN.md §10; issue 14):
// long-lived responses and upgraded connections leave the request pool, so
// they cannot starve ordinary requests, and are bounded by streams { max,
// per_client } instead, 503 at once over it.

// startSSEUpstream serves /events: an event at once, then one every 100 ms
// until the client goes (or 60 s pass).
func startSSEUpstream(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(rw)
		for i := 0; i < 600; i++ {
			if _, err := fmt.Fprintf(rw, "data: %d\n\n", i); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	})}
	go srv.Serve(l)
	tb.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

func streamsConfig(sse, ws string, max, perClient int) string {
	return fmt.Sprintf(`
workers {
  count       = 2
  concurrency = 4
}
log {
  access_log = false
}
streams {
  max        = %d
  per_client = %d
}
upstream "sse" {
  addresses       = ["%s"]
  max_connections = 400
}
upstream "ws" {
  addresses       = ["%s"]
  max_connections = 400
}
route "/events" {
  class = "stream"
  proxy {
    upstream = "sse"
  }
}
route "/ws" {
  proxy {
    upstream = "ws"
    upgrade  = ["websocket"]
  }
}
route "/ok" {
  respond {
    body = "ok\n"
  }
}
`, max, perClient, sse, ws)
}

// openSSE opens an event stream from src and reads its first event; it
// returns the connection, or nil and the status of a refusal.
func openSSE(tb testing.TB, src, addr string) (net.Conn, int, http.Header) {
	tb.Helper()
	c := dialFrom(tb, src, addr)
	tb.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET /events HTTP/1.1\r\nHost: test\r\nAccept: text/event-stream\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil {
		tb.Fatalf("event stream from %s: %v", src, err)
	}
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		c.Close()
		return nil, resp.StatusCode, resp.Header
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: ") {
		tb.Fatalf("first event from %s: %q, %v", src, line, err)
	}
	c.SetDeadline(time.Time{})
	return c, resp.StatusCode, resp.Header
}

// TestStreamsLeaveThePool: with the pool at 8 slots, 100 open event streams
// from 10 addresses and 50 open WebSockets leave a fresh client's 200
// ordinary requests all answered; the per-client and global stream caps
// answer 503 with Retry-After at once.
func TestStreamsLeaveThePool(t *testing.T) {
	sse, ws := startSSEUpstream(t), startWSUpstream(t)
	h := start(t, streamsConfig(sse, ws.addr, 150, 10))

	var open []net.Conn
	for a := 10; a < 20; a++ {
		for i := 0; i < 10; i++ {
			c, status, _ := openSSE(t, fmt.Sprintf("127.0.0.%d", a), h.addr)
			if c == nil {
				t.Fatalf("stream %d from 127.0.0.%d refused with %d", i, a, status)
			}
			open = append(open, c)
		}
	}
	// The client's own cap: an 11th stream from 127.0.0.10.
	if c, status, hdr := openSSE(t, "127.0.0.10", h.addr); c != nil || status != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" {
		t.Fatalf("11th stream of one client: status %d, Retry-After %q; want 503 with Retry-After", status, hdr.Get("Retry-After"))
	}
	for a := 20; a < 25; a++ {
		for i := 0; i < 10; i++ {
			w, status := wsDial(t, fmt.Sprintf("127.0.0.%d", a), h.addr, "/ws")
			if w == nil {
				t.Fatalf("WebSocket %d from 127.0.0.%d refused with %d", i, a, status)
			}
			if err := w.exchange(wsText, []byte("hi")); err != nil {
				t.Fatal(err)
			}
			open = append(open, w.c)
		}
	}
	s := h.snapshot()
	if s.Streams != 100 || s.Upgrades != 50 {
		t.Fatalf("stream budget in use: %d streams, %d upgrades; want 100 and 50", s.Streams, s.Upgrades)
	}
	if s.AtWorkers >= s.Pool {
		t.Fatalf("%d connections at workers of a pool of %d while streams are open", s.AtWorkers, s.Pool)
	}

	cl := newClient(t, "127.0.0.3", h.addr)
	for i := 0; i < 200; i++ {
		resp, body, err := cl.get("/ok")
		if err != nil || resp.StatusCode != 200 || body != "ok\n" {
			t.Fatalf("ordinary request %d with 150 streams open: %v, %v", i, resp, err)
		}
	}

	// The global cap: the 151st stream and the 151st upgrade.
	if c, status, _ := openSSE(t, "127.0.0.30", h.addr); c != nil || status != http.StatusServiceUnavailable {
		t.Fatalf("151st stream: status %d, want 503", status)
	}
	if w, status := wsDial(t, "127.0.0.31", h.addr, "/ws"); w != nil || status != http.StatusServiceUnavailable {
		t.Fatalf("151st upgrade: status %d, want 503", status)
	}
	s = h.snapshot()
	if s.Counters["streams_refused"] != 2 || s.Counters["upgrades_refused"] != 1 {
		t.Errorf("refusals counted: %d streams, %d upgrades; want 2 and 1", s.Counters["streams_refused"], s.Counters["upgrades_refused"])
	}

	for _, c := range open {
		c.Close()
	}
	h.waitFor("every stream released", 20*time.Second, func(s view.Snapshot) bool {
		return s.Streams == 0 && s.Upgrades == 0 && s.AtWorkers == 0
	})
}

// TestStreamBudget: over a budget of 100 streams, the 101st gets 503 at
// once, and a released stream makes room again.
func TestStreamBudget(t *testing.T) {
	h := start(t, streamsConfig(startSSEUpstream(t), closedPort(t), 100, 16))
	var open []net.Conn
	for a := 10; a < 20; a++ {
		for i := 0; i < 10; i++ {
			c, status, _ := openSSE(t, fmt.Sprintf("127.0.0.%d", a), h.addr)
			if c == nil {
				t.Fatalf("stream %d from 127.0.0.%d refused with %d", i, a, status)
			}
			open = append(open, c)
		}
	}
	c, status, hdr := openSSE(t, "127.0.0.20", h.addr)
	if c != nil || status != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" {
		t.Fatalf("101st stream: status %d, Retry-After %q; want 503 with Retry-After", status, hdr.Get("Retry-After"))
	}
	open[0].Close()
	h.waitFor("the closed stream released", 10*time.Second, func(s view.Snapshot) bool { return s.Streams == 99 })
	if c, status, _ := openSSE(t, "127.0.0.20", h.addr); c == nil {
		t.Fatalf("stream after one was released: status %d", status)
	}
	for _, c := range open {
		c.Close()
	}
}
