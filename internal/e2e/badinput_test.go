package e2e

import (
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// A 10 000-connection churn of bad peers (connect and close at once, reset
// mid-round, abandon a response) is counted, crashes nothing and leaks no
// descriptor in the supervisor.
func TestChurnLeaksNothing(t *testing.T) {
	h := start(t, `
workers {
  count       = 2
  concurrency = 8
}
`)
	before := openFDs(t)
	const total, par = 10000, 8
	var wg sync.WaitGroup
	for g := 0; g < par; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			src := fmt.Sprintf("127.0.0.%d", 2+g)
			d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
			for i := g; i < total; i += par {
				c, err := d.Dial("tcp", h.addr)
				if err != nil {
					t.Errorf("dial %d: %v", i, err)
					return
				}
				tc := c.(*net.TCPConn)
				switch i % 4 {
				case 0: // connect and close at once
				case 1: // reset in the middle of a head
					fmt.Fprintf(tc, "GET /ok HTTP/1.1\r\nHo")
					time.Sleep(time.Millisecond)
					tc.SetLinger(0)
				case 2: // a request whose response is never read
					fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
				case 3: // reset right after a request
					fmt.Fprintf(tc, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
					tc.SetLinger(0)
				}
				tc.Close()
			}
		}(g)
	}
	wg.Wait()
	s := h.waitFor("every churned connection to be closed", 30*time.Second, func(s view.Snapshot) bool {
		return len(s.Conns) == 0 && s.AtWorkers == 0
	})
	// Under a churn faster than two cores serve, admission may refuse some
	// connections (per-client and queued caps): every one is accounted for.
	refused := s.Counters["refused_per_client"] + s.Counters["refused_queued"]
	if got := s.Counters["accepted"] + refused; got != total {
		t.Errorf("accepted+refused = %d, want %d", got, total)
	}
	if got, want := s.Counters["closed"], s.Counters["accepted"]; got != want {
		t.Errorf("closed %d of %d accepted", got, want)
	}
	closedEarly := s.Counters["peer_closed"] + s.Counters["round_peer_closed"] + s.Counters["round_peer_reset"]
	if closedEarly == 0 {
		t.Errorf("no peer close or reset was counted: %v", s.Counters)
	}
	// The supervisor is unharmed and serves as before.
	cl := newClient(t, "127.0.0.1", h.addr)
	if resp, _, err := cl.get("/ok"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("after the churn: %v", err)
	}
	cl.c.Close()
	h.waitFor("the check connection to close", 10*time.Second, func(s view.Snapshot) bool { return len(s.Conns) == 0 })
	if after := openFDs(t); after != before {
		t.Errorf("supervisor descriptors: %d before the churn, %d after", before, after)
	}
	t.Logf("counters: %v", s.Counters)
}
