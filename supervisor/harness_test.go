package supervisor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/ipc/ipctest"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/internal/poll"
	"github.com/gatehouse-dev/gatehouse/supervisor/secrets"
	"github.com/gatehouse-dev/gatehouse/supervisor/spawn"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
	"github.com/hashicorp/go-hclog"
)

// The loop harness runs the real dispatcher loop, with real listeners and
// client sockets on loopback, over fake workers (ipctest) and a fake clock:
// spawning and time are the two parts injected.

// frameWait bounds every wait for a frame the loop must send; generous, as
// only a broken loop reaches it.
const frameWait = 10 * time.Second

// fakeClock is the loop's clock; the test moves it.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// fakeProc is a fake worker standing in for one process of a slot.
type fakeProc struct {
	*ipctest.Worker
	slot   int
	gen    uint64
	killed atomic.Bool
}

func (p *fakeProc) Kill() error {
	p.killed.Store(true)
	return p.Close()
}

type loopHarness struct {
	t       *testing.T
	s       *Supervisor
	clock   *fakeClock
	spawned chan *fakeProc
	workers []*fakeProc // the first process of each slot, by slot
	addr    netip.AddrPort
	cfgPath string
	done    chan error
}

// baseConfig is a configuration for the harness; extra is added to it.
func baseConfig(workers, concurrency int, extra string) string {
	return fmt.Sprintf(`
listener "http" {
  address = "127.0.0.1:0"
}
workers {
  count       = %d
  concurrency = %d
}
route "/" {
  respond {
    status = 200
  }
}
log {
  access_log = false
}
%s`, workers, concurrency, extra)
}

// startLoop runs a supervisor loop on src (written to a file, so Reload can
// read it again) and waits until its workers are ready.
func startLoop(t *testing.T, src string) *loopHarness {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "gatehouse.hcl")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "gatehouse", Level: hclog.Warn, Output: testWriter{t}})
	h := &loopHarness{
		t:       t,
		clock:   &fakeClock{t: time.Unix(1_000_000, 0)},
		spawned: make(chan *fakeProc, 64),
		cfgPath: path,
		done:    make(chan error, 1),
	}
	s := newSupervisor(cfg, Options{Logger: log, ConfigPath: path})
	s.now = h.clock.Now
	s.spawn = h.spawn
	if s.boot.listeners, err = openListeners(cfg, nil); err != nil {
		t.Fatal(err)
	}
	s.publishListeners(s.boot.listeners)
	s.boot.spec = &workerSpec{cfg: cfg}
	if s.boot.keys, err = secrets.Load(cfg); err != nil {
		s.closeListeners()
		t.Fatal(err)
	}
	s.keys = s.boot.keys
	if s.poller, err = poll.New(); err != nil {
		s.closeListeners()
		t.Fatal(err)
	}
	h.s = s
	h.addr = s.Addrs()[0]
	ctx, cancel := context.WithCancel(context.Background())
	go func() { h.done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-h.done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(frameWait):
			t.Errorf("the loop did not stop")
		}
	})
	for i := 0; i < cfg.Workers.Count; i++ {
		h.workers = append(h.workers, h.ready())
	}
	slices.SortFunc(h.workers, func(a, b *fakeProc) int { return a.slot - b.slot })
	select {
	case <-s.Ready():
	case <-time.After(frameWait):
		t.Fatal("Ready not closed with every worker ready")
	}
	return h
}

// testWriter sends the loop's log lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", p)
	return len(p), nil
}

// spawn is the injected spawner: a fake worker per process. Its exit is
// reported once its end closes (Drain, Kill, or the loop closing the channel).
func (h *loopHarness) spawn(slot int, gen uint64, spec *workerSpec) {
	ch, fw, err := ipctest.New()
	if err != nil {
		h.s.post(spawn.Started{Slot: slot, Gen: gen, Err: err})
		return
	}
	p := &fakeProc{Worker: fw, slot: slot, gen: gen}
	h.s.post(spawn.Started{Slot: slot, Gen: gen, Ch: ch, Proc: p, PID: 100000 + slot})
	h.spawned <- p
	go func() {
		<-fw.Exited()
		res := spawn.Exited{Slot: slot, Gen: gen, Status: "exited with status 0"}
		if p.killed.Load() {
			res.Signal, res.Status = syscall.SIGKILL, "killed by signal 9 (killed)"
		}
		h.s.post(res)
	}()
}

// ready takes the next spawned fake, expects its Hello and reports Ready.
func (h *loopHarness) ready() *fakeProc {
	h.t.Helper()
	var p *fakeProc
	select {
	case p = <-h.spawned:
	case <-time.After(frameWait):
		h.t.Fatal("no worker spawned")
	}
	if f := h.next(p); f.GetHello() == nil {
		h.t.Fatalf("worker %d: first frame %T, want Hello", p.slot, f.Body)
	}
	if err := p.Ready(); err != nil {
		h.t.Fatal(err)
	}
	return p
}

// next is p's next frame; the test fails if none comes.
func (h *loopHarness) next(p *fakeProc) ipctest.Frame {
	h.t.Helper()
	f, err := p.Next(frameWait)
	if err != nil {
		h.t.Fatalf("worker %d: %v", p.slot, err)
	}
	return f
}

// dispatched is p's next frame, which must be a Dispatch with a descriptor.
// The fake consumes the input already there (the request that made the
// connection readable) and closes its copy of the descriptor.
func (h *loopHarness) dispatched(p *fakeProc) *proto.Dispatch {
	h.t.Helper()
	f := h.next(p)
	d := f.GetDispatch()
	if d == nil || f.FD < 0 {
		h.t.Fatalf("worker %d: got %T (fd %d), want a Dispatch with a descriptor", p.slot, f.Body, f.FD)
	}
	consume(f.FD)
	return d
}

// noFrame fails if p gets a frame (other than Ping) within a short wait:
// evidence of a bound holding, where a broken bound sends at once.
func (h *loopHarness) noFrame(p *fakeProc) {
	h.t.Helper()
	if f, err := p.Next(50 * time.Millisecond); err == nil {
		h.t.Fatalf("worker %d: unexpected %T", p.slot, f.Body)
	} else if !errors.Is(err, ipctest.ErrTimeout) {
		h.t.Fatalf("worker %d: %v", p.slot, err)
	}
}

// snapshot is a copy of the loop's state, taken after its invariants are
// checked (invariants_test.go): every test that looks at the loop's state
// checks them too.
func (h *loopHarness) snapshot() view.Snapshot {
	h.t.Helper()
	h.checkInvariants()
	ctx, cancel := context.WithTimeout(context.Background(), frameWait)
	defer cancel()
	snap, err := h.s.Snapshot(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return snap
}

// advance moves the clock and lets the loop run its timers. The loop handles
// in one iteration only the messages queued when it begins draining, so
// three snapshot round trips suffice: the second is answered in an
// iteration that read the moved clock, and the third after that iteration
// ran its timers.
func (h *loopHarness) advance(d time.Duration) {
	h.clock.add(d)
	h.snapshot()
	h.snapshot()
	h.snapshot()
}

// waitFor polls the loop's state until cond holds, at most frameWait.
func (h *loopHarness) waitFor(what string, cond func(view.Snapshot) bool) view.Snapshot {
	h.t.Helper()
	for deadline := time.Now().Add(frameWait); ; {
		s := h.snapshot()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: not reached; counters %v", what, s.Counters)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// dial connects from the loopback address from (127.0.0.2, 127.0.0.3, ...:
// distinct clients) to the harness's listener.
func (h *loopHarness) dial(from string) *net.TCPConn {
	h.t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: frameWait}
	c, err := d.Dial("tcp", h.addr.String())
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// send writes a request head, which makes the connection readable.
func (h *loopHarness) send(c *net.TCPConn) {
	h.t.Helper()
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		h.t.Fatal(err)
	}
}

// closedByPeer reports whether the supervisor closed c: a read sees EOF or
// a reset (after reading what was written before), within frameWait.
func closedByPeer(c *net.TCPConn) (string, bool) {
	c.SetReadDeadline(time.Now().Add(frameWait))
	var got []byte
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return string(got), false
			}
			return string(got), true
		}
	}
}

// consume reads what fd holds (it is non-blocking) and closes it.
func consume(fd int) {
	buf := make([]byte, 4096)
	for i := 0; i < 64; i++ {
		if n, err := syscall.Read(fd, buf); n <= 0 || err != nil {
			break
		}
	}
	syscall.Close(fd)
}

func done(connID uint64, requests uint32, disp proto.Disposition) *proto.Done {
	return &proto.Done{ConnId: connID, Requests: requests, Disposition: disp, Outcome: proto.Outcome_OK}
}
