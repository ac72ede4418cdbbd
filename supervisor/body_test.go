package supervisor

import (
	"testing"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// bodyFrame sends f, a BodyStart, BodyProgress or BodyDone, from p and
// returns its reply's ok.
func (h *loopHarness) bodyFrame(p *fakeProc, f *proto.Frame) bool {
	h.t.Helper()
	if err := p.Send(f, -1); err != nil {
		h.t.Fatal(err)
	}
	for {
		g := h.next(p)
		if r := g.GetBodyReply(); r != nil && g.GetId() == f.GetId() {
			return r.GetOk()
		}
		if g.GetPing() == nil && g.GetPressure() == nil {
			h.t.Fatalf("got %T, want the BodyReply to %d", g.Body, f.GetId())
		}
	}
}

func bodyProgress(id, conn uint64, received int64) *proto.Frame {
	return &proto.Frame{Id: id, Body: &proto.Frame_BodyProgress{BodyProgress: &proto.BodyProgress{ConnId: conn, Received: received}}}
}

func bodyStartFrame(id, conn uint64, length int64) *proto.Frame {
	return &proto.Frame{Id: id, Body: &proto.Frame_BodyStart{BodyStart: &proto.BodyStart{ConnId: conn, Length: length}}}
}

// bodyBudgetConfig: one worker of four slots, a body budget of 1 MiB (the
// least it may be), and for each client as much.
func bodyBudgetConfig() string {
	return baseConfig(1, 4, `
limits {
  body_buffer_bytes            = 1048576
  body_buffer_bytes_per_client = 1048576
}
`)
}

// TestBodyBudgetCountsArrivals: the body budget is charged with the bytes a
// body received (BodyProgress), never with the length its head declared
// (issue 27): two bodies declaring the whole budget each both start; the
// one whose bytes would overfill it is refused, the one already charged
// keeps its charge and grows to its end, and a small body that arrives
// whole between two reports goes through. Every count is checked after
// every step.
func TestBodyBudgetCountsArrivals(t *testing.T) {
	const mib = 1 << 20
	h := startLoop(t, bodyBudgetConfig())
	p := h.workers[0]
	var conns []uint64
	for _, ip := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		c := h.dial(ip)
		h.send(c)
		conns = append(conns, h.dispatched(p).GetConnId())
	}
	a, b, small := conns[0], conns[1], conns[2]
	budget := func(what string, conns, bytes, aBytes int) {
		t.Helper()
		s := h.snapshot()
		if s.BodyConns != conns || s.BodyBytes != int64(bytes) || s.Client("127.0.0.2").BodyBytes != int64(aBytes) {
			t.Fatalf("%s: the body budget holds %d connections, %d bytes (127.0.0.2: %d); want %d, %d (%d)",
				what, s.BodyConns, s.BodyBytes, s.Client("127.0.0.2").BodyBytes, conns, bytes, aBytes)
		}
		h.checkInvariants()
	}

	if !h.bodyFrame(p, bodyStartFrame(1, a, mib)) || !h.bodyFrame(p, bodyStartFrame(2, b, mib)) {
		t.Fatal("a BodyStart declaring the whole budget was refused: the declared length was charged")
	}
	budget("two bodies declared, nothing received", 2, 0, 0)
	if !h.bodyFrame(p, bodyProgress(3, a, 600<<10)) {
		t.Fatal("600 KiB received of an empty budget refused")
	}
	budget("600 KiB received", 2, 600<<10, 600<<10)
	if h.bodyFrame(p, bodyProgress(4, b, 600<<10)) {
		t.Fatal("600 KiB more granted, over the budget")
	}
	budget("the second body refused", 2, 600<<10, 600<<10)

	// A small body that arrived whole needs no report.
	if !h.bodyFrame(p, bodyStartFrame(5, small, 10_000)) {
		t.Fatal("a small body refused while the budget has room for its connection")
	}
	finished := &proto.Frame{Id: 6, Body: &proto.Frame_BodyDone{BodyDone: &proto.BodyDone{ConnId: small}}}
	if !h.bodyFrame(p, finished) {
		t.Fatal("the small complete body got no pool slot")
	}
	budget("the small body in the pool", 2, 600<<10, 600<<10)

	if !h.bodyFrame(p, bodyProgress(7, a, mib)) {
		t.Fatal("the first body refused the rest of its bytes, which fit")
	}
	budget("the first body received whole", 2, mib, mib)
	// The refused one's worker answers 503 and returns it.
	if err := p.Done(done(b, 1, proto.Disposition_CLOSE)); err != nil {
		t.Fatal(err)
	}
	budget("the refused body returned", 1, mib, mib)
	finished = &proto.Frame{Id: 8, Body: &proto.Frame_BodyDone{BodyDone: &proto.BodyDone{ConnId: a}}}
	if !h.bodyFrame(p, finished) {
		t.Fatal("the complete body got no pool slot")
	}
	budget("every body complete", 0, 0, 0)
	if s := h.snapshot(); s.Counters["body_budget_refused"] != 1 || s.Counters["bodies_buffered"] != 3 {
		t.Errorf("counters: body_budget_refused %d, bodies_buffered %d; want 1, 3",
			s.Counters["body_budget_refused"], s.Counters["bodies_buffered"])
	}
}

// TestBodyProgressBounds: a BodyProgress is a protocol violation unless it
// names a body the worker holds (BodyStart granted, no BodyDone yet) and a
// count more than its charge and at most its declared length; a BodyStart
// declares at most max_body_bytes. The worker is killed, and the budget
// holds nothing after.
func TestBodyProgressBounds(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name  string
		start int64 // BodyStart's length, 0 for none
		frame func(conn uint64) *proto.Frame
	}{
		{"more than declared", 1000, func(c uint64) *proto.Frame { return bodyProgress(9, c, 1001) }},
		{"no more than charged", 1000, func(c uint64) *proto.Frame { return bodyProgress(9, c, 500) }},
		{"negative", 1000, func(c uint64) *proto.Frame { return bodyProgress(9, c, -1) }},
		{"in the pool", 0, func(c uint64) *proto.Frame { return bodyProgress(9, c, 10) }},
		{"a connection it does not hold", 1000, func(c uint64) *proto.Frame { return bodyProgress(9, c+1000, 10) }},
		{"id 0", 1000, func(c uint64) *proto.Frame { return bodyProgress(0, c, 600) }},
		{"BodyStart over max_body_bytes", 0, func(c uint64) *proto.Frame { return bodyStartFrame(9, c, mib+1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startLoop(t, bodyBudgetConfig())
			p := h.workers[0]
			h.send(h.dial("127.0.0.2"))
			conn := h.dispatched(p).GetConnId()
			if tc.start > 0 {
				if !h.bodyFrame(p, bodyStartFrame(1, conn, tc.start)) || !h.bodyFrame(p, bodyProgress(2, conn, 500)) {
					t.Fatal("a body's start or its first 500 bytes refused")
				}
			}
			if err := p.Send(tc.frame(conn), -1); err != nil {
				t.Fatal(err)
			}
			h.killed(p, tc.name)
			s := h.waitFor("the kill settled", func(s view.Snapshot) bool { return s.Counters["worker_kills"] == 1 })
			if s.BodyConns != 0 || s.BodyBytes != 0 || s.AtWorkers != 0 {
				t.Fatalf("after the kill: %d bodies, %d bytes, %d at workers; want 0", s.BodyConns, s.BodyBytes, s.AtWorkers)
			}
			h.checkInvariants()
		})
	}
}
