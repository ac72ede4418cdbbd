package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// declaredOnly holds one connection from src that declares a body of n bytes
// and sends none of it; when the server closes it (the minimum body rate),
// it connects again, until ctx ends. It counts its connections in opened.
func declaredOnly(ctx context.Context, src, addr string, n int, opened *atomic.Int64) {
	head := fmt.Sprintf("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", n)
	var buf [512]byte
	for ctx.Err() == nil {
		d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			if !sleepCtx(ctx, 100*time.Millisecond) {
				return
			}
			continue
		}
		opened.Add(1)
		stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
		if _, err := c.Write([]byte(head)); err == nil {
			// Read until the server answers (408) and closes.
			for {
				if _, err := c.Read(buf[:]); err != nil {
					break
				}
			}
		}
		stop()
		c.Close()
	}
}

// TestBodyBudgetChargedOnArrival is issue 27's remote attack on the body
// budget: 8 addresses x 32 connections, each declaring a 1 MiB body (the
// default max_body_bytes) and sending none of it, connecting again whenever
// the server closes one. When the budget was charged with the declared
// length they held all of it (256 MiB, 32 MiB per address), and a client
// on another address posting 10 KB bodies got 503 for nearly all of them.
// The budget counts the bytes that arrived: the attack charges its
// connections and nothing more, and at least 99 of the client's 100
// uploads are answered 200. No worker dies.
func TestBodyBudgetChargedOnArrival(t *testing.T) {
	if testing.Short() {
		t.Skip("attack test; skipped with -short")
	}
	raiseNoFile(t, 4096)
	h := start(t, `
route "/" {
  respond {
    body = "ok\n"
  }
}
`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var attack sync.WaitGroup
	var opened atomic.Int64
	for a := 10; a < 18; a++ {
		for range 32 {
			attack.Add(1)
			go func() {
				defer attack.Done()
				declaredOnly(ctx, fmt.Sprintf("127.0.0.%d", a), h.addr, 1<<20, &opened)
			}()
		}
	}
	defer attack.Wait()
	defer cancel()
	h.waitFor("the attack's 256 bodies outside the pool", 20*time.Second, func(s view.Snapshot) bool {
		return s.BodyConns >= 256
	})

	body := strings.Repeat("u", 10_000)
	req := fmt.Sprintf("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	failures := map[string]int{}
	var ok int
	var during view.Snapshot
	for i := range 100 {
		status, err := upload("127.0.0.3", h.addr, req)
		switch {
		case err != nil:
			failures[err.Error()]++
		case status != 200:
			failures[fmt.Sprintf("status %d", status)]++
		default:
			ok++
		}
		if i == 50 {
			during = h.snapshot()
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("uploads of 10 KB answered 200: %d of 100, failures %v; attack connections opened %d; at the 50th upload the body budget held %d connections, %d bytes; body_budget_refused %d",
		ok, failures, opened.Load(), during.BodyConns, during.BodyBytes, during.Counters["body_budget_refused"])
	if ok < 99 {
		t.Errorf("%d of 100 uploads answered 200, want at least 99", ok)
	}
	if during.BodyConns < 128 {
		t.Errorf("the attack held %d bodies during the uploads, want most of its 256: it did not press", during.BodyConns)
	}
}

// upload sends req from src on a new connection and returns the status.
func upload(src, addr, req string) (int, error) {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(req)); err != nil {
		return 0, err
	}
	resp, _, err := readResponse(bufio.NewReader(c), "POST")
	if err != nil {
		return 0, err
	}
	return resp.StatusCode, nil
}

// TestBodyBudgetRefusesTheOneThatWantsMore: with 1 MiB per client, a body
// whose bytes would overfill its client's budget is refused 503, while the
// one already charged keeps its bytes, and, once the refused one is gone,
// completes (1 MiB through 16 reports) and reaches its upstream whole.
func TestBodyBudgetRefusesTheOneThatWantsMore(t *testing.T) {
	const mib = 1 << 20
	up := startBodyUpstream(t)
	h := start(t, `
limits {
  body_buffer_bytes_per_client = 1048576
}
upstream "app" {
  addresses = ["`+up.addr+`"]
}
route "/" {
  proxy {
    upstream = "app"
  }
}
`)
	head := func(id string) string {
		return fmt.Sprintf("POST /up HTTP/1.1\r\nHost: x\r\nX-Id: %s\r\nContent-Length: %d\r\n\r\n", id, mib)
	}
	part := strings.Repeat("p", 700<<10)
	a := dialFrom(t, "127.0.0.5", h.addr)
	defer a.Close()
	a.Write([]byte(head("a") + part))
	h.waitFor("the first body charged 640 KiB", 20*time.Second, func(s view.Snapshot) bool {
		return s.Client("127.0.0.5").BodyBytes == 640<<10
	})
	b := dialFrom(t, "127.0.0.5", h.addr)
	defer b.Close()
	b.Write([]byte(head("b") + part))
	b.SetReadDeadline(time.Now().Add(20 * time.Second))
	if resp, _, err := readResponse(bufio.NewReader(b), "POST"); err != nil || resp.StatusCode != 503 {
		t.Fatalf("the second body: %v %v, want 503", resp, err)
	}
	h.waitFor("the refused body gone", 20*time.Second, func(s view.Snapshot) bool {
		c := s.Client("127.0.0.5")
		return c.BodyConns == 1 && c.BodyBytes == 640<<10
	})
	a.Write([]byte(strings.Repeat("q", mib-len(part))))
	a.SetReadDeadline(time.Now().Add(20 * time.Second))
	if resp, _, err := readResponse(bufio.NewReader(a), "POST"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("the first body: %v %v, want 200", resp, err)
	}
	up.mu.Lock()
	seen := up.seen["a"]
	up.mu.Unlock()
	if seen.n != mib {
		t.Errorf("the upstream read %d bytes of the first body, want %d", seen.n, mib)
	}
	s := h.snapshot()
	if s.BodyConns != 0 || s.BodyBytes != 0 || s.Counters["body_budget_refused"] != 1 {
		t.Errorf("after: the budget holds %d connections, %d bytes, %d refused; want 0, 0, 1",
			s.BodyConns, s.BodyBytes, s.Counters["body_budget_refused"])
	}
}
