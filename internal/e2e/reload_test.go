package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// reloadConfig is a whole configuration for the reload test: workers, a
// route body, and the admin socket the test watches the workers through.
func reloadConfig(sock string, workers int, body string) string {
	return fmt.Sprintf(`
listener "http" {
  address = "127.0.0.1:0"
}
admin {
  socket = %q
}
workers {
  count       = %d
  concurrency = 4
}
limits {
  keep_alive_idle_timeout = "60s"
}
log {
  access_log = false
}
route "/r" {
  respond {
    body = %q
  }
}
`, sock, workers, body)
}

// settled reports whether exactly n workers are ready and none is starting,
// draining or retiring.
func settled(n int) func(view.Snapshot) bool {
	return func(s view.Snapshot) bool {
		if len(s.Workers) != n {
			return false
		}
		for _, w := range s.Workers {
			if w.State != "ready" {
				return false
			}
		}
		return true
	}
}

// Reload under load: a client sending requests for 30 s sees no failure
// while SIGHUP changes the worker count 4 → 2 → 6 and a route's body; a
// parked connection survives every step. The real command, real signals;
// the workers are watched through gatehousectl.
func TestReloadUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("a 30 s reload run")
	}
	dir := workerReadableTempDir(t)
	sock := filepath.Join(dir, "admin.sock")
	cfgPath := filepath.Join(dir, "gatehouse.hcl")
	write := func(workers int, body string) {
		t.Helper()
		if err := os.WriteFile(cfgPath, []byte(reloadConfig(sock, workers, body)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(4, "one")
	p := startBinary(t, dir, 0, "-config", "gatehouse.hcl")
	settle := func(n int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			st := ctlJSON(t, sock, "status").Status
			ready := 0
			for _, w := range st.Workers {
				if w.State == "ready" {
					ready++
				}
			}
			if ready == n && len(st.Workers) == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("workers did not settle at %d: %+v", n, st.Workers)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	settle(4)
	reload := func(workers int, body string) {
		t.Helper()
		write(workers, body)
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		settle(workers)
	}
	parked := newClient(t, "127.0.0.3", p.addr)
	if resp, _, err := parked.get("/r"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("parked connection: %v", err)
	}

	var requests, failures atomic.Int64
	var bodies sync.Map
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for lane := 0; lane < 2; lane++ {
		wg.Add(1)
		go func(lane int) {
			defer wg.Done()
			var cl *client
			for i := 0; i < 1_000_000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if cl == nil || i%20 == 0 { // new connections and kept-alive ones
					if cl != nil {
						cl.c.Close()
					}
					cl = newClient(t, "127.0.0.2", p.addr)
				}
				resp, body, err := cl.get("/r")
				requests.Add(1)
				if err != nil || resp.StatusCode != 200 {
					failures.Add(1)
					t.Errorf("lane %d request %d: %v %v", lane, i, resp, err)
					cl = nil
					continue
				}
				bodies.Store(body, true)
				if resp.Close {
					cl = nil
				}
			}
		}(lane)
	}
	began := time.Now()
	time.Sleep(5 * time.Second)
	reload(2, "one")
	time.Sleep(5 * time.Second)
	reload(6, "one")
	time.Sleep(5 * time.Second)
	reload(6, "two")
	if rest := 30*time.Second - time.Since(began); rest > 0 {
		time.Sleep(rest)
	}
	close(stop)
	wg.Wait()

	if failures.Load() != 0 {
		t.Fatalf("%d of %d requests failed across the reloads", failures.Load(), requests.Load())
	}
	if _, ok := bodies.Load("two"); !ok {
		t.Errorf("the route's new body was never served")
	}
	if resp, body, err := parked.get("/r"); err != nil || resp.StatusCode != 200 || body != "two" {
		t.Errorf("the parked connection did not survive the reloads: %v %q %v", resp, body, err)
	}
	t.Logf("%d requests, no failure, across SIGHUP reloads 4 → 2 → 6 workers and a new body", requests.Load())
}

// An invalid file keeps the running configuration.
func TestReloadInvalidKeepsRunning(t *testing.T) {
	h := start(t, "")
	if err := os.WriteFile(h.config, []byte("listener \"http\" {\n  adress = \"x\"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := h.sup.Reload(t.Context())
	if err == nil {
		t.Fatal("an invalid file reloaded")
	}
	cl := newClient(t, "127.0.0.1", h.addr)
	if resp, _, err := cl.get("/ok"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("serving after a failed reload: %v", err)
	}
	if got := h.logs.String(); !contains(got, "keeping the running configuration") || !contains(got, "test.hcl:2") {
		t.Errorf("the failure was not logged with its line:\n%s", got)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
