package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/admin"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
	"github.com/hashicorp/go-hclog"
)

// attackConfig has two workers, /ok and the attack handler.
const attackConfig = `
workers {
  count       = 2
  concurrency = 4
}
route "/ok" {
  respond {
    body = "ok\n"
  }
}
route "/attack" {
  embedded {
    name = "attack"
  }
}
`

// attackKills sends one request that makes the worker serving it violate
// the seccomp allow-list, from src, and fails unless the connection closes
// without a response (the worker died with it).
func attackKills(t *testing.T, h *harness, src string, i int) {
	t.Helper()
	cl := newClient(t, src, h.addr)
	resp, _, err := cl.get("/attack?try=socket")
	if err == nil {
		t.Fatalf("attack %d from %s was answered %d; the worker serving it should have died", i, src, resp.StatusCode)
	}
	cl.c.Close()
}

// deathsReach waits until the supervisor counted n worker deaths.
func (h *harness) deathsReach(n uint64) view.Snapshot {
	h.t.Helper()
	return h.waitFor(fmt.Sprintf("%d worker deaths", n), 20*time.Second, func(s view.Snapshot) bool {
		return s.Counters["worker_deaths"] >= n
	})
}

// An embedded handler violates the sandbox on behalf of one client
// (127.0.0.2): each time, the worker serving it is killed (SIGSYS). After
// death_penalty_threshold (3) such deaths within a minute the client is
// refused for death_penalty_duration, its new connections closed at once,
// while a second client (127.0.0.3) is served throughout; the penalty shows
// in `gatehousectl clients` and the metrics, and once it is over the first
// client is served again.
func TestDeathPenalty(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the strict sandbox is checked when started as root")
	}
	// Long enough for the checks below on a loaded machine, short enough
	// to see it end.
	const penalty = 10 * time.Second
	h := start(t, attackConfig+fmt.Sprintf(`
limits {
  death_penalty_duration = "%s"
}
`, penalty))
	h.expectDeaths(3)
	sock := adminFor(t, h)
	ctlBin(t) // built before the penalty starts

	// The second client, served throughout.
	stop := make(chan struct{})
	served := make(chan error, 1)
	var okB atomic.Int64
	go func() {
		cl := newClient(t, "127.0.0.3", h.addr)
		for i := 0; i < 100000; i++ {
			select {
			case <-stop:
				served <- nil
				return
			default:
			}
			resp, body, err := cl.get("/ok")
			if err != nil || resp.StatusCode != 200 || body != "ok\n" {
				served <- fmt.Errorf("second client, request %d: %v", i, err)
				return
			}
			okB.Add(1)
			if resp.Close { // a connection's 1000th response closes it
				cl.c.Close()
				cl = newClient(t, "127.0.0.3", h.addr)
			}
			time.Sleep(5 * time.Millisecond)
		}
		served <- nil
	}()

	for i := 0; i < 3; i++ {
		// Both workers ready, so that the attack and the second client's
		// request go to different workers (the least loaded is picked).
		h.waitFor("both workers ready", 20*time.Second, settled(2))
		if s := h.snapshot(); s.Client("127.0.0.2").Penalty > 0 {
			t.Fatalf("refused after %d deaths, before the threshold of 3", i)
		}
		attackKills(t, h, "127.0.0.2", i)
		h.deathsReach(uint64(i + 1))
	}
	s := h.snapshot()
	if p := s.Client("127.0.0.2").Penalty; p <= 0 || p > penalty {
		t.Fatalf("after 3 deaths: penalty %v, want up to %v", p, penalty)
	}
	if p := s.Client("127.0.0.3").Penalty; p != 0 {
		t.Errorf("the second client is refused too (%v)", p)
	}

	// Refused: closed at once, no response.
	during := okB.Load()
	for i := 0; i < 5; i++ {
		c := dialFrom(t, "127.0.0.2", h.addr)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp, _, err := readResponse(bufio.NewReader(c), "GET"); err == nil {
			t.Errorf("penalized client, connection %d: answered %d", i, resp.StatusCode)
		}
		c.Close()
	}
	out := ctl(t, nil, ctlBin(t), "-socket", sock, "clients")
	row := ""
	for _, l := range strings.Split(out.stdout, "\n") {
		if strings.HasPrefix(l, "127.0.0.2 ") {
			row = l
		}
	}
	if !strings.Contains(row, " for ") {
		t.Errorf("gatehousectl clients does not show the penalty:\n%s%s", out.stdout, out.stderr)
	}
	m := ctlJSON(t, sock, "metrics").Metrics
	for _, want := range []string{"gatehouse_penalized_clients 1", "gatehouse_client_penalties_total 1", `gatehouse_worker_deaths_total{reason="seccomp",signal="SIGSYS"} 3`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if n := h.snapshot().Counters["refused_penalty"]; n < 5 {
		t.Errorf("refused_penalty = %d, want at least the 5 refused connections", n)
	}

	// Over: served again.
	h.waitFor("the penalty to end", 20*time.Second, func(s view.Snapshot) bool {
		return s.Client("127.0.0.2").Penalty == 0
	})
	cl := newClient(t, "127.0.0.2", h.addr)
	if resp, _, err := cl.get("/ok"); err != nil || resp.StatusCode != 200 {
		t.Errorf("after the penalty: %v", err)
	}
	close(stop)
	if err := <-served; err != nil {
		t.Error(err)
	}
	if okB.Load() <= during {
		t.Errorf("the second client was not served during the penalty")
	}
	logs := h.logs.String()
	for _, want := range []string{"connections closed with their worker", "127.0.0.2 on http", "client refused"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %q", want)
		}
	}
	t.Logf("second client: %d requests served across 3 deaths and the penalty", okB.Load())
}

// A replacement worker killed by the first request it is handed is
// respawned with the normal backoff (100 ms doubling), not throttled for a
// minute like one that dies before it is handed any connection: eight
// requests that each kill the worker serving them (from eight clients, so
// no penalty applies) leave the pool recovering at once, and a legitimate
// request is answered within no_worker_timeout.
func TestReplacementKilledByRequestRecovers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the strict sandbox is checked when started as root")
	}
	h := start(t, attackConfig)
	const kills = 8
	h.expectDeaths(kills)
	for i := 0; i < kills; i++ {
		attackKills(t, h, fmt.Sprintf("127.0.0.%d", 10+i), i)
		h.deathsReach(uint64(i + 1))
	}
	s := h.snapshot()
	restarts := 0
	for _, w := range s.Workers {
		restarts += w.Restarts
		if w.Backoff >= time.Minute || w.Backoff > 10*time.Second {
			t.Errorf("worker %d: backoff %v after being killed by requests, want the normal backoff (at most 10s)", w.Slot, w.Backoff)
		}
	}
	if restarts != kills {
		t.Errorf("%d restarts, want %d", restarts, kills)
	}
	cl := newClient(t, "127.0.0.3", h.addr)
	for i := 0; i < 10; i++ {
		if resp, body, err := cl.get("/ok"); err != nil || resp.StatusCode != 200 || body != "ok\n" {
			t.Fatalf("legitimate request %d after the kills: %v", i, err)
		}
	}
	for _, w := range h.snapshot().Workers {
		t.Logf("worker %d: %d restarts, last backoff %v", w.Slot, w.Restarts, w.Backoff)
	}
}

// adminFor serves an admin socket for h's supervisor in the test's
// directory and returns its path.
func adminFor(t *testing.T, h *harness) string {
	t.Helper()
	sock := filepath.Join(workerReadableTempDir(t), "admin.sock")
	a, err := admin.Listen(admin.Options{Path: sock, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Serve(h.sup.Admin()) }()
	t.Cleanup(func() {
		a.Close()
		if err := <-done; err != nil {
			t.Errorf("admin Serve: %v", err)
		}
	})
	return sock
}
