package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The supervisor's rate limiter (issue 4, Deliver 5) seen from clients.

// rateConfig limits /login to a burst of 5 (20 a minute); extra is appended.
// 127.0.0.5 is a trusted proxy.
func rateConfig(extra string) string {
	return `
workers {
  count = 2
}
log {
  access_log = false
}
trusted_proxies = ["127.0.0.5"]
rate_limit "login" {
  prefix = "/login"
  rate   = 20
  per    = "60s"
  burst  = 5
}
route "/login" {
  respond {
    body = "login\n"
  }
}
route "/ok" {
  respond {
    body = "ok\n"
  }
}
` + extra
}

// expectStatuses sends GET path on cl with the header lines hdr(i) and
// checks each response's status; it returns the last response.
func expectStatuses(t *testing.T, cl *client, path string, hdr func(i int) string, want ...int) {
	t.Helper()
	for i, w := range want {
		h := ""
		if hdr != nil {
			h = hdr(i)
		}
		resp, body, err := cl.do("GET", path, h, nil, false)
		if err != nil {
			t.Fatalf("request %d to %s: %v", i, path, err)
		}
		if resp.StatusCode != w {
			t.Fatalf("request %d to %s: status %d (%q), want %d", i, path, resp.StatusCode, body, w)
		}
		if resp.Close {
			t.Fatalf("request %d to %s: the connection is closed after a %d", i, path, w)
		}
		if w == 429 {
			// At most one token's time: per/rate, at most 60 s here.
			secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			if err != nil || secs < 1 || secs > 60 {
				t.Errorf("request %d: Retry-After %q, want 1..60 seconds", i, resp.Header.Get("Retry-After"))
			}
		}
	}
}

func TestRateLimit(t *testing.T) {
	h := start(t, rateConfig(""))

	t.Run("burst-then-429-keeps-connection", func(t *testing.T) {
		cl := newClient(t, "127.0.0.2", h.addr)
		// The 429s come on the same keep-alive connection, which keeps
		// being answered afterwards.
		expectStatuses(t, cl, "/login", nil, 200, 200, 200, 200, 200)
		resp, body, err := cl.do("GET", "/login", "", nil, false)
		if err != nil || resp.StatusCode != 429 || body != "429 too many requests\n" {
			t.Fatalf("the 6th request: %v %v %q, want 429", err, resp, body)
		}
		// One token every 3 s: the wait is at most 3 s, rounded up.
		if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || secs < 1 || secs > 3 {
			t.Errorf("Retry-After %q, want 1..3 seconds", resp.Header.Get("Retry-After"))
		}
		if resp.Close {
			t.Errorf("the 429 closes the connection")
		}
		expectStatuses(t, cl, "/login", nil, 429)
		// No default class: other paths are not limited.
		expectStatuses(t, cl, "/ok", nil, 200, 200, 200, 200, 200, 200, 200, 200)
		// Another client is unaffected.
		other := newClient(t, "127.0.0.3", h.addr)
		expectStatuses(t, other, "/login", nil, 200, 200, 200, 200, 200, 429)
		// A second connection of the first client shares its bucket.
		again := newClient(t, "127.0.0.2", h.addr)
		expectStatuses(t, again, "/login", nil, 429)
	})

	t.Run("untrusted-forwarded-for-ignored", func(t *testing.T) {
		// An untrusted peer naming a new client in every request is still
		// charged itself.
		cl := newClient(t, "127.0.0.4", h.addr)
		expectStatuses(t, cl, "/login", func(i int) string {
			return fmt.Sprintf("X-Forwarded-For: 198.51.100.%d\r\n", i+1)
		}, 200, 200, 200, 200, 200, 429)
	})

	t.Run("trusted-forwarded-for", func(t *testing.T) {
		// Behind a trusted proxy the forwarded client is charged, not
		// the proxy.
		cl := newClient(t, "127.0.0.5", h.addr)
		xff := func(addr string) func(int) string {
			return func(int) string { return "X-Forwarded-For: " + addr + "\r\n" }
		}
		expectStatuses(t, cl, "/login", xff("203.0.113.7"), 200, 200, 200, 200, 200, 429)
		expectStatuses(t, cl, "/login", xff("203.0.113.8"), 200, 200, 200, 200, 200, 429)
		// A trusted entry is walked past; an invalid one charges the peer.
		expectStatuses(t, cl, "/login", xff("203.0.113.7, 127.0.0.5"), 429)
		expectStatuses(t, cl, "/login", xff("not-an-ip"), 200, 200, 200, 200, 200, 429)
		// The proxy's own bucket was the one charged for not-an-ip.
		expectStatuses(t, cl, "/login", nil, 429)
	})

	s := h.snapshot()
	// 127.0.0.2 ×3, 127.0.0.3, 127.0.0.4, 203.0.113.7 ×2, 203.0.113.8,
	// the proxy ×2.
	if got := counter(t, s, "rate_limited"); got != 10 {
		t.Errorf("rate_limited = %d, want 10", got)
	}
	if got := uint64(s.RateLimitBuckets); got != 6 {
		t.Errorf("rate_limit_buckets = %d, want 6", got)
	}
}

// A "default" class limits every path no other class matches.
func TestRateLimitDefaultClass(t *testing.T) {
	h := start(t, rateConfig(`
rate_limit "default" {
  rate  = 10
  per   = "60s"
  burst = 3
}
`))
	cl := newClient(t, "127.0.0.2", h.addr)
	expectStatuses(t, cl, "/ok", nil, 200, 200, 200, 429)
	// /login is its own class, with its own bucket.
	expectStatuses(t, cl, "/login", nil, 200, 200, 200, 200, 200, 429)
	expectStatuses(t, cl, "/nowhere", nil, 429)
	other := newClient(t, "127.0.0.3", h.addr)
	expectStatuses(t, other, "/ok", nil, 200)
}

// 50 000 distinct clients (50 times the bound), named by a trusted proxy, keep the bucket table
// at its bound.
func TestRateLimitTableBounded(t *testing.T) {
	const (
		entries  = 1000
		clients  = 50000
		conns    = 8
		perConn  = 1000 // requests per connection (docs/DESIGN.md §7: fixed)
		pipeline = 50
	)
	h := start(t, rateConfig(fmt.Sprintf(`
rate_limit_entries = %d
rate_limit "default" {
  rate  = 1
  per   = "60s"
  burst = 1
}
`, entries)))

	var (
		next    atomic.Int64
		served  atomic.Int64
		errOnce sync.Once
		failed  atomic.Bool
	)
	fail := func(format string, args ...any) {
		errOnce.Do(func() { t.Errorf(format, args...) })
		failed.Store(true)
	}
	// Sample the table's size throughout.
	stop := make(chan struct{})
	sampled := make(chan uint64)
	go func() {
		var most uint64
		defer func() { sampled <- most }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			most = max(most, uint64(h.snapshot().RateLimitBuckets))
		}
	}()

	start := time.Now()
	var wg sync.WaitGroup
	for g := 0; g < conns; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var req bytes.Buffer
			for !failed.Load() {
				first := next.Add(perConn) - perConn
				if first >= clients {
					return
				}
				c := dialFrom(t, "127.0.0.5", h.addr)
				br := bufio.NewReaderSize(c, 64<<10)
				for i := first; i < first+perConn && !failed.Load(); i += pipeline {
					// A pipelined batch, each request from another client.
					req.Reset()
					for j := i; j < i+pipeline; j++ {
						fmt.Fprintf(&req, "GET /ok HTTP/1.1\r\nHost: test\r\nX-Forwarded-For: 10.%d.%d.%d\r\n\r\n", j>>16, j>>8&255, j&255)
					}
					c.SetDeadline(time.Now().Add(20 * time.Second))
					if _, err := c.Write(req.Bytes()); err != nil {
						fail("writing requests %d..: %v", i, err)
						break
					}
					for j := i; j < i+pipeline; j++ {
						resp, body, err := readResponse(br, "GET")
						if err != nil {
							fail("request %d: %v", j, err)
							break
						}
						if resp.StatusCode != 200 {
							fail("request %d (a new client): status %d %q", j, resp.StatusCode, body)
							break
						}
						served.Add(1)
					}
				}
				c.Close()
			}
		}()
	}
	wg.Wait()
	close(stop)
	most := <-sampled
	t.Logf("%d requests in %v; the table held at most %d buckets", served.Load(), time.Since(start), most)
	if served.Load() != clients {
		t.Fatalf("%d requests served, want %d", served.Load(), clients)
	}
	if most > entries {
		t.Errorf("the table held %d buckets, over rate_limit_entries %d", most, entries)
	}
	s := h.snapshot()
	if got := uint64(s.RateLimitBuckets); got != entries {
		t.Errorf("rate_limit_buckets = %d after %d clients, want exactly %d", got, clients, entries)
	}
	if got := counter(t, s, "rate_limited"); got != 0 {
		t.Errorf("rate_limited = %d, want 0 (each client sent one request)", got)
	}
	// A new client goes in as the most recent entry and is limited; the
	// first client was evicted long ago and starts with a full bucket.
	cl := newClient(t, "127.0.0.5", h.addr)
	xff := func(addr string) func(int) string {
		return func(int) string { return "X-Forwarded-For: " + addr + "\r\n" }
	}
	expectStatuses(t, cl, "/ok", xff("192.0.2.1"), 200, 429)
	expectStatuses(t, cl, "/ok", xff("10.0.0.0"), 200, 429)
	if got := uint64(h.snapshot().RateLimitBuckets); got != entries {
		t.Errorf("rate_limit_buckets = %d, want %d", got, entries)
	}
}
