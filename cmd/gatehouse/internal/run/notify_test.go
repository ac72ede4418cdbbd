package run

import (
	"context"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/view"
	"github.com/hashicorp/go-hclog"
)

// fakeSup answers Snapshot until stuck is set, then blocks like a stuck
// dispatcher loop.
type fakeSup struct {
	ready chan struct{}
	stuck atomic.Bool
}

func (f *fakeSup) Ready() <-chan struct{} { return f.ready }

func (f *fakeSup) Snapshot(ctx context.Context) (view.Snapshot, error) {
	if f.stuck.Load() {
		<-ctx.Done()
		return view.Snapshot{}, ctx.Err()
	}
	return view.Snapshot{
		Listeners: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:8080")},
		Workers:   []view.WorkerInfo{{State: "ready"}, {State: "ready"}},
		Conns:     map[string]int{"idle": 3},
	}, nil
}

// The watchdog is pinged only while the dispatcher answers: a stuck loop
// stops the pings, and they resume when it answers again.
func TestWatchdogFollowsDispatcher(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msgs := make(chan string, 256)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	t.Setenv("NOTIFY_SOCKET", path)
	t.Setenv("WATCHDOG_USEC", "200000")
	n := newNotifier(hclog.NewNullLogger())
	if n.watchdog != 200*time.Millisecond {
		t.Fatalf("watchdog %v", n.watchdog)
	}
	sup := &fakeSup{ready: make(chan struct{})}
	done := make(chan struct{})
	defer close(done)
	var started atomic.Bool
	go n.watch(done, sup, &started)

	count := func(d time.Duration) (pings int, ready []string) {
		end := time.After(d)
		for {
			select {
			case m := <-msgs:
				if m == "WATCHDOG=1" {
					pings++
				}
				if strings.HasPrefix(m, "READY=1") {
					ready = append(ready, m)
				}
			case <-end:
				return
			}
		}
	}
	if p, r := count(500 * time.Millisecond); p < 3 || len(r) != 0 {
		t.Fatalf("before ready: %d pings, READY %q; want pings and no READY", p, r)
	}
	close(sup.ready)
	if _, r := count(300 * time.Millisecond); len(r) != 1 || r[0] != "READY=1\nSTATUS=serving on 127.0.0.1:8080, 2 workers, 3 connections (0 at workers)" {
		t.Fatalf("READY messages %q", r)
	}
	if !started.Load() {
		t.Error("started not set after READY=1")
	}
	sup.stuck.Store(true)
	count(150 * time.Millisecond) // a ping may be on its way
	if p, _ := count(600 * time.Millisecond); p != 0 {
		t.Errorf("%d pings while the dispatcher is stuck", p)
	}
	sup.stuck.Store(false)
	if p, _ := count(600 * time.Millisecond); p < 2 {
		t.Errorf("%d pings after the dispatcher answers again", p)
	}
}

func TestNotifierWithoutSocket(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	t.Setenv("WATCHDOG_USEC", "200000")
	n := newNotifier(hclog.NewNullLogger())
	if n.on || n.watchdog != 0 {
		t.Fatalf("notifier without NOTIFY_SOCKET: %+v", n)
	}
	n.ready("x") // no-ops
	n.stopping("x")
}

func TestStatusLine(t *testing.T) {
	s := view.Snapshot{
		Listeners: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:8080"), netip.MustParseAddrPort("[::1]:8080")},
		Workers:   []view.WorkerInfo{{State: "ready"}, {State: "dead"}, {State: "ready"}},
		Conns:     map[string]int{"idle": 3, "at_worker": 2},
		AtWorkers: 2,
	}
	want := "serving on 127.0.0.1:8080 [::1]:8080, 2/3 workers ready, 5 connections (2 at workers)"
	if got := statusLine(s); got != want {
		t.Errorf("statusLine = %q, want %q", got, want)
	}
}
