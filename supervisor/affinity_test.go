package supervisor

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// affinityConfig is baseConfig with plain affinity on.
func affinityConfig(workers, concurrency int, extra string) string {
	return strings.Replace(baseConfig(workers, concurrency, extra), "}\nroute", "  max_kept_connections = 256\n}\nroute", 1)
}

// keptDone returns c's connection to the supervisor, kept alive, the
// worker keeping its copy.
func keptDone(id uint64, requests uint32) *proto.Done {
	d := done(id, requests, proto.Disposition_KEEP_ALIVE)
	d.Kept = true
	return d
}

// redispatched is p's next frame, which must be a Dispatch of id without a
// descriptor (affinity).
func (h *loopHarness) redispatched(p *fakeProc, id uint64) *proto.Dispatch {
	h.t.Helper()
	f := h.next(p)
	d := f.GetDispatch()
	if d == nil || d.GetConnId() != id || d.GetHasFd() || f.FD >= 0 {
		h.t.Fatalf("worker %d: got %v (fd %d), want a Dispatch of %d without a descriptor", p.slot, f.Body, f.FD, id)
	}
	return d
}

// forgotten expects p's next frame to be Forget of id.
func (h *loopHarness) forgotten(p *fakeProc, id uint64) {
	h.t.Helper()
	f := h.next(p)
	if fg := f.GetForget(); fg == nil || fg.GetConnId() != id {
		h.t.Fatalf("worker %d: got %v, want Forget of %d", p.slot, f.Body, id)
	}
}

// keptBy waits until worker slot keeps n copies.
func (h *loopHarness) keptBy(slot, n int) {
	h.t.Helper()
	h.waitFor("kept copies", func(s view.Snapshot) bool { return s.Workers[slot].Kept == n })
}

// keeping waits for the next Dispatch with a descriptor at any of ps and
// keeps the descriptor, as a worker does for affinity: it reads the request
// through it and returns it open (closed at the test's end).
func (h *loopHarness) keeping(ps []*fakeProc) (*fakeProc, uint64, int) {
	h.t.Helper()
	for deadline := time.Now().Add(frameWait); time.Now().Before(deadline); {
		for _, p := range ps {
			f, err := p.Next(10 * time.Millisecond)
			if err != nil || f.GetPressure() != nil {
				continue
			}
			d := f.GetDispatch()
			if d == nil || f.FD < 0 {
				h.t.Fatalf("worker %d: got %T, want a Dispatch with a descriptor", p.slot, f.Body)
			}
			h.t.Cleanup(func() { syscall.Close(f.FD) })
			readInput(f.FD)
			return p, d.GetConnId(), f.FD
		}
	}
	h.t.Fatal("no Dispatch at any worker")
	return nil, 0, -1
}

// readInput reads what the non-blocking fd holds, leaving it open.
func readInput(fd int) {
	buf := make([]byte, 4096)
	for i := 0; i < 64; i++ {
		if n, err := syscall.Read(fd, buf); n <= 0 || err != nil {
			return
		}
	}
}

// A connection returned with Done kept goes back to the same worker without
// a descriptor, as often as it is kept; a Done that stops keeping it leaves
// the supervisor's copy alone, with no Forget, and the next dispatch carries
// the descriptor again.
func TestAffinityRedispatchWithoutDescriptor(t *testing.T) {
	h := startLoop(t, affinityConfig(2, 2, ""))
	c := h.dial("127.0.0.2")
	h.send(c)
	p, id, fd := h.keeping(h.workers)
	for i := uint32(1); i <= 3; i++ {
		if err := p.Done(keptDone(id, i)); err != nil {
			t.Fatal(err)
		}
		h.keptBy(p.slot, 1)
		h.send(c)
		if d := h.redispatched(p, id); d.GetRequests() != i {
			t.Fatalf("dispatched with %d requests, want %d", d.GetRequests(), i)
		}
		readInput(fd)
	}
	if err := p.Done(done(id, 4, proto.Disposition_KEEP_ALIVE)); err != nil {
		t.Fatal(err)
	}
	s := h.waitFor("parked, not kept", func(s view.Snapshot) bool { return s.Conns["idle"] == 1 && s.AtWorkers == 0 })
	if s.Workers[p.slot].Kept != 0 || s.Counters["affinity"] != 3 || s.Counters["affinity_moves"] != 0 {
		t.Errorf("kept %d, affinity %d, moves %d; want 0, 3, 0", s.Workers[p.slot].Kept, s.Counters["affinity"], s.Counters["affinity_moves"])
	}
	for _, q := range h.workers {
		h.noFrame(q)
	}
	h.send(c)
	if d := h.dispatched(p); d.GetConnId() != id {
		t.Fatalf("dispatched %d, want %d", d.GetConnId(), id)
	}
}

// A kept connection whose keeper has no free slot while another worker has
// one waits keeperWait for its keeper, then moves: the keeper is told to
// forget its copy and the other worker gets the supervisor's, with the
// descriptor.
func TestAffinityMovesFromBusyKeeper(t *testing.T) {
	h := startLoop(t, affinityConfig(2, 1, ""))
	a := h.dial("127.0.0.2")
	h.send(a)
	keeper, id, _ := h.keeping(h.workers)
	if err := keeper.Done(keptDone(id, 1)); err != nil {
		t.Fatal(err)
	}
	h.keptBy(keeper.slot, 1)
	other := h.workers[1-keeper.slot]
	// Fill the keeper: b goes to the first free worker; if that is the
	// other one, d fills the keeper.
	b := h.dial("127.0.0.3")
	h.send(b)
	at, bid, _ := h.keeping(h.workers)
	if at == other {
		d := h.dial("127.0.0.4")
		h.send(d)
		if got, _, _ := h.keeping(h.workers); got != keeper {
			t.Fatalf("the third connection went to worker %d", got.slot)
		}
	}
	h.send(a)
	// a waits for its keeper, whether or not the other worker is free.
	h.waitFor("a waiting", func(s view.Snapshot) bool { return s.Conns["waiting"] == 1 })
	h.pressure(other, true)
	h.pressure(keeper, true)
	if at == other {
		if err := other.Done(done(bid, 1, proto.Disposition_CLOSE)); err != nil {
			t.Fatal(err)
		}
		h.waitFor("the other worker free", func(s view.Snapshot) bool { return s.Workers[other.slot].Active == 0 })
	}
	h.noFrame(keeper)
	h.noFrame(other)
	// keeperWait later it moves.
	h.advance(keeperWait)
	h.forgotten(keeper, id)
	f := h.next(other)
	for f.GetPressure() != nil {
		f = h.next(other)
	}
	if d := f.GetDispatch(); d == nil || d.GetConnId() != id || !d.GetHasFd() || f.FD < 0 {
		t.Fatalf("the other worker got %v (fd %d), want a Dispatch of %d with its descriptor", f.Body, f.FD, id)
	}
	syscall.Close(f.FD)
	s := h.snapshot()
	if s.Counters["affinity_moves"] != 1 || s.Workers[keeper.slot].Kept != 0 {
		t.Errorf("affinity_moves %d, kept by the keeper %d; want 1, 0", s.Counters["affinity_moves"], s.Workers[keeper.slot].Kept)
	}
}

// The supervisor counts the copies a worker keeps: one Done kept more than
// workers.max_kept_connections is a violation (an honest worker keeps no
// more at its cap), and the connections it held are closed.
func TestAffinityCapEnforced(t *testing.T) {
	h := startLoop(t, strings.Replace(affinityConfig(1, 2, ""), "max_kept_connections = 256", "max_kept_connections = 1", 1))
	p := h.workers[0]
	a, b := h.dial("127.0.0.2"), h.dial("127.0.0.3")
	h.send(a)
	_, ida, _ := h.keeping(h.workers)
	h.send(b)
	_, idb, _ := h.keeping(h.workers)
	if err := p.Done(keptDone(ida, 1)); err != nil {
		t.Fatal(err)
	}
	h.keptBy(0, 1)
	if err := p.Done(keptDone(idb, 1)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
	case <-time.After(frameWait):
		t.Fatal("worker not killed")
	}
	s := h.waitFor("kill counted", func(s view.Snapshot) bool { return s.Counters["worker_kills"] == 1 })
	if _, closed := closedByPeer(b); !closed {
		t.Error("the connection the killed worker held is still open")
	}
	// a was parked, kept by the dead worker: the supervisor's copy serves on.
	if s.Conns["idle"] != 1 {
		t.Errorf("connections %v, want a idle", s.Conns)
	}
}

// Every way the supervisor ends a parked kept connection sends Forget to its
// keeper: the client closing it, the idle timeout, the penalty box.
func TestAffinityForgetOnClose(t *testing.T) {
	for _, how := range []string{"client close", "idle timeout"} {
		t.Run(how, func(t *testing.T) {
			h := startLoop(t, affinityConfig(1, 2, "limits {\n  keep_alive_idle_timeout = \"1s\"\n}\n"))
			p := h.workers[0]
			c := h.dial("127.0.0.2")
			h.send(c)
			_, id, _ := h.keeping(h.workers)
			if err := p.Done(keptDone(id, 1)); err != nil {
				t.Fatal(err)
			}
			h.keptBy(0, 1)
			switch how {
			case "client close":
				c.Close()
			case "idle timeout":
				h.advance(2 * time.Second)
			}
			h.forgotten(p, id)
			s := h.waitFor("closed", func(s view.Snapshot) bool { return len(s.Conns) == 0 })
			if s.Workers[0].Kept != 0 {
				t.Errorf("kept %d after the close, want 0", s.Workers[0].Kept)
			}
		})
	}
}

// A kept connection waiting for its busy keeper goes to it as soon as it
// frees a slot, before an older connection kept elsewhere and although
// another worker is free: no Forget, no descriptor.
func TestAffinityKeeperFirst(t *testing.T) {
	h := startLoop(t, affinityConfig(2, 1, ""))
	w0, w1 := h.workers[0], h.workers[1]
	// a kept by w0, b kept by w1.
	a, b := h.dial("127.0.0.2"), h.dial("127.0.0.3")
	h.send(a)
	pa, ida, fda := h.keeping(h.workers)
	h.send(b)
	pb, idb, fdb := h.keeping(h.workers)
	if pa == pb {
		t.Fatal("a and b went to the same worker")
	}
	if pa != w0 {
		a, b, ida, idb, fda, fdb = b, a, idb, ida, fdb, fda
	}
	// w0 busy with c; w1 busy with d.
	c, d := h.dial("127.0.0.4"), h.dial("127.0.0.5")
	if err := w0.Done(keptDone(ida, 1)); err != nil {
		t.Fatal(err)
	}
	if err := w1.Done(keptDone(idb, 1)); err != nil {
		t.Fatal(err)
	}
	h.keptBy(0, 1)
	h.keptBy(1, 1)
	h.send(c)
	_, idc, _ := h.keeping(h.workers)
	h.send(d)
	pd, idd, _ := h.keeping(h.workers)
	// b (kept by w1) then a (kept by w0) wait: the pool is full.
	h.send(b)
	h.waitFor("b waiting", func(s view.Snapshot) bool { return s.Conns["waiting"] == 1 })
	h.send(a)
	h.waitFor("a waiting", func(s view.Snapshot) bool { return s.Conns["waiting"] == 2 })
	h.pressure(w0, true)
	h.pressure(w1, true)
	// w0 frees its slot: a, its own, goes there without a descriptor
	// although b waited longer.
	freed, idFreed := w0, idc
	if pd == w0 {
		idFreed = idd
	}
	if err := freed.Done(done(idFreed, 1, proto.Disposition_CLOSE)); err != nil {
		t.Fatal(err)
	}
	f := h.next(w0)
	if dd := f.GetDispatch(); dd == nil || dd.GetConnId() != ida || dd.GetHasFd() {
		t.Fatalf("w0 got %v, want a Dispatch of a without a descriptor", f.Body)
	}
	readInput(fda)
	s := h.snapshot()
	if s.Counters["affinity_moves"] != 0 || s.Conns["waiting"] != 1 {
		t.Errorf("affinity_moves %d, waiting %d; want 0 and b still waiting", s.Counters["affinity_moves"], s.Conns["waiting"])
	}
}

// A parked kept connection of a client put in the penalty box is closed when
// it becomes readable, and its keeper is told to forget its copy.
func TestAffinityForgetOnPenalty(t *testing.T) {
	h := startLoop(t, affinityConfig(2, 1, "limits {\n  death_penalty_threshold = 1\n}\n"))
	a := h.dial("127.0.0.2")
	h.send(a)
	keeper, id, _ := h.keeping(h.workers)
	if err := keeper.Done(keptDone(id, 1)); err != nil {
		t.Fatal(err)
	}
	h.keptBy(keeper.slot, 1)
	// The same client's other connection is at the other worker when it
	// dies: one death is the threshold. Ties go to the first worker: if
	// that is the keeper, another client's connection fills it first.
	if keeper == h.workers[0] {
		y := h.dial("127.0.0.5")
		h.send(y)
		if p, _, _ := h.keeping(h.workers); p != keeper {
			t.Fatal("the filler went to the other worker")
		}
	}
	x := h.dial("127.0.0.2")
	h.send(x)
	other, _, _ := h.keeping(h.workers)
	if other == keeper {
		t.Fatal("the second connection went to the busy keeper")
	}
	other.Close()
	h.waitFor("the client penalized", func(s view.Snapshot) bool { return s.Client("127.0.0.2").Penalty > 0 })
	h.send(a)
	h.forgotten(keeper, id)
	s := h.waitFor("refused", func(s view.Snapshot) bool { return s.Counters["refused_penalty"] == 1 })
	if s.Workers[keeper.slot].Kept != 0 {
		t.Errorf("kept %d after the refusal, want 0", s.Workers[keeper.slot].Kept)
	}
	if _, closed := closedByPeer(a); !closed {
		t.Error("the penalized client's kept connection is still open")
	}
}
