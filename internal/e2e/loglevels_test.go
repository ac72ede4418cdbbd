package e2e

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// warnOrError matches a line an operator is told to look at.
var warnOrError = regexp.MustCompile(`(?m)^\S+ \[(WARN|ERROR)\].*$`)

// Routine client behaviour — connections refused over the per-client cap, a
// client closing its idle kept-alive connection — is no WARN: it is counted
// and summarised at INFO (here at shutdown, otherwise once a minute). The
// real command, drained through gatehousectl.
func TestRoutineClientEventsAreNotWarnings(t *testing.T) {
	p, sock, _ := startAdmin(t, "limits {\n  max_connections_per_client = 2\n}\n")
	// What it logs from here on: the start may warn about the accounts it
	// runs under (no gatehouse account, or started unprivileged).
	started := len(p.log())
	waitMetric := func(what, line string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(ctlJSON(t, sock, "metrics").Metrics, line) {
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s: no %q in the metrics", what, line)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// A kept-alive connection, served, then closed by its client while idle.
	idle := newClient(t, "127.0.0.2", p.addr)
	if resp, _, err := idle.get("/ok"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /ok: %v", err)
	}
	waitMetric("the connection to be parked idle", `gatehouse_connections{state="idle"} 1`)
	idle.c.Close()
	waitMetric("the idle connection's close", "gatehouse_connections_peer_closed_total 1")

	// Five connections from one client over a cap of two: three refused.
	for i := 0; i < 5; i++ {
		c := dialFrom(t, "127.0.0.3", p.addr)
		defer c.Close()
	}
	waitMetric("three refusals", `gatehouse_connections_refused_total{reason="per_client"} 3`)

	if r := ctl(t, nil, ctlBin(t), "-socket", sock, "drain"); r.code != 0 {
		t.Fatalf("drain: exit %d: %s", r.code, r.stderr)
	}
	if code := p.waitExit(t, 20*time.Second); code != 0 {
		t.Fatalf("exit status %d after drain", code)
	}
	logs := p.log()
	// Other routine events (the admitted connections' first-byte timeouts on
	// a slow machine) may join the summary.
	summary := regexp.MustCompile(`(?m)^\S+ \[INFO\]  gatehouse\.dispatcher: client events: period=\S+ .*$`).FindString(logs)
	if !strings.Contains(summary, " refused_per_client=3") || !strings.Contains(summary, " peer_closed=1") {
		t.Errorf("no INFO summary of the refusals and the close (%q):\n%s", summary, logs)
	}
	if w := warnOrError.FindAllString(logs[started:], -1); len(w) > 0 {
		t.Errorf("routine client behaviour logged for an operator to look at:\n%s", strings.Join(w, "\n"))
	}
}

// Workers replaced on reload, and workers drained at shutdown, exit at INFO:
// no "worker died" error for an exit the supervisor asked for.
func TestReplacedWorkersExitQuietly(t *testing.T) {
	h := start(t, `
workers {
  count = 2
}
`)
	old := h.snapshot().Workers
	// What it logs from here on: the start warns that the test's supervisor
	// keeps root.
	started := len(h.logs.String())
	src, err := os.ReadFile(h.config)
	if err != nil {
		t.Fatal(err)
	}
	// A new route body: the workers are replaced one by one.
	if err := os.WriteFile(h.config, []byte(strings.Replace(string(src), `body   = "ok\n"`, `body   = "ok2\n"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.sup.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	h.waitFor("both old workers to exit and two new ones to be ready", 30*time.Second, func(s view.Snapshot) bool {
		ready := 0
		for _, w := range s.Workers {
			for _, o := range old {
				if w.PID == o.PID {
					return false
				}
			}
			if w.State == "ready" {
				ready++
			}
		}
		return ready == 2
	})
	h.waitFor("the old workers' exits to be logged", 10*time.Second, func(view.Snapshot) bool {
		return strings.Count(h.logs.String(), "worker exited") >= len(old)
	})
	if w := warnOrError.FindAllString(h.logs.String()[started:], -1); len(w) > 0 {
		t.Errorf("a replaced worker logged for an operator to look at:\n%s", strings.Join(w, "\n"))
	}
	if d := h.snapshot().Counters["worker_deaths"]; d != 0 {
		t.Errorf("worker_deaths = %d after a reload", d)
	}
}
