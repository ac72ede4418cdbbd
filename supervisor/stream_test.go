package supervisor

import (
	"fmt"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// streamStart sends StreamStart for conn from p and returns the reply's ok.
func (h *loopHarness) streamStart(p *fakeProc, id, conn uint64, upgrade bool) bool {
	h.t.Helper()
	if err := p.Send(&proto.Frame{Id: id, Body: &proto.Frame_StreamStart{StreamStart: &proto.StreamStart{ConnId: conn, Upgrade: upgrade}}}, -1); err != nil {
		h.t.Fatal(err)
	}
	for {
		f := h.next(p)
		if r := f.GetStreamReply(); r != nil && f.GetId() == id {
			return r.GetOk()
		}
		if f.GetPing() == nil && f.GetPressure() == nil {
			h.t.Fatalf("got %T, want the StreamReply", f.Body)
		}
	}
}

// TestStreamBudget: StreamStart releases the pool slot and the share and
// charges the stream budget; the per-client and global caps refuse; Done
// and a worker's death release the budget; StreamStart twice kills.
func TestStreamBudget(t *testing.T) {
	h := startLoop(t, baseConfig(1, 2, "streams {\n  max = 2\n  per_client = 1\n}\n"))
	p := h.workers[0]
	a := h.dial("127.0.0.2")
	h.send(a)
	da := h.dispatched(p)
	if !h.streamStart(p, 1, da.GetConnId(), false) {
		t.Fatal("first stream refused")
	}
	s := h.snapshot()
	if s.Streams != 1 || s.AtWorkers != 0 {
		t.Fatalf("after StreamStart: %d streams, %d at workers; want 1 and 0", s.Streams, s.AtWorkers)
	}
	// The share (1 slot) is free again: the same client's second
	// connection is dispatched, but its stream is over the client's cap.
	a2 := h.dial("127.0.0.2")
	h.send(a2)
	da2 := h.dispatched(p)
	if h.streamStart(p, 2, da2.GetConnId(), false) {
		t.Fatal("a second stream over per_client = 1 was granted")
	}
	if err := p.Done(done(da2.GetConnId(), 1, proto.Disposition_CLOSE)); err != nil {
		t.Fatal(err)
	}
	b := h.dial("127.0.0.3")
	h.send(b)
	db := h.dispatched(p)
	if !h.streamStart(p, 3, db.GetConnId(), true) {
		t.Fatal("an upgrade within the budget refused")
	}
	c := h.dial("127.0.0.4")
	h.send(c)
	dc := h.dispatched(p)
	if h.streamStart(p, 4, dc.GetConnId(), false) {
		t.Fatal("a stream over max = 2 was granted")
	}
	s = h.snapshot()
	if s.Streams != 1 || s.Upgrades != 1 || s.Counters["streams_refused"] != 2 || s.Counters["upgrades_started"] != 1 {
		t.Fatalf("streams %d, upgrades %d, counters %v", s.Streams, s.Upgrades, s.Counters)
	}
	// Done gives the budget back and parks the connection.
	d := done(da.GetConnId(), 1, proto.Disposition_KEEP_ALIVE)
	d.Handback = proto.Handback_STREAM
	if err := p.Done(d); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the stream released", func(s view.Snapshot) bool {
		return s.Streams == 0 && s.Conns["idle"] == 1 && s.Counters["handback_stream"] == 1
	})
	// StreamStart twice is a protocol violation; the kill releases the
	// upgrade's budget with its connection.
	if err := p.Send(&proto.Frame{Id: 5, Body: &proto.Frame_StreamStart{StreamStart: &proto.StreamStart{ConnId: db.GetConnId(), Upgrade: true}}}, -1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
	case <-time.After(frameWait):
		t.Fatal("worker not killed for StreamStart twice")
	}
	h.waitFor("the upgrade released by the kill", func(s view.Snapshot) bool {
		return s.Upgrades == 0 && s.Streams == 0 && s.Counters["worker_kills"] == 1
	})
}

// What a drain logs counts every connection at a worker, streams outside the
// pool too: an SSE stream open is not "at_workers=0".
func TestDrainCountsStreams(t *testing.T) {
	h := startLoop(t, baseConfig(1, 2, ""))
	p := h.workers[0]
	a := h.dial("127.0.0.2")
	h.send(a)
	da := h.dispatched(p)
	if !h.streamStart(p, 1, da.GetConnId(), false) {
		t.Fatal("stream refused")
	}
	b := h.dial("127.0.0.3")
	h.send(b)
	h.dispatched(p)
	var got []any
	h.inLoop(func(d *dispatcher) { got = d.inFlight() })
	want := []any{"at_workers", 2, "in_pool", 1, "bodies", 0, "streams", 1, "upgrades", 0}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("drain fields %v, want %v", got, want)
	}
}

// A connection at a worker in its first request (here an SSE stream) is
// counted apart from those before a first request, for gatehousectl conns.
// It has sent its request, so it holds no place of max_queued_connections
// (Queued): many long first requests must not make newcomers evict each
// other. Its Done ends its first request.
func TestConnsInFirstRequest(t *testing.T) {
	h := startLoop(t, baseConfig(1, 2, ""))
	p := h.workers[0]
	h.dial("127.0.0.4") // parked before its first byte
	a := h.dial("127.0.0.2")
	h.send(a)
	da := h.dispatched(p)
	if !h.streamStart(p, 1, da.GetConnId(), false) {
		t.Fatal("stream refused")
	}
	s := h.waitFor("a fresh connection and one in its first request", func(s view.Snapshot) bool {
		return s.Conns["fresh"] == 1 && s.InFirstRequest == 1
	})
	v := view.Admin{Snap: s}
	c := v.Conns()
	if s.Queued != 1 || c.InFirstRequest != 1 || c.Queued != 1 || v.Status().InFirstRequest != 1 {
		t.Fatalf("in a first request: snapshot %d, conns %+v", s.InFirstRequest, c)
	}
	d := done(da.GetConnId(), 1, proto.Disposition_KEEP_ALIVE)
	d.Handback = proto.Handback_STREAM
	if err := p.Done(d); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the stream's first request done", func(s view.Snapshot) bool { return s.Queued == 1 && s.InFirstRequest == 0 && s.Conns["idle"] == 1 })
}
