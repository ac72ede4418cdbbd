package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/admin"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// Passive health, failover and the connection budget counting what is in
// use (issue 17 items 1 and 5), against real upstreams: Go servers and
// python3's http.server, one killed mid-test and brought back.

// closingUpstream is a Go net/http server without keep-alive, so every
// proxied request dials. It counts the requests it answered; stop kills it
// (listener and connections) and restart brings it back on the same port.
type closingUpstream struct {
	addr   string
	served atomic.Int64
	mu     sync.Mutex
	srv    *http.Server
}

func startClosingUpstream(tb testing.TB) *closingUpstream {
	tb.Helper()
	u := &closingUpstream{}
	u.listen(tb, "127.0.0.1:0")
	tb.Cleanup(u.stop)
	return u
}

func (u *closingUpstream) listen(tb testing.TB, addr string) {
	tb.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		u.served.Add(1)
		fmt.Fprintln(rw, "go upstream")
	})}
	srv.SetKeepAlivesEnabled(false)
	u.mu.Lock()
	u.addr, u.srv = l.Addr().String(), srv
	u.mu.Unlock()
	go srv.Serve(l)
}

func (u *closingUpstream) stop() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.srv != nil {
		u.srv.Close()
		u.srv = nil
	}
}

func (u *closingUpstream) restart(tb testing.TB) { u.listen(tb, u.addr) }

// upstreamOf returns the named upstream of a snapshot.
func upstreamOf(tb testing.TB, s view.Snapshot, name string) view.UpstreamInfo {
	tb.Helper()
	for _, u := range s.Upstreams {
		if u.Name == name {
			return u
		}
	}
	tb.Fatalf("snapshot has no upstream %q", name)
	return view.UpstreamInfo{}
}

func addressOf(tb testing.TB, u view.UpstreamInfo, addr string) view.AddressInfo {
	tb.Helper()
	for _, a := range u.Addresses {
		if a.Address == addr {
			return a
		}
	}
	tb.Fatalf("upstream %s has no address %s", u.Name, addr)
	return view.AddressInfo{}
}

// Three addresses, one killed mid-test: every request is answered 200; the
// dead address is dialed at most once per fail_timeout once out of
// rotation; it is back in rotation after it comes back. Its state shows in
// gatehousectl upstreams and in the metrics.
func TestProxyFailover(t *testing.T) {
	const (
		failTimeout = 2 * time.Second
		clients     = 4
		total       = 300
	)
	a := startClosingUpstream(t)
	c := startClosingUpstream(t)
	pyDir := t.TempDir()
	os.MkdirAll(filepath.Join(pyDir, "rr"), 0o755)
	os.WriteFile(filepath.Join(pyDir, "rr", "file"), []byte("python upstream\n"), 0o644)
	b := startPython(t, pyDir)
	sock := filepath.Join(workerReadableTempDir(t), "admin.sock")
	h := start(t, `
workers {
  count = 2
}
log {
  access_log = false
}
upstream "rr" {
  addresses    = ["`+a.addr+`", "`+b+`", "`+c.addr+`"]
  fail_timeout = "`+failTimeout.String()+`"
}
route "/rr/" {
  proxy {
    upstream = "rr"
  }
}
`)
	adm, err := admin.Listen(admin.Options{Path: sock})
	if err != nil {
		t.Fatal(err)
	}
	go adm.Serve(h.sup.Admin())
	defer adm.Close()

	// requests sends n requests from clients goroutines, each on its own
	// keep-alive connection, and counts the answers by status; after
	// killAfter of them (if > 0) it runs kill once.
	requests := func(n, killAfter int, kill func()) map[int]int {
		var mu sync.Mutex
		statuses := map[int]int{}
		var sent atomic.Int64
		var once sync.Once
		var wg sync.WaitGroup
		for i := 0; i < clients; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cl := newClient(t, fmt.Sprintf("127.0.0.%d", 2+i), h.addr)
				for sent.Add(1) <= int64(n) {
					if killAfter > 0 && sent.Load() >= int64(killAfter) {
						once.Do(kill)
					}
					resp, body, err := cl.get("/rr/file")
					status := 0
					if err == nil {
						status = resp.StatusCode
						if status == 200 && body != "go upstream\n" && body != "python upstream\n" {
							status = -1
						}
					} else {
						t.Errorf("request: %v", err)
						cl = newClient(t, fmt.Sprintf("127.0.0.%d", 2+i), h.addr)
					}
					mu.Lock()
					statuses[status]++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return statuses
	}

	// All three serve.
	if got := requests(30, 0, nil); got[200] != 30 {
		t.Fatalf("with every address up: %v, want 30 × 200", got)
	}
	if a.served.Load() == 0 || c.served.Load() == 0 {
		t.Fatalf("round robin skipped an address: a served %d, c served %d", a.served.Load(), c.served.Load())
	}

	// C is killed after the first requests of 300.
	killed := time.Time{}
	got := requests(total, 20, func() {
		c.stop()
		killed = time.Now()
	})
	if got[200] != total {
		t.Errorf("with one address killed mid-run: %v, want %d × 200", got, total)
	}
	s := h.snapshot()
	down := addressOf(t, upstreamOf(t, s, "rr"), c.addr)
	t.Logf("after the run: C %+v, %v after the kill", down, time.Since(killed))
	if down.Failures == 0 || down.State == "up" {
		t.Errorf("the killed address is %q after %d failures, want out of rotation", down.State, down.Failures)
	}

	// Out of rotation, it is dialed at most once per fail_timeout.
	dialsAt, since := down.Dials, time.Now()
	time.Sleep(failTimeout/2 + failTimeout)
	if got := requests(60, 0, nil); got[200] != 60 {
		t.Errorf("while the address is down: %v, want 60 × 200", got)
	}
	later := addressOf(t, upstreamOf(t, h.snapshot(), "rr"), c.addr)
	periods := int(time.Since(since)/failTimeout) + 1
	if extra := int(later.Dials - dialsAt); extra > periods {
		t.Errorf("the down address was dialed %d times in %v, more than once per fail_timeout %v", extra, time.Since(since), failTimeout)
	}

	// Its state shows to the operator.
	r := ctlJSON(t, sock, "upstreams")
	var states []string
	for _, u := range r.Upstreams {
		for _, ad := range u.Addresses {
			states = append(states, ad.Address+"="+ad.State)
		}
	}
	t.Logf("gatehousectl upstreams: %v", states)
	if len(r.Upstreams) != 1 || len(r.Upstreams[0].Addresses) != 3 || r.Upstreams[0].Addresses[2].Failures == 0 {
		t.Errorf("gatehousectl upstreams: %+v, want rr with 3 addresses and C's failures", r.Upstreams)
	}
	var metrics bytes.Buffer
	h.snapshot().WritePrometheus(&metrics)
	if want := fmt.Sprintf(`gatehouse_upstream_address_failures_total{address="%s",upstream="rr"}`, c.addr); !strings.Contains(metrics.String(), want) {
		t.Errorf("metrics lack %s", want)
	}

	// Back: after fail_timeout a probe finds it and it serves again.
	c.restart(t)
	before := c.served.Load()
	time.Sleep(failTimeout + failTimeout/2)
	if got := requests(30, 0, nil); got[200] != 30 {
		t.Errorf("after the address came back: %v, want 30 × 200", got)
	}
	if c.served.Load() == before {
		t.Errorf("the address that came back served nothing in 30 requests")
	}
	if st := addressOf(t, upstreamOf(t, h.snapshot(), "rr"), c.addr).State; st != "up" {
		t.Errorf("the address that came back is %q, want up", st)
	}
}

// max_connections = 1 with two workers: a connection idle in one worker's
// pool is reclaimed for a request on the other, which succeeds.
func TestProxyMaxConnectionsCountsInUse(t *testing.T) {
	echo := startEchoUpstream(t)
	h := start(t, `
workers {
  count = 2
}
log {
  access_log = false
}
upstream "echo" {
  addresses       = ["`+echo.addr+`"]
  max_connections = 1
}
route "/echo/" {
  request_buffering = false
  proxy {
    upstream = "echo"
  }
}
route "/ok" {
  request_buffering = false
  respond {
    body = "ok\n"
  }
}
`)
	// Both routes stream request bodies, which hold their pool slot
	// (buffered bodies are received outside the pool and hold no worker).
	//
	// Worker 0 (first on ties) proxies one request and keeps the
	// connection idle in its pool.
	cl := newClient(t, "127.0.0.2", h.addr)
	if resp, _, err := cl.get("/echo/first"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first request: %v", err)
	}
	// The worker's Done may reach the supervisor after the response.
	s := h.waitFor("the first request's Done", 5*time.Second, func(s view.Snapshot) bool {
		return s.Workers[0].Served+s.Workers[1].Served == 1
	})
	if s.Workers[0].Served != 1 || upstreamOf(t, s, "echo").Held != 1 {
		t.Fatalf("after the first request: worker 0 served %d, echo held %d; want 1 and 1 (idle in worker 0's pool)", s.Workers[0].Served, upstreamOf(t, s, "echo").Held)
	}
	// A request whose body is slow keeps worker 0 busy, so the next goes
	// to worker 1.
	slow := dialFrom(t, "127.0.0.3", h.addr)
	defer slow.Close()
	fmt.Fprint(slow, "POST /ok HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nx")
	h.waitFor("worker 0 busy", 10*time.Second, func(s view.Snapshot) bool { return s.Workers[0].Active == 1 })

	cl2 := newClient(t, "127.0.0.4", h.addr)
	resp, body, err := cl2.get("/echo/second")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("request on worker 1 with worker 0's connection idle: %v %v %q, want 200", err, resp, body)
	}
	s = h.waitFor("the second request's Done", 5*time.Second, func(s view.Snapshot) bool {
		return s.Workers[0].Served+s.Workers[1].Served == 2
	})
	u := upstreamOf(t, s, "echo")
	if s.Workers[1].Served != 1 || u.Reclaims != 1 || u.Held != 1 {
		t.Errorf("worker 1 served %d, reclaims %d, held %d; want 1, 1 (worker 0's idle connection), 1", s.Workers[1].Served, u.Reclaims, u.Held)
	}
	if n := echo.conns.Load(); n != 2 {
		t.Errorf("the upstream saw %d connections, want 2 (the reclaimed one closed)", n)
	}

	// A connection in use is not reclaimed: with worker 0 streaming a
	// request body upstream, a request on worker 1 is refused at once.
	fmt.Fprint(slow, "123456789")
	if resp, _, err := readResponse(bufio.NewReader(slow), "POST"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("the slow POST: %v", err)
	}
	h.waitFor("both workers idle", 5*time.Second, func(s view.Snapshot) bool { return s.AtWorkers == 0 })
	streaming := dialFrom(t, "127.0.0.5", h.addr)
	defer streaming.Close()
	fmt.Fprint(streaming, "POST /echo/stream HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n")
	h.waitFor("worker 0 streaming upstream", 10*time.Second, func(s view.Snapshot) bool {
		u := upstreamOf(t, s, "echo")
		return s.Workers[0].Active == 1 && u.Reclaims == 2 && u.Held == 1
	})
	start := time.Now()
	resp, _, err = newClient(t, "127.0.0.6", h.addr).get("/echo/third")
	if err != nil || resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || time.Since(start) > reclaimBound {
		t.Errorf("with the one connection in use: %v %v after %v, want 503 with Retry-After at once", err, resp, time.Since(start))
	}
	fmt.Fprint(streaming, "0\r\n\r\n")
	streaming.SetReadDeadline(time.Now().Add(10 * time.Second))
	if resp, body, err := readResponse(bufio.NewReader(streaming), "POST"); err != nil || resp.StatusCode != 200 || body != "a" {
		t.Errorf("the streamed POST: %v %v %q, want 200 echoing its body", err, resp, body)
	}
}

// reclaimBound is a generous bound on a refusal after a Reclaim round trip
// (the supervisor waits at most 1 s).
const reclaimBound = 3 * time.Second

// An address failing its health check leaves the rotation until it passes
// again; the checks come from the supervisor.
func TestProxyHealthCheck(t *testing.T) {
	var healthy atomic.Bool
	var served atomic.Int64
	sick := startHandlerUpstream(t, func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			if r.Header.Get("User-Agent") != "gatehouse-health-check" {
				t.Errorf("health check with User-Agent %q", r.Header.Get("User-Agent"))
			}
			if !healthy.Load() {
				http.Error(rw, "not ready", http.StatusServiceUnavailable)
			}
			return
		}
		served.Add(1)
		fmt.Fprintln(rw, "sick upstream")
	})
	good := startClosingUpstream(t)
	h := start(t, `
workers {
  count = 2
}
log {
  access_log = false
}
upstream "hc" {
  addresses = ["`+good.addr+`", "`+sick+`"]
  health_check {
    path     = "/healthz"
    interval = "1s"
  }
}
route "/hc/" {
  proxy {
    upstream = "hc"
  }
}
`)
	state := func() string {
		return addressOf(t, upstreamOf(t, h.snapshot(), "hc"), sick).State
	}
	h.waitFor("the failing address out of rotation", 10*time.Second, func(s view.Snapshot) bool {
		return addressOf(t, upstreamOf(t, s, "hc"), sick).State == "check-failed"
	})
	cl := newClient(t, "127.0.0.2", h.addr)
	for i := 0; i < 20; i++ {
		if resp, body, err := cl.get("/hc/x"); err != nil || resp.StatusCode != 200 || body != "go upstream\n" {
			t.Fatalf("request %d with the sick address out: %v %q", i, err, body)
		}
	}
	if n := served.Load(); n != 0 {
		t.Errorf("the address failing its health check served %d requests", n)
	}
	healthy.Store(true)
	h.waitFor("the address back after a passing check", 10*time.Second, func(s view.Snapshot) bool {
		return addressOf(t, upstreamOf(t, s, "hc"), sick).State == "up"
	})
	for i := 0; i < 20; i++ {
		if resp, _, err := cl.get("/hc/x"); err != nil || resp.StatusCode != 200 {
			t.Fatalf("request %d with both addresses up: %v", i, err)
		}
	}
	if served.Load() == 0 {
		t.Errorf("the address back in rotation (%s) served nothing in 20 requests", state())
	}
}

// startHandlerUpstream serves handler on 127.0.0.1 (without keep-alive, so each
// proxied request dials) and returns its address.
func startHandlerUpstream(tb testing.TB, handler http.HandlerFunc) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: handler}
	srv.SetKeepAlivesEnabled(false)
	go srv.Serve(l)
	tb.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}
