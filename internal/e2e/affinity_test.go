package e2e

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// Affinity (docs/DESIGN.md §2.7): a worker keeps its copy of a kept-alive
// connection's descriptor while the supervisor parks its own, and the next
// request comes back to it without a descriptor. These tests look at which
// processes hold the connection's socket through /proc.

const affinityConfig = `
workers {
  count       = 2
  concurrency = 4
  hot_window  = "0s"
  max_kept_connections = 256
}
route "/ok" {
  respond {
    body = "ok\n"
  }
}
`

// serverInode returns the inode of the supervisor's side of c (its local
// address is c's remote one), from /proc/net/tcp.
func serverInode(t *testing.T, c net.Conn) string {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Skipf("no /proc/net/tcp: %v", err)
	}
	hexAddr := func(a net.Addr) string {
		ta := a.(*net.TCPAddr)
		ip := ta.IP.To4()
		return fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], ta.Port)
	}
	local, remote := hexAddr(c.RemoteAddr()), hexAddr(c.LocalAddr())
	for _, l := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(l)
		if len(f) > 9 && f[1] == local && f[2] == remote {
			return f[9]
		}
	}
	t.Fatalf("the server side of %v is not in /proc/net/tcp", c.LocalAddr())
	return ""
}

// holders returns the slots of the workers whose process holds a descriptor
// of the socket inode.
func holders(t *testing.T, s view.Snapshot, inode string) []int {
	t.Helper()
	var out []int
	for _, w := range s.Workers {
		if w.PID <= 0 || w.State == "dead" {
			continue
		}
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", w.PID))
		if os.IsPermission(err) {
			t.Skip("cannot read the workers' descriptors (not root)")
		}
		for _, e := range ents {
			if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", w.PID, e.Name())); l == "socket:["+inode+"]" {
				out = append(out, w.Slot)
			}
		}
	}
	return out
}

// waitHolders waits until the workers holding inode are exactly want (the
// worker handles Forget on its own time).
func waitHolders(t *testing.T, h *harness, inode string, want ...int) {
	t.Helper()
	var got []int
	for i := 0; i < 200; i++ {
		got = holders(t, h.snapshot(), inode)
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("workers holding the connection: %v, want %v", got, want)
}

// keptTotal is how many parked connections' copies the workers keep.
func keptTotal(s view.Snapshot) int {
	n := 0
	for _, w := range s.Workers {
		n += w.Kept
	}
	return n
}

// parkedKept waits until the connection is parked with one kept copy, and
// returns the snapshot and the keeper's slot.
func parkedKept(t *testing.T, h *harness, inode string) (view.Snapshot, int) {
	t.Helper()
	s := h.waitFor("parked and kept", 10*time.Second, func(s view.Snapshot) bool {
		return s.Conns["idle"] >= 1 && keptTotal(s) == 1
	})
	for _, w := range s.Workers {
		if w.Kept == 1 {
			waitHolders(t, h, inode, w.Slot)
			return s, w.Slot
		}
	}
	panic("unreachable")
}

func getOK(t *testing.T, cl *client) {
	t.Helper()
	resp, body, err := cl.get("/ok")
	if err != nil || resp.StatusCode != 200 || body != "ok\n" {
		t.Fatalf("GET /ok: %v %v %q", resp, err, body)
	}
}

// A kept-alive connection's next requests go to the worker that served it,
// without a descriptor: that worker alone holds a copy while it is parked;
// when the client closes it, the supervisor closes its copy and the worker
// is told to close its own.
func TestAffinityPlainKeepAlive(t *testing.T) {
	h := start(t, affinityConfig)
	cl := newClient(t, "127.0.0.2", h.addr)
	getOK(t, cl)
	inode := serverInode(t, cl.c)
	_, keeper := parkedKept(t, h, inode)
	before := h.snapshot().Counters
	const n = 5
	for i := 0; i < n; i++ {
		getOK(t, cl)
		if _, k := parkedKept(t, h, inode); k != keeper {
			t.Fatalf("request %d: kept by worker %d, then %d", i, keeper, k)
		}
	}
	after := h.snapshot().Counters
	if got := after["affinity"] - before["affinity"]; got != n {
		t.Errorf("%d dispatches without a descriptor, want %d", got, n)
	}
	if got := after["affinity_moves"]; got != 0 {
		t.Errorf("affinity_moves = %d, want 0", got)
	}
	cl.c.Close()
	h.waitFor("closed and forgotten", 10*time.Second, func(s view.Snapshot) bool {
		return len(s.Conns) == 0 && keptTotal(s) == 0
	})
	waitHolders(t, h, inode)
}

// The idle timeout closes a kept connection: the client sees its end and
// no worker keeps a copy.
func TestAffinityIdleTimeout(t *testing.T) {
	h := start(t, affinityConfig+`
limits {
  keep_alive_idle_timeout = "1s"
}
`)
	cl := newClient(t, "127.0.0.2", h.addr)
	getOK(t, cl)
	inode := serverInode(t, cl.c)
	parkedKept(t, h, inode)
	if err := expectClosed(cl.c, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	h.waitFor("forgotten", 10*time.Second, func(s view.Snapshot) bool { return keptTotal(s) == 0 && len(s.Conns) == 0 })
	waitHolders(t, h, inode)
}

// The keeper's death loses its copy only: the supervisor's serves on, and
// the connection's next request is served by another worker.
func TestAffinityKeeperDeath(t *testing.T) {
	h := start(t, affinityConfig)
	h.expectDeaths(1)
	cl := newClient(t, "127.0.0.2", h.addr)
	getOK(t, cl)
	inode := serverInode(t, cl.c)
	s, keeper := parkedKept(t, h, inode)
	if err := syscall.Kill(s.Workers[keeper].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the death counted", 10*time.Second, func(s view.Snapshot) bool {
		return s.Counters["worker_deaths"] == 1 && keptTotal(s) == 0
	})
	getOK(t, cl)
	s, _ = parkedKept(t, h, inode)
	if s.Counters["closed"] != 0 {
		t.Errorf("%d connections closed by the death, want 0", s.Counters["closed"])
	}
}

// A reload that replaces the workers keeps a parked kept connection: its
// next request is served by a new worker, and the old one's copy is gone
// with it.
func TestAffinityReload(t *testing.T) {
	h := start(t, affinityConfig)
	cl := newClient(t, "127.0.0.2", h.addr)
	getOK(t, cl)
	inode := serverInode(t, cl.c)
	s, keeper := parkedKept(t, h, inode)
	oldPID := s.Workers[keeper].PID
	src, err := os.ReadFile(h.config)
	if err != nil {
		t.Fatal(err)
	}
	// A different route body needs new workers.
	if err := os.WriteFile(h.config, []byte(strings.Replace(string(src), `body = "ok\n"`, `body = "ok\n"
    status = 200`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.sup.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the workers replaced", 20*time.Second, func(s view.Snapshot) bool {
		for _, w := range s.Workers {
			if w.PID == oldPID || w.State != "ready" {
				return false
			}
		}
		return len(s.Workers) == 2
	})
	getOK(t, cl)
	s, _ = parkedKept(t, h, inode)
	if s.Counters["closed"] != 0 {
		t.Errorf("%d connections closed by the reload, want 0", s.Counters["closed"])
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(oldPID) + "/fd"); err == nil {
		t.Errorf("the old keeper (pid %d) still runs", oldPID)
	}
}

// Shutdown closes a parked kept connection at once, as any parked one.
func TestAffinityShutdown(t *testing.T) {
	h := start(t, affinityConfig)
	cl := newClient(t, "127.0.0.2", h.addr)
	getOK(t, cl)
	inode := serverInode(t, cl.c)
	parkedKept(t, h, inode)
	h.stopped = true
	h.sup.Drain()
	if err := expectClosed(cl.c, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-h.done:
		h.done <- err // for the harness's cleanup
	case <-time.After(20 * time.Second):
		t.Fatal("the supervisor did not stop")
	}
}

// A kept connection whose keeper is full moves to another worker with the
// supervisor's descriptor; the keeper is told to close its copy.
func TestAffinityMovesFromFullKeeper(t *testing.T) {
	h := start(t, `
workers {
  count       = 2
  concurrency = 1
  hot_window  = "0s"
  max_kept_connections = 256
}
route "/ok" {
  respond {
    body = "ok\n"
  }
}
route "/hold" {
  request_buffering = false
  respond {
    body = "held\n"
  }
}
`)
	h.waitFor("both workers ready", 20*time.Second, settled(2))
	cl := newClient(t, "127.0.0.2", h.addr)
	getOK(t, cl)
	inode := serverInode(t, cl.c)
	_, keeper := parkedKept(t, h, inode)
	// Fill the keeper: hold requests until one lands on it.
	var holds []net.Conn
	for i := 0; i < 2; i++ {
		c := dialFrom(t, fmt.Sprintf("127.0.0.%d", 3+i), h.addr)
		defer c.Close()
		fmt.Fprint(c, holdRequest)
		holds = append(holds, c)
		h.waitFor("held", 10*time.Second, func(s view.Snapshot) bool { return s.AtWorkers == i+1 })
		if h.snapshot().Workers[keeper].Active == 1 {
			break
		}
	}
	if len(holds) == 2 {
		// Both workers are full: release the other one's hold.
		holds[0].Write([]byte("x"))
		if resp, _, err := readResponse(bufio.NewReader(holds[0]), "POST"); err != nil || resp.StatusCode != 200 {
			t.Fatalf("the first hold: %v %v", resp, err)
		}
	}
	h.waitFor("the other worker free", 10*time.Second, func(s view.Snapshot) bool {
		return s.Workers[keeper].Active == 1 && s.Workers[1-keeper].Active == 0
	})
	getOK(t, cl)
	s, k := parkedKept(t, h, inode)
	if k != 1-keeper || s.Counters["affinity_moves"] != 1 {
		t.Errorf("kept by worker %d after the move (was %d), affinity_moves %d; want the other, 1", k, keeper, s.Counters["affinity_moves"])
	}
}
