package e2e

import (
	"bufio"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

func TestKeepAliveOneConnection(t *testing.T) {
	h := start(t, "")
	cl := newClient(t, "127.0.0.1", h.addr)
	for i, path := range []string{"/", "/ok", "/"} {
		resp, body, err := cl.get(path)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
		if got := resp.Header.Get("Connection"); got != "keep-alive" {
			t.Errorf("request %d: Connection %q, want keep-alive", i, got)
		}
		if got := resp.Header.Get("Keep-Alive"); got != "timeout=15" {
			t.Errorf("request %d: Keep-Alive %q, want timeout=15", i, got)
		}
		if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("request %d: X-Content-Type-Options %q", i, got)
		}
		if path == "/" && !strings.Contains(body, "<h1>hello</h1>") {
			t.Errorf("request %d: body %q", i, body)
		}
	}
	s := h.waitFor("three requests counted", 10*time.Second, func(s view.Snapshot) bool {
		return s.Counters["requests"] >= 3
	})
	if got := s.Counters["accepted"]; got != 1 {
		t.Errorf("accepted %d connections, want 1 for three requests", got)
	}
}

func TestHTTP10ClosesUnlessKeepAlive(t *testing.T) {
	h := start(t, "")
	c := dialFrom(t, "127.0.0.1", h.addr)
	defer c.Close()
	fmt.Fprintf(c, "GET /ok HTTP/1.0\r\n\r\n")
	resp, _, err := readResponse(bufio.NewReader(c), "GET")
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Close { // ReadResponse consumes the "Connection: close" field into Close
		t.Errorf("HTTP/1.0 response does not close: header %v", resp.Header)
	}
	if err := expectClosed(c, 5*time.Second); err != nil {
		t.Error(err)
	}
	cl := newClient(t, "127.0.0.1", h.addr)
	cl.c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(cl.c, "GET /ok HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
	resp, _, err = readResponse(cl.br, "GET")
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Header.Get("Connection"); got != "keep-alive" {
		t.Errorf("HTTP/1.0 keep-alive response Connection = %q", got)
	}
	if _, _, err := cl.get("/ok"); err != nil {
		t.Errorf("second request on the kept HTTP/1.0 connection: %v", err)
	}
}

// No worker waits on a quiet connection: 500 silent and 500 idle kept-alive
// connections cost no worker, and are closed at their timeouts.
func TestQuietConnectionsHoldNoWorker(t *testing.T) {
	h := start(t, `
workers {
  count       = 2
  concurrency = 4
}
limits {
  first_byte_timeout         = "2s"
  keep_alive_idle_timeout    = "3s"
  max_connections_per_client = 2000
}
`)
	const quiet = 500
	var silent, idle []net.Conn
	for i := 0; i < quiet; i++ {
		silent = append(silent, dialFrom(t, "127.0.0.2", h.addr))
	}
	for i := 0; i < quiet; i++ {
		cl := newClient(t, "127.0.0.3", h.addr)
		if resp, _, err := cl.get("/ok"); err != nil || resp.StatusCode != 200 {
			t.Fatalf("kept-alive connection %d: %v", i, err)
		}
		idle = append(idle, cl.c)
	}
	defer func() {
		for _, c := range silent {
			c.Close()
		}
	}()
	for i := 0; i < 200; i++ {
		cl := newClient(t, "127.0.0.4", h.addr)
		resp, _, err := cl.get("/ok")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("fresh client request %d: %v", i, err)
		}
		cl.c.Close()
	}
	// Closed at the first-byte and idle timeouts (2 s, 3 s), with a generous
	// bound; the silent ones silently, without a 408.
	var wg sync.WaitGroup
	errs := make(chan error, 2*quiet)
	for _, c := range append(silent, idle...) {
		wg.Add(1)
		go func(c net.Conn) {
			defer wg.Done()
			if err := expectClosed(c, 15*time.Second); err != nil {
				errs <- err
			}
		}(c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	s := h.snapshot()
	if got := s.Counters["timeout_first_byte"]; got < quiet {
		t.Errorf("timeout_first_byte = %d, want >= %d", got, quiet)
	}
	if got := s.Counters["timeout_idle"]; got < quiet {
		t.Errorf("timeout_idle = %d, want >= %d", got, quiet)
	}
}

// The per-client share: with pool 8 (share 2), 8 stalled connections from one
// address hold 2 worker slots while another address is served; a trusted
// proxy is not held to the share.
func TestPerClientShare(t *testing.T) {
	h := start(t, `
workers {
  count       = 2
  concurrency = 4
}
limits {
  no_worker_timeout = "60s"
}
trusted_proxies = ["127.0.0.4"]
route "/ok" {
  respond {
    body = "ok\n"
  }
}
route "/hold" {
  request_buffering = false
  respond {
    body = "held\n"
  }
}
`)
	stall := func(src string, n int) {
		for i := 0; i < n; i++ {
			c := dialFrom(t, src, h.addr)
			t.Cleanup(func() { c.Close() })
			fmt.Fprint(c, holdRequest) // held at a worker until its body comes
		}
	}
	stall("127.0.0.2", 8)
	s := h.waitFor("127.0.0.2 to hold its share with 6 waiting", 10*time.Second, func(s view.Snapshot) bool {
		c := s.Client("127.0.0.2")
		return c.Out == 2 && c.Waiting == 6
	})
	if s.Share != 2 || s.Pool != 8 {
		t.Fatalf("pool %d share %d, want 8 and 2", s.Pool, s.Share)
	}
	for i := 0; i < 20; i++ {
		cl := newClient(t, "127.0.0.3", h.addr)
		if resp, _, err := cl.get("/ok"); err != nil || resp.StatusCode != 200 {
			t.Fatalf("127.0.0.3 request %d: %v", i, err)
		}
		cl.c.Close()
	}
	if got := h.snapshot().Client("127.0.0.2").Out; got > 2 {
		t.Fatalf("127.0.0.2 holds %d slots, over its share of 2", got)
	}
	stall("127.0.0.4", 5)
	h.waitFor("trusted proxy 127.0.0.4 to hold 5 slots", 10*time.Second, func(s view.Snapshot) bool {
		return s.Client("127.0.0.4").Out == 5
	})
	cl := newClient(t, "127.0.0.3", h.addr)
	if resp, _, err := cl.get("/ok"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("127.0.0.3 with the last free slot: %v", err)
	}
	if got := h.snapshot().AtWorkers; got > 8 {
		t.Fatalf("%d connections at workers, over the pool of 8", got)
	}
}

// The admission race (docs/DESIGN.md §2.6): exactly
// share lanes, each strictly sequential, are never made to wait.
func TestShareLanesNeverWait(t *testing.T) {
	h := start(t, `
workers {
  count       = 2
  concurrency = 4
}
`)
	const lanes, total = 2, 2000
	var wg sync.WaitGroup
	errs := make(chan error, lanes)
	for l := 0; l < lanes; l++ {
		cl := newClient(t, "127.0.0.2", h.addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < total/lanes; i++ {
				resp, _, err := cl.get("/ok")
				if err != nil {
					errs <- fmt.Errorf("request %d: %v", i, err)
					return
				}
				if resp.StatusCode != 200 {
					errs <- fmt.Errorf("request %d: status %d", i, resp.StatusCode)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// A lane reads its last response before the worker's Done reaches the
	// supervisor, so wait for the count rather than race it.
	s := h.waitFor("every request counted", 10*time.Second, func(s view.Snapshot) bool {
		return s.Counters["requests"] == total
	})
	if got := s.Client("127.0.0.2").Waits; got != 0 {
		t.Errorf("a lane within the share waited %d times", got)
	}
	if got := s.Counters["share_waits"] + s.Counters["timeout_no_worker"]; got != 0 {
		t.Errorf("share_waits+timeout_no_worker = %d, want 0", got)
	}
}

func TestPipelining(t *testing.T) {
	h := start(t, "")
	cl := newClient(t, "127.0.0.1", h.addr)
	cl.c.SetDeadline(time.Now().Add(10 * time.Second))
	req := "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\nGET /c HTTP/1.1\r\nHost: x\r\n\r\n"
	if _, err := cl.c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"A", "B", "C"} {
		_, body, err := readResponse(cl.br, "GET")
		if err != nil {
			t.Fatalf("response %s: %v", want, err)
		}
		if body != want {
			t.Fatalf("got body %q, want %q: responses out of order", body, want)
		}
	}
	// One request in many small writes.
	for _, b := range []byte("GET /b HTTP/1.1\r\nHost: x\r\n\r\n") {
		if _, err := cl.c.Write([]byte{b}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if _, body, err := readResponse(cl.br, "GET"); err != nil || body != "B" {
		t.Fatalf("dribbled request: body %q, err %v", body, err)
	}
}

// More pipelined requests than one dispatch serves go back to the
// supervisor as carried input and are answered in order.
func TestPipeliningCarriedAcrossDispatches(t *testing.T) {
	h := start(t, "")
	cl := newClient(t, "127.0.0.1", h.addr)
	cl.c.SetDeadline(time.Now().Add(10 * time.Second))
	const n = 30
	var req strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&req, "GET /%c HTTP/1.1\r\nHost: x\r\n\r\n", "abc"[i%3])
	}
	if _, err := cl.c.Write([]byte(req.String())); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		_, body, err := readResponse(cl.br, "GET")
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if want := string("ABC"[i%3]); body != want {
			t.Fatalf("response %d: body %q, want %q", i, body, want)
		}
	}
	if got := h.snapshot().Counters["dispatches"]; got < 2 {
		t.Errorf("%d dispatches for %d pipelined requests; want the input carried back at least once", got, n)
	}
}

func TestWorkerKilledUnderLoad(t *testing.T) {
	h := start(t, `
workers {
  count       = 2
  concurrency = 4
}
`)
	h.expectDeaths(1)
	victim := h.snapshot().Workers[0]
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 10000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.DialTimeout("tcp", h.addr, 5*time.Second)
				if err != nil {
					continue
				}
				c.SetDeadline(time.Now().Add(5 * time.Second))
				fmt.Fprintf(c, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
				readResponse(bufio.NewReader(c), "GET") // errors expected for the victim's
				c.Close()
			}
		}(g)
	}
	time.Sleep(300 * time.Millisecond)
	if err := syscall.Kill(victim.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s := h.waitFor("the killed worker to be replaced", 15*time.Second, func(s view.Snapshot) bool {
		w := s.Workers[0]
		return w.Restarts >= 1 && w.State == "ready" && w.PID != victim.PID
	})
	close(stop)
	wg.Wait()
	if got := s.Counters["worker_deaths"]; got < 1 {
		t.Errorf("worker_deaths = %d", got)
	}
	cl := newClient(t, "127.0.0.1", h.addr)
	for i := 0; i < 50; i++ {
		if resp, _, err := cl.get("/ok"); err != nil || resp.StatusCode != 200 {
			t.Fatalf("request %d after the replacement: %v", i, err)
		}
	}
	if !strings.Contains(h.logs.String(), "signal 9") {
		t.Errorf("the death was not logged with its signal:\n%s", h.logs.String())
	}
	// No connection is left recorded at the dead worker.
	h.waitFor("no connection at workers", 10*time.Second, func(s view.Snapshot) bool { return s.AtWorkers == 0 })
}

// Listeners on IPv6 serve too, and IPv6 clients are keyed by their /64.
func TestIPv6Listener(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	ln.Close()
	h := start(t, `
listener "v6" {
  address = "[::1]:0"
}
`)
	v6 := h.sup.Addrs()[1].String()
	cl := newClient(t, "::1", v6)
	if resp, _, err := cl.get("/ok"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("request over IPv6: %v", err)
	}
	s := h.waitFor("the IPv6 client", 10*time.Second, func(s view.Snapshot) bool {
		return s.Client("::").Conns == 1 // ::1 masked to its /64
	})
	if len(s.Listeners) != 2 {
		t.Errorf("listeners %v", s.Listeners)
	}
}

// The log level changes at run time for the supervisor and its workers.
func TestLogLevelReachesWorkers(t *testing.T) {
	h := start(t, "")
	bad := func() {
		c := dialFrom(t, "127.0.0.1", h.addr)
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET /ok HTTP/1.1\r\nHost: x\r\nBad Name: y\r\n\r\n")
		if resp, _, err := readResponse(bufio.NewReader(c), "GET"); err != nil || resp.StatusCode != 400 {
			t.Fatalf("malformed request: %v", err)
		}
	}
	bad()
	if strings.Contains(h.logs.String(), "transport error") {
		t.Fatal("a worker logged at debug level while the level is info")
	}
	if err := h.sup.SetLogLevel("debug"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(h.logs.String(), "transport error") {
		if time.Now().After(deadline) {
			t.Fatal("a worker's debug line never appeared after log-level debug")
		}
		bad()
		time.Sleep(50 * time.Millisecond)
	}
}

// Each worker runs its Go code on workers.threads threads, or on the
// supervisor's CPUs shared among the workers (at least one each), reports
// it when ready, and serves so.
func TestWorkerThreads(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       int
	}{
		{"set", "workers {\n  count   = 2\n  threads = 3\n}\n", 3},
		{"shared", "workers {\n  count = 2\n}\n", max(1, runtime.GOMAXPROCS(0)/2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, tc.body)
			cl := newClient(t, "127.0.0.2", h.addr)
			if resp, body, err := cl.get("/ok"); err != nil || resp.StatusCode != 200 || body != "ok\n" {
				t.Fatalf("GET /ok: %v %q", err, body)
			}
			ws := h.snapshot().Workers
			if len(ws) != 2 {
				t.Fatalf("%d workers, want 2", len(ws))
			}
			for _, w := range ws {
				if w.Threads != tc.want {
					t.Errorf("worker %d reports %d threads, want %d", w.Slot, w.Threads, tc.want)
				}
			}
		})
	}
}
