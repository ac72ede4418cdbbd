package supervisor

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
	"golang.org/x/sys/unix"
)

// TestAdmission: the caps applied at accept, before a byte is read. Each
// connection is dialed in turn and admitted or refused before the next; the
// per-client cap refuses the newcomer, the queued-connection cap makes room
// by closing the heaviest client's oldest incomplete connection.
func TestAdmission(t *testing.T) {
	for _, tc := range []struct {
		name    string
		extra   string
		from    []string
		closed  []bool // which connections the supervisor closes
		counter string
		count   uint64
	}{
		{
			name:    "per-client cap",
			extra:   "limits {\n max_connections_per_client = 2\n}",
			from:    []string{"127.0.0.2", "127.0.0.2", "127.0.0.2", "127.0.0.3"},
			closed:  []bool{false, false, true, false},
			counter: "refused_per_client", count: 1,
		},
		{
			name:    "trusted proxy exempt from the per-client cap",
			extra:   "limits {\n max_connections_per_client = 1\n}\ntrusted_proxies = [\"127.0.0.5/32\"]",
			from:    []string{"127.0.0.5", "127.0.0.5", "127.0.0.5", "127.0.0.2", "127.0.0.2"},
			closed:  []bool{false, false, false, false, true},
			counter: "refused_per_client", count: 1,
		},
		{
			name:    "queued-connection cap",
			extra:   "limits {\n max_queued_connections = 2\n}",
			from:    []string{"127.0.0.2", "127.0.0.2", "127.0.0.3"},
			closed:  []bool{true, false, false},
			counter: "incomplete_evicted", count: 1,
		},
		{
			// 127.0.0.3 holds the most incomplete connections: its
			// oldest is closed, not the older one of 127.0.0.2.
			name:    "queued-connection cap closes the heaviest client's",
			extra:   "limits {\n max_queued_connections = 3\n}",
			from:    []string{"127.0.0.2", "127.0.0.3", "127.0.0.3", "127.0.0.4"},
			closed:  []bool{false, true, false, false},
			counter: "incomplete_evicted", count: 1,
		},
		{
			// Between clients holding as many, the one whose incomplete
			// connection has waited longest.
			name:    "queued-connection cap, a tie broken by age",
			extra:   "limits {\n max_queued_connections = 2\n}",
			from:    []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"},
			closed:  []bool{true, false, false},
			counter: "incomplete_evicted", count: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startLoop(t, baseConfig(1, 8, tc.extra))
			conns := make([]*net.TCPConn, len(tc.from))
			for i, from := range tc.from {
				// Each connection is accepted a moment after the last,
				// so ages differ (well under the first-byte timeout).
				h.clock.add(time.Millisecond)
				conns[i] = h.dial(from)
				h.waitFor(fmt.Sprintf("connection %d admitted or refused", i), func(s view.Snapshot) bool {
					return s.Counters["accepted"]+s.Counters["refused_per_client"] == uint64(i+1)
				})
			}
			open := 0
			for i, c := range conns {
				if !tc.closed[i] {
					open++
					continue
				}
				if _, closed := closedByPeer(c); !closed {
					t.Errorf("connection %d from %s: open, want closed", i, tc.from[i])
				}
			}
			s := h.snapshot()
			if got := s.Counters[tc.counter]; got != tc.count {
				t.Errorf("%s = %d, want %d", tc.counter, got, tc.count)
			}
			if got := s.Conns["fresh"]; got != open {
				t.Errorf("%d connections parked, want %d", got, open)
			}
		})
	}
}

// TestDispatchBounds: the per-client share and the pool bound. A readable
// connection over either waits, oldest first, and is dispatched when its
// slot is released.
func TestDispatchBounds(t *testing.T) {
	type conn struct {
		from string
		// dispatched at once, or only after the Done of the connection
		// with this index (-1: at once)
		after int
	}
	for _, tc := range []struct {
		name         string
		workers      int
		concurrency  int
		pool, share  int
		conns        []conn
		counter      string
		counterValue uint64
	}{
		{
			// pool 8, share 2: the client's third connection waits for
			// one of its own slots; another client is not held up.
			name: "share", workers: 1, concurrency: 8, pool: 8, share: 2,
			conns:   []conn{{"127.0.0.2", -1}, {"127.0.0.2", -1}, {"127.0.0.2", 0}, {"127.0.0.3", -1}},
			counter: "share_waits", counterValue: 1,
		},
		{
			// pool 2 over two workers of one slot each, share 1 per
			// client: the third client waits for the pool.
			name: "pool", workers: 2, concurrency: 1, pool: 2, share: 1,
			conns:   []conn{{"127.0.0.2", -1}, {"127.0.0.3", -1}, {"127.0.0.4", 1}},
			counter: "pool_waits", counterValue: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startLoop(t, baseConfig(tc.workers, tc.concurrency, ""))
			workers := h.workers
			s := h.snapshot()
			if s.Pool != tc.pool || s.Share != tc.share {
				t.Fatalf("pool %d share %d, want %d and %d", s.Pool, s.Share, tc.pool, tc.share)
			}
			// at[i] is the worker connection i was dispatched to.
			at := make([]*fakeProc, len(tc.conns))
			ids := make([]uint64, len(tc.conns))
			for i, c := range tc.conns {
				h.send(h.dial(c.from))
				if c.after >= 0 {
					h.waitFor(fmt.Sprintf("connection %d waiting", i), func(s view.Snapshot) bool { return s.Conns["waiting"] == 1 })
					// Every worker hears that a connection waits (its hot
					// connections go back), and gets nothing else.
					for _, p := range workers {
						h.pressure(p, true)
						h.noFrame(p)
					}
					continue
				}
				at[i], ids[i] = h.dispatchedAny(workers)
			}
			for i, c := range tc.conns {
				if c.after < 0 {
					continue
				}
				if err := at[c.after].Done(done(ids[c.after], 1, proto.Disposition_CLOSE)); err != nil {
					t.Fatal(err)
				}
				p, id := h.dispatchedAny(workers)
				if p != at[c.after] && tc.workers == 1 {
					t.Fatalf("connection %d went to another worker", i)
				}
				at[i], ids[i] = p, id
			}
			s = h.snapshot()
			if got := s.Counters[tc.counter]; got != tc.counterValue {
				t.Errorf("%s = %d, want %d", tc.counter, got, tc.counterValue)
			}
			if s.AtWorkers > tc.pool {
				t.Errorf("%d connections at workers, over the pool %d", s.AtWorkers, tc.pool)
			}
		})
	}
}

// pressure expects p's next frame to be a Pressure notice saying on.
func (h *loopHarness) pressure(p *fakeProc, on bool) {
	h.t.Helper()
	f := h.next(p)
	if pr := f.GetPressure(); pr == nil || pr.GetOn() != on {
		h.t.Fatalf("worker %d: got %v, want Pressure{on: %v}", p.slot, f.Body, on)
	}
}

// dispatchedAny waits for the next Dispatch at any of ps and returns which
// worker got it and the connection's id.
func (h *loopHarness) dispatchedAny(ps []*fakeProc) (*fakeProc, uint64) {
	h.t.Helper()
	for deadline := time.Now().Add(frameWait); time.Now().Before(deadline); {
		for _, p := range ps {
			f, err := p.Next(10 * time.Millisecond)
			if err != nil {
				continue
			}
			if f.GetPressure() != nil {
				continue // the waiting connection's pressure ending
			}
			d := f.GetDispatch()
			if d == nil || f.FD < 0 {
				h.t.Fatalf("worker %d: got %T, want a Dispatch", p.slot, f.Body)
			}
			consume(f.FD)
			return p, d.GetConnId()
		}
	}
	h.t.Fatal("no Dispatch at any worker")
	return nil, 0
}

// TestDoneValidation: a Done that does not match what the supervisor
// recorded kills the worker and closes the connections it held; a valid one
// re-parks or closes the connection.
func TestDoneValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		// first is a valid Done before the one tested: the connection is
		// then dispatched again with its request count.
		first *proto.Done
		bad   func(id uint64) *proto.Done
		kill  bool
		state string // the connection's state afterwards, when not killed
	}{
		{name: "keep-alive", bad: func(id uint64) *proto.Done { return done(id, 1, proto.Disposition_KEEP_ALIVE) }, state: "idle"},
		{name: "close", bad: func(id uint64) *proto.Done { return done(id, 1, proto.Disposition_CLOSE) }},
		{name: "linger", bad: func(id uint64) *proto.Done { return done(id, 1, proto.Disposition_LINGER) }, state: "linger"},
		{name: "connection not held", kill: true, bad: func(id uint64) *proto.Done { return done(id+100, 1, proto.Disposition_CLOSE) }},
		{name: "kept without affinity", kill: true, bad: func(id uint64) *proto.Done {
			d := done(id, 1, proto.Disposition_KEEP_ALIVE)
			d.Kept = true
			return d
		}},
		{name: "kept and closed", kill: true, bad: func(id uint64) *proto.Done {
			d := done(id, 1, proto.Disposition_CLOSE)
			d.Kept = true
			return d
		}},
		{name: "pending plain input", kill: true, bad: func(id uint64) *proto.Done {
			d := done(id, 1, proto.Disposition_KEEP_ALIVE)
			d.Kept, d.Pending = true, true
			return d
		}},
		{name: "carried over the cap", kill: true, bad: func(id uint64) *proto.Done {
			d := done(id, 1, proto.Disposition_KEEP_ALIVE)
			d.Carried = make([]byte, ipc.MaxCarried+1)
			return d
		}},
		{name: "unknown outcome", kill: true, bad: func(id uint64) *proto.Done {
			d := done(id, 1, proto.Disposition_CLOSE)
			d.Outcome = proto.Outcome(1000)
			return d
		}},
		{name: "more responses than requests", kill: true, bad: func(id uint64) *proto.Done {
			d := done(id, 1, proto.Disposition_CLOSE)
			d.ResponseStatus, d.ResponseMicros = make([]uint32, 3), make([]uint64, 3)
			return d
		}},
		{name: "response statuses and times that do not pair", kill: true, bad: func(id uint64) *proto.Done {
			d := done(id, 1, proto.Disposition_CLOSE)
			d.ResponseStatus, d.ResponseMicros = []uint32{200}, []uint64{1, 2}
			return d
		}},
		{name: "request count lowered", kill: true, first: done(0, 2, proto.Disposition_KEEP_ALIVE),
			bad: func(id uint64) *proto.Done { return done(id, 1, proto.Disposition_CLOSE) }},
		{name: "no disposition", kill: true, bad: func(id uint64) *proto.Done { return done(id, 1, proto.Disposition_DISPOSITION_UNSPECIFIED) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startLoop(t, baseConfig(1, 8, ""))
			p := h.workers[0]
			c := h.dial("127.0.0.2")
			h.send(c)
			d := h.dispatched(p)
			if tc.first != nil {
				tc.first.ConnId = d.GetConnId()
				if err := p.Done(tc.first); err != nil {
					t.Fatal(err)
				}
				h.waitFor("parked", func(s view.Snapshot) bool { return s.Conns["idle"] == 1 })
				h.send(c)
				d = h.dispatched(p)
				if d.GetRequests() != tc.first.GetRequests() {
					t.Fatalf("dispatched with %d requests, want %d", d.GetRequests(), tc.first.GetRequests())
				}
			}
			if err := p.Done(tc.bad(d.GetConnId())); err != nil {
				t.Fatal(err)
			}
			if tc.kill {
				select {
				case <-p.Exited():
				case <-time.After(frameWait):
					t.Fatal("worker not killed")
				}
				if !p.killed.Load() {
					t.Error("the worker's channel closed, but the process was not killed")
				}
				if _, closed := closedByPeer(c); !closed {
					t.Error("the connection the killed worker held is still open")
				}
				s := h.waitFor("kill counted", func(s view.Snapshot) bool { return s.Counters["worker_kills"] == 1 })
				if s.AtWorkers != 0 || len(s.Conns) != 0 {
					t.Errorf("after the kill: %d at workers, connections %v; want none", s.AtWorkers, s.Conns)
				}
				return
			}
			s := h.waitFor("Done handled", func(s view.Snapshot) bool { return s.AtWorkers == 0 })
			if got := s.Counters["worker_kills"]; got != 0 {
				t.Fatalf("worker_kills = %d for a valid Done", got)
			}
			if tc.state == "" {
				if len(s.Conns) != 0 {
					t.Errorf("connections %v, want none", s.Conns)
				}
				if _, closed := closedByPeer(c); !closed {
					t.Error("connection not closed")
				}
				return
			}
			if s.Conns[tc.state] != 1 {
				t.Errorf("connections %v, want one %s", s.Conns, tc.state)
			}
		})
	}
}

// TestTimers: the per-state timeouts, on the loop's clock. Each moves the
// clock to just before its deadline (nothing happens), then past it. The
// clock moves less than the ping timeout in all.
func TestTimers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		conc    int // worker concurrency; 0: 8
		extra   string
		setup   func(h *loopHarness) *net.TCPConn
		state   string
		before  time.Duration // moved first: the connection is still there
		after   time.Duration // then: it is gone
		counter string
		reply   string // what the client reads before the close
	}{
		{
			name: "first byte", extra: "limits {\n first_byte_timeout = \"2s\"\n}",
			setup: func(h *loopHarness) *net.TCPConn {
				c := h.dial("127.0.0.2")
				h.waitFor("accepted", func(s view.Snapshot) bool { return s.Conns["fresh"] == 1 })
				return c
			},
			state: "fresh", before: 1900 * time.Millisecond, after: 200 * time.Millisecond, counter: "timeout_first_byte",
		},
		{
			name: "keep-alive idle", extra: "limits {\n keep_alive_idle_timeout = \"3s\"\n}",
			setup: func(h *loopHarness) *net.TCPConn {
				c := h.dial("127.0.0.2")
				h.send(c)
				d := h.dispatched(h.workers[0])
				if err := h.workers[0].Done(done(d.GetConnId(), 1, proto.Disposition_KEEP_ALIVE)); err != nil {
					h.t.Fatal(err)
				}
				h.waitFor("parked", func(s view.Snapshot) bool { return s.Conns["idle"] == 1 })
				return c
			},
			state: "idle", before: 2900 * time.Millisecond, after: 200 * time.Millisecond, counter: "timeout_idle",
		},
		{
			name: "no worker", conc: 1, extra: "limits {\n no_worker_timeout = \"2s\"\n}",
			setup: func(h *loopHarness) *net.TCPConn {
				busy := h.dial("127.0.0.2")
				h.send(busy)
				h.dispatched(h.workers[0])
				c := h.dial("127.0.0.3")
				h.send(c)
				h.waitFor("waiting", func(s view.Snapshot) bool { return s.Conns["waiting"] == 1 })
				return c
			},
			state: "waiting", before: 1900 * time.Millisecond, after: 200 * time.Millisecond, counter: "timeout_no_worker",
			reply: "HTTP/1.1 503 Service Unavailable\r\n",
		},
		{
			// Part of a head, then silence: the dispatcher holds it (no
			// worker sees it) and answers 408 when the gap expires.
			name: "head gap",
			setup: func(h *loopHarness) *net.TCPConn {
				c := h.dial("127.0.0.2")
				if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n")); err != nil {
					h.t.Fatal(err)
				}
				h.waitFor("head held", func(s view.Snapshot) bool { return s.Conns["head"] == 1 && s.HeadBytes > 0 })
				return c
			},
			state: "head", before: 4900 * time.Millisecond, after: 200 * time.Millisecond, counter: "timeout_head_gap",
			reply: "HTTP/1.1 408 Request Timeout\r\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conc := tc.conc
			if conc == 0 {
				conc = 8
			}
			h := startLoop(t, baseConfig(1, conc, tc.extra))
			c := tc.setup(h)
			h.advance(tc.before)
			if s := h.snapshot(); s.Conns[tc.state] != 1 || s.Counters[tc.counter] != 0 {
				t.Fatalf("before the deadline: connections %v, %s = %d", s.Conns, tc.counter, s.Counters[tc.counter])
			}
			h.advance(tc.after)
			s := h.snapshot()
			if s.Counters[tc.counter] != 1 {
				t.Fatalf("past the deadline: %s = %d, want 1", tc.counter, s.Counters[tc.counter])
			}
			got, closed := closedByPeer(c)
			if tc.reply == "" && !closed {
				t.Fatal("connection not closed")
			}
			if !strings.HasPrefix(got, tc.reply) {
				t.Fatalf("client read %q, want %q first", got, tc.reply)
			}
			// A canned reply is dated by the loop's clock.
			if want := "\r\nDate: " + h.clock.Now().UTC().Format(http.TimeFormat) + "\r\n"; tc.reply != "" && !strings.Contains(got, want) {
				t.Errorf("client read %q, want %q in it", got, want)
			}
		})
	}
}

// TestStressMode: connections closed to make room put admission under
// pressure; after a second of it the first-byte and head timeouts shrink (to
// a fifth, the first-byte one not under 2 s), and they are restored ten
// seconds after the pressure ends.
func TestStressMode(t *testing.T) {
	h := startLoop(t, baseConfig(1, 8, "limits {\n max_queued_connections = 4\n}"))
	for i := 0; i < 6; i++ {
		h.dial("127.0.0.2")
		h.waitFor(fmt.Sprintf("connection %d admitted", i), func(s view.Snapshot) bool { return s.Counters["accepted"] == uint64(i+1) })
	}
	s := h.snapshot()
	if s.Stress || s.Counters["incomplete_evicted"] != 2 {
		t.Fatalf("at once: stress %v, incomplete_evicted %d; want off and 2", s.Stress, s.Counters["incomplete_evicted"])
	}
	h.advance(1100 * time.Millisecond)
	s = h.snapshot()
	if !s.Stress || s.FirstByteTimeout != 2*time.Second || s.HeadTimeout != 6*time.Second || s.Counters["stress_entered"] != 1 {
		t.Fatalf("after a second of pressure: stress %v, first byte %v, head %v, entered %d; want on, 2s, 6s, 1",
			s.Stress, s.FirstByteTimeout, s.HeadTimeout, s.Counters["stress_entered"])
	}
	// The shortened first-byte timeout closed the silent connections: the
	// pressure is over, the mode stays on for ten seconds.
	h.advance(5 * time.Second)
	if s = h.snapshot(); !s.Stress || s.Conns["fresh"] != 0 {
		t.Fatalf("5 s later: stress %v, %d fresh connections; want on and none", s.Stress, s.Conns["fresh"])
	}
	h.advance(6 * time.Second)
	if s = h.snapshot(); s.Stress || s.FirstByteTimeout != 5*time.Second || s.HeadTimeout != 30*time.Second {
		t.Fatalf("11 s without pressure: stress %v, first byte %v, head %v; want off, 5s, 30s", s.Stress, s.FirstByteTimeout, s.HeadTimeout)
	}
}

// TestAddrsDuringReloads calls Addrs while reloads add and drop a listener:
// under the race detector (make race) it shows the loop and Addrs share
// nothing unsynchronised.
func TestAddrsDuringReloads(t *testing.T) {
	base := baseConfig(1, 8, "")
	h := startLoop(t, base)
	second := "listener \"second\" {\n  address = \"127.0.0.2:0\"\n}\n"

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var seen [3]int // calls that saw 0, 1 or 2 addresses
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			a := h.s.Addrs()
			for _, ap := range a {
				if !ap.Addr().Is4() || ap.Port() == 0 {
					t.Errorf("Addrs returned %v", ap)
				}
			}
			seen[min(len(a), 2)]++
			time.Sleep(100 * time.Microsecond)
		}
	}()
	const reloads = 6
	for i := 0; i < reloads; i++ {
		src := base
		if i%2 == 0 {
			src = base + second
		}
		if err := os.WriteFile(h.cfgPath, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), frameWait)
		err := h.s.Reload(ctx)
		cancel()
		if err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		want := 1 + (i+1)%2
		if got := len(h.s.Addrs()); got != want {
			t.Fatalf("after reload %d: %d addresses, want %d", i, got, want)
		}
		if s := h.snapshot(); !sameAddrs(s.Listeners, h.s.Addrs()) {
			t.Fatalf("after reload %d: loop listens on %v, Addrs says %v", i, s.Listeners, h.s.Addrs())
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("Addrs saw one address %d times, two %d times", seen[1], seen[2])
}

func sameAddrs(a, b []netip.AddrPort) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestDispatchCarriesHead: a plain connection a worker can take at once
// goes with its head read out of the socket, as carried bytes marked
// drained, so the worker need not read; one that must wait for a slot keeps
// its head in the socket (only peeked), and goes with nothing carried.
func TestDispatchCarriesHead(t *testing.T) {
	const head = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
	h := startLoop(t, baseConfig(1, 1, ""))
	p := h.workers[0]
	socketHolds := func(fd int) string {
		b := make([]byte, 4096)
		n, _, err := unix.Recvfrom(fd, b, unix.MSG_DONTWAIT)
		if err != nil || n < 0 {
			return ""
		}
		return string(b[:n])
	}

	h.send(h.dial("127.0.0.2"))
	f := h.next(p)
	first := f.GetDispatch()
	if first == nil || f.FD < 0 {
		t.Fatalf("got %T (fd %d), want a Dispatch with a descriptor", f.Body, f.FD)
	}
	if string(first.GetCarried()) != head || !first.GetDrained() {
		t.Errorf("a connection dispatched at once: carried %q, drained %v; want the head, drained", first.GetCarried(), first.GetDrained())
	}
	if got := socketHolds(f.FD); got != "" {
		t.Errorf("its socket still holds %q", got)
	}
	unix.Close(f.FD)

	// The pool (1) is taken: the next connection waits, its head unread.
	h.send(h.dial("127.0.0.3"))
	h.waitFor("the second connection waiting", func(s view.Snapshot) bool { return s.Conns["waiting"] == 1 })
	if err := p.Done(done(first.GetConnId(), 1, proto.Disposition_CLOSE)); err != nil {
		t.Fatal(err)
	}
	for range 8 {
		f = h.next(p)
		if f.GetPressure() == nil {
			break
		}
	}
	second := f.GetDispatch()
	if second == nil || f.FD < 0 {
		t.Fatalf("got %T (fd %d), want the waiting connection's Dispatch", f.Body, f.FD)
	}
	defer unix.Close(f.FD)
	if len(second.GetCarried()) != 0 || second.GetDrained() {
		t.Errorf("a connection that waited: carried %q, drained %v; want nothing", second.GetCarried(), second.GetDrained())
	}
	if got := socketHolds(f.FD); got != head {
		t.Errorf("its socket holds %q, want the head", got)
	}
}
