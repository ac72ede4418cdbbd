package e2e

import (
	"bufio"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// A worker keeps a connection hot after its response, and serves its next
// request without a hand-off; the moment another client's connection waits
// for the slot, the hot connection goes back to the supervisor, counted as
// a hand-back for pressure (at the end of its 10 s window it would count as
// one for the window).
func TestHotConnectionHandedBackUnderPressure(t *testing.T) {
	h := start(t, `
workers {
  count       = 1
  concurrency = 1
  hot_window  = "10s"
}
log {
  access_log = false
}
`)
	a := newClient(t, "127.0.0.2", h.addr)
	for i := 0; i < 3; i++ {
		if resp, _, err := a.get("/ok"); err != nil || resp.StatusCode != 200 {
			t.Fatalf("client a, request %d: %v", i, err)
		}
	}
	s := h.waitFor("a's connection hot at the worker", 10*time.Second, func(s view.Snapshot) bool {
		return s.AtWorkers == 1
	})
	if d := counter(t, s, "dispatches"); d != 1 {
		t.Fatalf("%d dispatches for 3 requests on one hot connection, want 1", d)
	}
	// b's connection finds the only slot taken by a's hot connection.
	b := newClient(t, "127.0.0.3", h.addr)
	if resp, _, err := b.get("/ok"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("client b: %v (a's hot connection was not handed back)", err)
	}
	s = h.snapshot()
	// At least a's hand-back; b's own hot wait may also end under pressure
	// if the notice that pressure ended reaches the worker after it.
	if n := counter(t, s, "handback_pressure"); n < 1 {
		t.Errorf("handback_pressure = %d, want at least 1", n)
	}
	if n := counter(t, s, "pool_waits"); n != 1 {
		t.Errorf("pool_waits = %d, want 1: b waited for a's slot", n)
	}
	if n := counter(t, s, "pressure_on"); n < 1 {
		t.Errorf("pressure_on = %d, want at least 1", n)
	}
	if n := counter(t, s, "hot_requests"); n != 2 {
		t.Errorf("hot_requests = %d, want 2 (a's second and third)", n)
	}
	// a's connection was parked, not closed: its next request is served
	// through a new dispatch.
	if resp, _, err := a.get("/ok"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("client a after the hand-back: %v", err)
	}
	if d := counter(t, h.snapshot(), "dispatches"); d < 3 {
		t.Errorf("%d dispatches, want at least 3 (a, b, a again)", d)
	}
}

// A connection whose next request comes after the hot window is parked in
// the supervisor, not kept by the worker: the next request is a new
// dispatch.
func TestLateRequestParkedInSupervisor(t *testing.T) {
	h := start(t, `
workers {
  count       = 1
  concurrency = 2
  hot_window  = "50ms"
}
log {
  access_log = false
}
`)
	a := newClient(t, "127.0.0.2", h.addr)
	if resp, _, err := a.get("/ok"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first request: %v", err)
	}
	h.waitFor("the connection parked after the hot window", 10*time.Second, func(s view.Snapshot) bool {
		return s.AtWorkers == 0 && s.Counters["handback_hot_window"] == 1
	})
	for _, w := range h.snapshot().Workers {
		if w.Active != 0 {
			t.Fatalf("worker %d holds %d connections after the hot window", w.Slot, w.Active)
		}
	}
	if resp, _, err := a.get("/ok"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("late request: %v", err)
	}
	s := h.snapshot()
	if d, hot := counter(t, s, "dispatches"), counter(t, s, "hot_requests"); d != 2 || hot != 0 {
		t.Errorf("dispatches %d, hot requests %d; want 2 and 0", d, hot)
	}
}

// 10 000 kept-alive connections, each after one request, then idle for a
// minute: every one is parked in the supervisor and no worker holds any, for
// as long as they stay idle. The real binary runs it, so that the test's descriptors
// and the supervisor's are counted apart.
func TestIdleKeptAliveLeaveWorkersEmpty(t *testing.T) {
	// Its minute of idleness overlaps the other long waits at the
	// package's end.
	t.Parallel()
	const conns, addrs, idle = 10000, 50, 60 * time.Second
	dir := writeConfig(t, `
workers {
  count       = 2
  concurrency = 64
}
limits {
  keep_alive_idle_timeout    = "300s"
  keep_alive_max_connections = 20000
  max_queued_connections     = 20000
}
log {
  access_log = false
}
admin {
  socket = "admin.sock"
}
`)
	sock := filepath.Join(dir, "admin.sock")
	p := startOps(t, dir, opsOptions{args: []string{"-config", "gatehouse.hcl"}, nofile: 20000})
	p.waitServing(t, "/ok")
	var (
		mu   sync.Mutex
		held []net.Conn
		fail atomic.Value
		wg   sync.WaitGroup
	)
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	for g := 0; g < addrs; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			src := fmt.Sprintf("127.0.0.%d", 10+g)
			for i := 0; i < conns/addrs; i++ {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
				c, err := d.Dial("tcp", p.addr)
				if err != nil {
					fail.Store(fmt.Sprintf("%s dial %d: %v", src, i, err))
					return
				}
				mu.Lock()
				held = append(held, c)
				mu.Unlock()
				cl := &client{c: c.(*net.TCPConn), br: bufio.NewReader(c)}
				if resp, _, err := cl.get("/ok"); err != nil || resp.StatusCode != 200 {
					fail.Store(fmt.Sprintf("%s request %d: %v", src, i, err))
					return
				}
			}
		}(g)
	}
	wg.Wait()
	if f := fail.Load(); f != nil {
		t.Fatal(f)
	}
	// Idle for a while: every connection stays parked in the supervisor,
	// none at a worker.
	checks := 0
	for end := time.Now().Add(idle); time.Now().Before(end); time.Sleep(time.Second) {
		st := ctlJSON(t, sock, "status").Status
		c := ctlJSON(t, sock, "conns").Conns
		if checks == 0 && (st.AtWorkers != 0 || c.ByState["idle"] != conns) {
			// The last connections' hot windows are ending.
			time.Sleep(100 * time.Millisecond)
			if st = ctlJSON(t, sock, "status").Status; st.AtWorkers != 0 {
				continue
			}
			c = ctlJSON(t, sock, "conns").Conns
		}
		checks++
		for _, w := range st.Workers {
			if w.Active != 0 {
				t.Fatalf("worker %d holds %d connections while every client is idle", w.Slot, w.Active)
			}
		}
		if st.AtWorkers != 0 || c.ByState["idle"] != conns {
			t.Fatalf("%d connections at workers, %d idle in the supervisor; want 0 and %d", st.AtWorkers, c.ByState["idle"], conns)
		}
	}
	if checks < 5 {
		t.Fatalf("only %d checks in %v found every connection parked", checks, idle)
	}
}

// A hot wait that finds only part of the next head hands the connection
// back at once with those bytes carried: the dispatcher holds the partial
// head, and dispatches the connection again once the head is complete. The
// worker never waits for the rest of a head, even inside its hot window.
func TestHotPartialHeadGoesBack(t *testing.T) {
	h := start(t, `
workers {
  count       = 1
  concurrency = 2
  hot_window  = "10s"
}
log {
  access_log = false
}
`)
	a := newClient(t, "127.0.0.2", h.addr)
	if resp, _, err := a.get("/ok"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first request: %v", err)
	}
	fmt.Fprintf(a.c, "GET /ok HTTP/1.1\r\nHost: x\r\n")
	h.waitFor("the partial head held by the dispatcher", 10*time.Second, func(s view.Snapshot) bool {
		return s.AtWorkers == 0 && s.Counters["handback_partial_head"] == 1
	})
	fmt.Fprintf(a.c, "\r\n")
	resp, _, err := readResponse(a.br, "GET")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the completed request: %v", err)
	}
	if d := counter(t, h.snapshot(), "dispatches"); d != 2 {
		t.Errorf("%d dispatches, want 2: the completed head went through the dispatcher", d)
	}
}
