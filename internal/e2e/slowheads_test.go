package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// raiseNoFile raises the test process's descriptor limit to its hard limit:
// attack tests hold thousands of client sockets, and with the in-process
// supervisor as many server sockets again.
func raiseNoFile(t *testing.T, need uint64) {
	t.Helper()
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			t.Fatal(err)
		}
	}
	if rl.Cur < need {
		t.Skipf("RLIMIT_NOFILE hard limit %d is under the %d descriptors this test needs", rl.Max, need)
	}
}

// slowHeadAttack holds conns connections from 50 addresses (127.0.0.10 to
// 127.0.0.59), each sending the start of a request head and then one header
// line every interval, and dialing again when the server closes it, until ctx
// ends. It returns when every connection has stopped.
type slowHeadAttack struct {
	dials, closedByServer atomic.Int64
	open                  atomic.Int64
	peak                  atomic.Int64
}

func (a *slowHeadAttack) run(ctx context.Context, addr string, conns int, interval time.Duration) {
	var wg sync.WaitGroup
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			src := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(10+i%50))}
			// Spread the lines over the interval.
			if !sleepCtx(ctx, time.Duration(i)*interval/time.Duration(conns)) {
				return
			}
			for ctx.Err() == nil {
				d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: src}
				c, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					sleepCtx(ctx, 100*time.Millisecond)
					continue
				}
				a.dials.Add(1)
				if n := a.open.Add(1); n > a.peak.Load() {
					a.peak.Store(n)
				}
				a.dribble(ctx, c, interval)
				a.open.Add(-1)
				c.Close()
			}
		}(i)
	}
	wg.Wait()
}

// dribble sends one head slowly on c until the server closes c or ctx ends.
func (a *slowHeadAttack) dribble(ctx context.Context, c net.Conn, interval time.Duration) {
	c.SetWriteDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("GET /ok HTTP/1.1\r\nHost: x\r\n")); err != nil {
		a.closedByServer.Add(1)
		return
	}
	for n := 0; ; n++ {
		if !sleepCtx(ctx, interval) {
			return
		}
		c.SetWriteDeadline(time.Now().Add(2 * time.Second))
		if _, err := fmt.Fprintf(c, "X-Slow-%d: a\r\n", n); err != nil {
			a.closedByServer.Add(1)
			return
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// legitLoad sends rate requests a second from src, each on a new connection
// with a timeout of limit, for dur, and returns how many were sent, how
// many were answered 200 in time, and why the others failed.
func legitLoad(addr, src string, rate int, dur, limit time.Duration) (sent, answered int64, failures map[string]int) {
	var ok, n atomic.Int64
	var mu sync.Mutex
	failures = map[string]int{}
	fail := func(why string, err error) {
		mu.Lock()
		defer mu.Unlock()
		if ne, isNet := err.(net.Error); isNet && ne.Timeout() {
			why += " timeout"
		} else if err != nil {
			why += " error"
		}
		failures[why]++
	}
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	end := time.Now().Add(dur)
	for time.Now().Before(end) {
		<-tick.C
		n.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(limit)
			d := net.Dialer{Deadline: deadline, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
			c, err := d.Dial("tcp", addr)
			if err != nil {
				fail("dial", err)
				return
			}
			defer c.Close()
			c.SetDeadline(deadline)
			if _, err := c.Write([]byte("GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")); err != nil {
				fail("write", err)
				return
			}
			resp, body, err := readResponse(bufio.NewReader(c), "GET")
			switch {
			case err != nil:
				fail("read", err)
			case resp.StatusCode != 200 || body != "ok\n":
				fail(fmt.Sprintf("status %d", resp.StatusCode), nil)
			default:
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	return n.Load(), ok.Load(), failures
}

// TestSlowHeadsDistributed is the distributed slow-head attack: 3000
// connections from 50 addresses (60 each, under the per-client cap), each
// sending one header line every 3 s, against the default pool. No attack
// connection may reach a worker, and a client on another address must get
// at least 99% of its requests answered within 3 s, with the default
// queued-connection cap and with it at 500.
func TestSlowHeadsDistributed(t *testing.T) {
	if testing.Short() {
		t.Skip("attack test; skipped with -short")
	}
	raiseNoFile(t, 8000)
	for _, tc := range []struct {
		name   string
		limits string
	}{
		{"default", ""},
		{"queued cap 500", "limits {\n  max_queued_connections = 500\n}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, tc.limits)
			before := h.snapshot()
			ctx, cancel := context.WithCancel(context.Background())
			var a slowHeadAttack
			attackDone := make(chan struct{})
			go func() {
				a.run(ctx, h.addr, 3000, 3*time.Second)
				close(attackDone)
			}()
			// Let the attack build up, then measure the legitimate client.
			h.waitFor("the attack to hold 1000 connections", 20*time.Second, func(s view.Snapshot) bool {
				return s.Conns["head"]+s.Conns["fresh"] >= 1000 || a.peak.Load() >= 3000
			})
			sent, answered, failures := legitLoad(h.addr, "127.0.0.3", 50, 12*time.Second, 3*time.Second)
			during := h.snapshot()
			cancel()
			<-attackDone

			t.Logf("attack: %d dials, peak %d open, %d closed by the server; legitimate: %d/%d answered, failures %v",
				a.dials.Load(), a.peak.Load(), a.closedByServer.Load(), answered, sent, failures)
			t.Logf("dispatcher: conns %v, stress %v (first byte %v, head %v), counters: dispatches %d, timeout_first_byte %d, timeout_head %d, timeout_head_gap %d, incomplete_evicted %d, refused_queued %d, refused_per_client %d",
				during.Conns, during.Stress, during.FirstByteTimeout, during.HeadTimeout,
				during.Counters["dispatches"]-before.Counters["dispatches"],
				during.Counters["timeout_first_byte"]-before.Counters["timeout_first_byte"],
				during.Counters["timeout_head"]-before.Counters["timeout_head"],
				during.Counters["timeout_head_gap"]-before.Counters["timeout_head_gap"],
				during.Counters["incomplete_evicted"]-before.Counters["incomplete_evicted"],
				during.Counters["refused_queued"], during.Counters["refused_per_client"])
			if sent < 300 {
				t.Fatalf("only %d legitimate requests were sent", sent)
			}
			if answered*100 < sent*99 {
				t.Errorf("legitimate client: %d of %d answered within 3s, want at least 99%%", answered, sent)
			}
			// No attack connection reached a worker: every dispatch is one
			// of the legitimate requests.
			if d := during.Counters["dispatches"] - before.Counters["dispatches"]; d > uint64(sent) {
				t.Errorf("%d dispatches for %d legitimate requests: attack connections reached workers", d, sent)
			}
			if during.Counters["refused_queued"] != 0 {
				t.Errorf("%d connections refused for the queued cap; it must make room instead", during.Counters["refused_queued"])
			}
			// Sustained pressure (connections closed to make room) puts
			// admission in stress mode, with the timeouts shortened.
			if !during.Stress || during.HeadTimeout >= 30*time.Second || during.FirstByteTimeout >= 5*time.Second {
				t.Errorf("stress mode %v (first byte %v, head %v) under sustained pressure, want on with shortened timeouts",
					during.Stress, during.FirstByteTimeout, during.HeadTimeout)
			}
			if a.peak.Load() < 1000 {
				t.Errorf("the attack never held 1000 connections (peak %d)", a.peak.Load())
			}
		})
	}
}

// TestSlowHeadsLowNoFile is the same attack against the gatehouse binary run
// under `ulimit -n 1024`: descriptors run short, and the dispatcher makes room
// by closing incomplete connections instead of pausing accept for everyone.
func TestSlowHeadsLowNoFile(t *testing.T) {
	if testing.Short() {
		t.Skip("attack test; skipped with -short")
	}
	raiseNoFile(t, 4000)
	dir := writeConfig(t, "")
	p := startBinary(t, dir, 1024, "-config", "gatehouse.hcl")
	p.waitServing(t, "/ok")
	ctx, cancel := context.WithCancel(context.Background())
	var a slowHeadAttack
	attackDone := make(chan struct{})
	go func() {
		a.run(ctx, p.addr, 3000, 3*time.Second)
		close(attackDone)
	}()
	for i := 0; i < 200 && a.peak.Load() < 1500; i++ {
		time.Sleep(50 * time.Millisecond)
	}
	sent, answered, failures := legitLoad(p.addr, "127.0.0.3", 50, 12*time.Second, 3*time.Second)
	cancel()
	<-attackDone
	t.Logf("attack: %d dials, peak %d open, %d closed by the server; legitimate: %d/%d answered, failures %v",
		a.dials.Load(), a.peak.Load(), a.closedByServer.Load(), answered, sent, failures)
	select {
	case <-p.exited:
		t.Fatalf("gatehouse exited during the attack: %v", p.err)
	default:
	}
	if sent < 300 {
		t.Fatalf("only %d legitimate requests were sent", sent)
	}
	if answered*100 < sent*99 {
		t.Errorf("legitimate client: %d of %d answered within 3s, want at least 99%%", answered, sent)
	}
}

// TestHeadByteByByte checks head completion in the dispatcher: a head sent
// one byte at a time within the gap is dispatched once, complete; one that
// stalls past the gap is answered 408 by the dispatcher and never reaches a
// worker.
func TestHeadByteByByte(t *testing.T) {
	h := start(t, "")
	before := h.snapshot()

	c := dialFrom(t, "127.0.0.2", h.addr)
	defer c.Close()
	req := "GET /ok HTTP/1.1\r\nHost: x\r\nX-Pad: " + "abcdefghij" + "\r\n\r\n"
	for i := 0; i < len(req); i++ {
		if _, err := c.Write([]byte{req[i]}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	resp, body, err := readResponse(br, "GET")
	if err != nil || resp.StatusCode != 200 || body != "ok\n" {
		t.Fatalf("byte-by-byte head: %v, %v %q", err, resp, body)
	}
	after := h.snapshot()
	if d := after.Counters["dispatches"] - before.Counters["dispatches"]; d != 1 {
		t.Errorf("byte-by-byte head dispatched %d times, want once", d)
	}
	// An empty line sent on the kept-alive connection is ignored (RFC 9112
	// §2.2): it starts no head, so no 408 comes after the 5 s gap.
	c.Write([]byte("\r\n"))
	time.Sleep(6 * time.Second)
	c.Write([]byte("GET /ok HTTP/1.1\r\nHost: x\r\n\r\n"))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if resp, body, err := readResponse(br, "GET"); err != nil || resp.StatusCode != 200 || body != "ok\n" {
		t.Fatalf("request after an empty line and 6 s idle: %v, %v %q", err, resp, body)
	}
	after = h.snapshot()
	if after.Counters["heads_buffered"] == before.Counters["heads_buffered"] {
		t.Errorf("the dispatcher did not hold the head while it arrived")
	}

	// Stalled past the gap: 408 from the dispatcher, no dispatch.
	s := dialFrom(t, "127.0.0.2", h.addr)
	defer s.Close()
	if _, err := s.Write([]byte("GET /ok HTTP/1.1\r\nHost: x\r\n")); err != nil {
		t.Fatal(err)
	}
	s.SetReadDeadline(time.Now().Add(15 * time.Second))
	resp, _, err = readResponse(bufio.NewReader(s), "GET")
	if err != nil || resp.StatusCode != 408 || !resp.Close {
		t.Fatalf("stalled head: %v, %v; want 408 with Connection: close", err, resp)
	}
	if err := expectClosed(s, 5*time.Second); err != nil {
		t.Errorf("stalled head: %v", err)
	}
	last := h.snapshot()
	if d := last.Counters["dispatches"] - after.Counters["dispatches"]; d != 0 {
		t.Errorf("stalled head dispatched %d times, want never", d)
	}
	if last.Counters["timeout_head_gap"] != after.Counters["timeout_head_gap"]+1 {
		t.Errorf("timeout_head_gap %d, want %d", last.Counters["timeout_head_gap"], after.Counters["timeout_head_gap"]+1)
	}
}
