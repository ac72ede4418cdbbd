package e2e

import (
	"fmt"
	"math"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/adminapi"
)

// A worker killed 10 times in a row is respawned after growing delays (100 ms
// doubling to 10 s, then held at 10 s for the last three), seen in
// `gatehousectl status -json`, and serves again once the kills stop. Before
// each kill the worker serves one request: one that dies before it was ever
// handed a connection is throttled for a minute instead.
// About 45 seconds (the delays add up to 42.7 s).
func TestOpsWorkerBackoff(t *testing.T) {
	if testing.Short() {
		t.Skip("takes about 45 seconds")
	}
	// It waits on restart delays, not the CPU: it overlaps the other long
	// waits at the package's end.
	t.Parallel()
	const kills = 10
	p, sock, _ := startAdmin(t, `
workers {
  count = 1
}
limits {
  no_worker_timeout = "30s"
}
`)
	p.expectDeaths(kills)
	worker := func() adminapi.Worker {
		t.Helper()
		st := ctlJSON(t, sock, "status").Status
		if len(st.Workers) != 1 {
			t.Fatalf("status: %+v", st)
		}
		return st.Workers[0]
	}
	waitWorker := func(what string, limit time.Duration, cond func(adminapi.Worker) bool) adminapi.Worker {
		t.Helper()
		deadline := time.Now().Add(limit)
		for {
			w := worker()
			if cond(w) {
				return w
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiting %v for %s: worker %+v", limit, what, w)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	want := 0.1
	for i := range kills {
		before := worker()
		// One request reaches the (only) worker, waiting out its respawn.
		if code, _ := opsGet(t, p.addr, "/ok"); code != 200 {
			t.Fatalf("kill %d: GET /ok: %d", i, code)
		}
		w := waitWorker("the request to be counted", 10*time.Second, func(w adminapi.Worker) bool {
			return w.Served > before.Served && w.State == "ready" && w.PID > 0
		})
		killed := time.Now()
		if err := syscall.Kill(w.PID, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %d: %v", i, err)
		}
		dead := waitWorker("the death to be seen", 10*time.Second, func(x adminapi.Worker) bool { return x.Restarts == w.Restarts+1 })
		if math.Abs(dead.BackoffSeconds-want) > 1e-9 {
			t.Errorf("kill %d: backoff %vs, want %vs", i+1, dead.BackoffSeconds, want)
		}
		back := waitWorker("the respawn", 30*time.Second, func(x adminapi.Worker) bool { return x.State == "ready" && x.PID != w.PID })
		took := time.Since(killed)
		if took.Seconds() < dead.BackoffSeconds {
			t.Errorf("kill %d: respawned after %v, before its %vs backoff", i+1, took, dead.BackoffSeconds)
		}
		t.Logf("kill %2d: backoff %5.1fs, ready again after %v (pid %d → %d)", i+1, dead.BackoffSeconds, took.Round(time.Millisecond), w.PID, back.PID)
		want = math.Min(2*want, 10)
	}

	// The kills stop: the worker serves.
	for range 5 {
		if code, body := opsGet(t, p.addr, "/ok"); code != 200 || body != "ok\n" {
			t.Fatalf("after the kills: %d %q", code, body)
		}
	}
	w := worker()
	if w.State != "ready" || w.Restarts != kills || w.BackoffSeconds != 10 {
		t.Errorf("after the kills: %+v", w)
	}
	m := ctlJSON(t, sock, "metrics").Metrics
	if !strings.Contains(m, fmt.Sprintf(`gatehouse_worker_deaths_total{reason="signal",signal="SIGKILL"} %d`, kills)) ||
		!strings.Contains(m, fmt.Sprintf(`gatehouse_worker_restarts_total{slot="0"} %d`, kills)) {
		t.Errorf("metrics after %d kills lack the deaths and restarts:\n%s", kills, m)
	}
}
