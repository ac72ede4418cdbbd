package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// bodyUpstream is an HTTP server that records, for each request with a body,
// when its handler was entered and how much body it read.
type bodyUpstream struct {
	addr string
	mu   sync.Mutex
	seen map[string]upstreamSeen // by X-Id
	slow atomic.Int64            // requests of the attack that reached it
}

type upstreamSeen struct {
	entered time.Time
	n       int64
}

func startBodyUpstream(t *testing.T) *bodyUpstream {
	u := &bodyUpstream{seen: map[string]upstreamSeen{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.addr = ln.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered := time.Now()
		if r.Header.Get("X-Slow") != "" {
			u.slow.Add(1)
		}
		n, _ := io.Copy(io.Discard, r.Body)
		if id := r.Header.Get("X-Id"); id != "" {
			u.mu.Lock()
			u.seen[id] = upstreamSeen{entered: entered, n: n}
			u.mu.Unlock()
		}
		io.WriteString(w, "ok\n")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return u
}

// slowBody sends a POST with Content-Length n in 2 KiB pieces every 100 ms
// (about 20 KiB/s, above the minimum body rate) and returns when the body is
// sent, the server answered or closed, or ctx ended. It returns the time
// taken just before the write of the last byte (zero if that write failed):
// nothing may reach the upstream's handler before it, and a time taken after
// the write could be late on a loaded machine.
func slowBody(ctx context.Context, src, addr, path, id string, n int, slow bool) (last time.Time, resp *http.Response, err error) {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return last, nil, err
	}
	defer c.Close()
	go func() {
		<-ctx.Done()
		c.SetDeadline(time.Now())
	}()
	hdr := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nX-Id: %s\r\nContent-Length: %d\r\n", path, id, n)
	if slow {
		hdr += "X-Slow: 1\r\n"
	}
	if _, err := c.Write([]byte(hdr + "\r\n")); err != nil {
		return last, nil, err
	}
	piece := []byte(strings.Repeat("b", 2048))
	var beforeLast time.Time
	for sent := 0; sent < n; {
		k := min(len(piece), n-sent)
		beforeLast = time.Now()
		if _, err := c.Write(piece[:k]); err != nil {
			return last, nil, err
		}
		sent += k
		if sent < n && !sleepCtx(ctx, 100*time.Millisecond) {
			return last, nil, ctx.Err()
		}
	}
	last = beforeLast
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, _, err = readResponse(bufio.NewReader(c), "POST")
	return last, resp, err
}

// TestSlowBodiesDistributed is the slow-body attack one step after the slow
// heads: 40 connections from 5 addresses, each a POST with Content-Length:
// 1000000 sending 2 KiB every 100 ms, to a proxy route, against the default
// pool. Bodies are received outside the pool, so a client on another address
// gets at least 99% of its requests answered within 3 s, and no slow request
// reaches the upstream before its body is complete.
func TestSlowBodiesDistributed(t *testing.T) {
	if testing.Short() {
		t.Skip("attack test; skipped with -short")
	}
	up := startBodyUpstream(t)
	h := start(t, `
upstream "app" {
  addresses = ["`+up.addr+`"]
  max_connections = 512
}
route "/ok" {
  proxy {
    upstream = "app"
  }
}
route "/up/" {
  proxy {
    upstream = "app"
  }
}
`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var attack sync.WaitGroup
	for i := 0; i < 40; i++ {
		attack.Add(1)
		go func(i int) {
			defer attack.Done()
			slowBody(ctx, fmt.Sprintf("127.0.0.%d", 20+i%5), h.addr, "/up/slow", fmt.Sprintf("slow-%d", i), 1000000, true)
		}(i)
	}
	h.waitFor("40 bodies received outside the pool", 20*time.Second, func(s view.Snapshot) bool {
		return s.BodyConns >= 40
	})
	// A small slow body completes during the attack: it must reach the
	// upstream only after its last byte was sent.
	type result struct {
		last time.Time
		resp *http.Response
		err  error
	}
	small := make(chan result, 1)
	go func() {
		last, resp, err := slowBody(ctx, "127.0.0.4", h.addr, "/up/small", "small", 60000, false)
		small <- result{last, resp, err}
	}()
	sent, answered, failures := legitLoad(h.addr, "127.0.0.3", 50, 12*time.Second, 3*time.Second)
	s := h.snapshot()
	sm := <-small
	cancel()
	attack.Wait()

	t.Logf("legitimate: %d/%d answered, failures %v; body budget: %d connections, %d bytes; counters: bodies_buffered %d, body_budget_refused %d, body_no_slot %d",
		answered, sent, failures, s.BodyConns, s.BodyBytes, s.Counters["bodies_buffered"], s.Counters["body_budget_refused"], s.Counters["body_no_slot"])
	if sent < 300 {
		t.Fatalf("only %d legitimate requests were sent", sent)
	}
	if answered*100 < sent*99 {
		t.Errorf("legitimate client: %d of %d answered within 3s, want at least 99%%", answered, sent)
	}
	if n := up.slow.Load(); n != 0 {
		t.Errorf("%d slow requests reached the upstream before their bodies were complete", n)
	}
	if s.BodyConns < 40 || s.AtWorkers >= s.Pool {
		t.Errorf("during the attack: %d bodies outside the pool, %d of %d slots at workers", s.BodyConns, s.AtWorkers, s.Pool)
	}
	if sm.err != nil || sm.resp.StatusCode != 200 {
		t.Fatalf("small slow body: %v %v", sm.err, sm.resp)
	}
	up.mu.Lock()
	seen := up.seen["small"]
	up.mu.Unlock()
	if seen.n != 60000 {
		t.Errorf("the upstream read %d bytes of the small body, want 60000", seen.n)
	}
	if seen.entered.Before(sm.last) {
		t.Errorf("the upstream handler started before the client sent the body's last byte")
	}
}

// TestStreamedBodyHoldsSlot checks request_buffering = false: the handler
// reads the body as it arrives, so the request holds its pool slot while the
// body is slow, and nothing is charged to the body budget.
func TestStreamedBodyHoldsSlot(t *testing.T) {
	h := start(t, `
route "/stream" {
  request_buffering = false
  respond {
    body = "streamed\n"
  }
}
route "/ok" {
  respond {
    body = "ok\n"
  }
}
`)
	c := dialFrom(t, "127.0.0.2", h.addr)
	defer c.Close()
	c.Write([]byte("POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nx"))
	h.waitFor("the streamed request at a worker", 10*time.Second, func(s view.Snapshot) bool {
		return s.Client("127.0.0.2").Out == 1 && s.BodyConns == 0
	})
	b := dialFrom(t, "127.0.0.2", h.addr)
	defer b.Close()
	b.Write([]byte("POST /ok HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nx"))
	// Its connection is charged; its bytes are not, not yet: one of the 10
	// declared arrived, under a step of the worker's reports.
	h.waitFor("the buffered request outside the pool", 10*time.Second, func(s view.Snapshot) bool {
		c := s.Client("127.0.0.2")
		return c.Out == 1 && s.BodyConns == 1 && s.BodyBytes == 0 && c.BodyConns == 1 && c.BodyBytes == 0
	})
	b.Write([]byte("123456789"))
	b.SetReadDeadline(time.Now().Add(10 * time.Second))
	if resp, body, err := readResponse(bufio.NewReader(b), "POST"); err != nil || resp.StatusCode != 200 || body != "ok\n" {
		t.Fatalf("buffered request: %v %v %q", err, resp, body)
	}
	c.Write([]byte("123456789"))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if resp, body, err := readResponse(bufio.NewReader(c), "POST"); err != nil || resp.StatusCode != 200 || body != "streamed\n" {
		t.Fatalf("streamed request: %v %v %q", err, resp, body)
	}
	if s := h.snapshot(); s.BodyConns != 0 || s.BodyBytes != 0 {
		t.Errorf("body budget not released: %d connections, %d bytes", s.BodyConns, s.BodyBytes)
	}
}
