package supervisor

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
	"google.golang.org/protobuf/encoding/protowire"
)

// bodyStart sends BodyStart for conn from p and returns the reply's ok.
func (h *loopHarness) bodyStart(p *fakeProc, id, conn uint64, length int64) bool {
	h.t.Helper()
	if err := p.Send(&proto.Frame{Id: id, Body: &proto.Frame_BodyStart{BodyStart: &proto.BodyStart{ConnId: conn, Length: length}}}, -1); err != nil {
		h.t.Fatal(err)
	}
	for {
		f := h.next(p)
		if r := f.GetBodyReply(); r != nil && f.GetId() == id {
			return r.GetOk()
		}
		if f.GetPing() == nil && f.GetPressure() == nil {
			h.t.Fatalf("got %T, want the BodyReply", f.Body)
		}
	}
}

// killedFor waits until p's channel ends: the loop killed it.
func (h *loopHarness) killed(p *fakeProc, what string) {
	h.t.Helper()
	select {
	case <-p.Exited():
	case <-time.After(frameWait):
		h.t.Fatalf("worker %d not killed for %s", p.slot, what)
	}
}

// TestBodyDoneIDZero: a request frame with id 0 (which a reply could not
// name) is a protocol violation. BodyDone with id 0 used to be taken for
// "no BodyDone pending": twice while the slot grant waited, it put the
// connection twice on the body lists and the expiry released the worker's
// in-flight slots until ipc panicked, taking every connection down; once,
// then Done, it left a stale entry whose expiry released the slot of a
// worker that was gone.
func TestBodyDoneIDZero(t *testing.T) {
	for _, then := range []string{"BodyDone again", "Done"} {
		t.Run(then, func(t *testing.T) {
			h := startLoop(t, baseConfig(1, 1, ""))
			p := h.workers[0]
			a := h.dial("127.0.0.2")
			h.send(a)
			da := h.dispatched(p)
			if !h.bodyStart(p, 1, da.GetConnId(), 10) {
				t.Fatal("BodyStart refused")
			}
			// Another connection takes the only pool slot: the grant
			// BodyDone asks for waits.
			b := h.dial("127.0.0.3")
			h.send(b)
			h.dispatched(p)
			bodyDone := &proto.Frame{Body: &proto.Frame_BodyDone{BodyDone: &proto.BodyDone{ConnId: da.GetConnId()}}}
			if err := p.Send(bodyDone, -1); err != nil {
				t.Fatal(err)
			}
			// The first kills the worker (its send may find the channel
			// closed already); before, the loop took the second too.
			if then == "Done" {
				p.Done(done(da.GetConnId(), 1, proto.Disposition_CLOSE))
			} else {
				p.Send(bodyDone, -1)
			}
			h.killed(p, "BodyDone with id 0")
			// The no-worker timeout passes: nothing is left to expire.
			h.advance(time.Minute)
			s := h.snapshot()
			if s.AtWorkers != 0 || s.BodyConns != 0 || s.BodyBytes != 0 || s.Counters["worker_kills"] != 1 {
				t.Fatalf("after the kill: %d at workers, %d bodies (%d bytes), %d kills; want 0, 0, 0, 1",
					s.AtWorkers, s.BodyConns, s.BodyBytes, s.Counters["worker_kills"])
			}
			h.checkInvariants()
		})
	}
}

// TestStreamThenBodyStart: BodyStart on a connection already charged to the
// stream budget is a protocol violation. It used to be granted: the pool
// slot the connection no longer held was released a second time (at
// workers, the client's and the worker's counts went to -1) and the stream
// was never released, so each such pair leaked one of streams.max.
func TestStreamThenBodyStart(t *testing.T) {
	h := startLoop(t, baseConfig(1, 2, ""))
	p := h.workers[0]
	a := h.dial("127.0.0.2")
	h.send(a)
	da := h.dispatched(p)
	if !h.streamStart(p, 1, da.GetConnId(), true) {
		t.Fatal("StreamStart refused")
	}
	if err := p.Send(&proto.Frame{Id: 2, Body: &proto.Frame_BodyStart{BodyStart: &proto.BodyStart{ConnId: da.GetConnId(), Length: 10}}}, -1); err != nil {
		t.Fatal(err)
	}
	h.killed(p, "BodyStart on a stream")
	s := h.waitFor("the kill settled", func(s view.Snapshot) bool { return s.Counters["worker_kills"] == 1 })
	if s.AtWorkers != 0 || s.Streams != 0 || s.Upgrades != 0 || s.BodyConns != 0 {
		t.Fatalf("after the kill: %d at workers, %d streams, %d upgrades, %d bodies; want all 0",
			s.AtWorkers, s.Streams, s.Upgrades, s.BodyConns)
	}
	h.checkInvariants()
}

// rateCheckNaming is a RateCheck for conn that also carries, as field 3
// (forwarded_for, which RateCheck once had), the key a worker would like
// charged.
func rateCheckNaming(id, conn uint64, class, key string) *proto.Frame {
	m := &proto.RateCheck{ConnId: conn, Class: class}
	var extra []byte
	extra = protowire.AppendTag(extra, 3, protowire.BytesType)
	extra = protowire.AppendString(extra, key)
	m.ProtoReflect().SetUnknown(extra)
	return &proto.Frame{Id: id, Body: &proto.Frame_RateCheck{RateCheck: m}}
}

// rateReply waits for the RateReply to id and returns whether it allowed.
func (h *loopHarness) rateReply(p *fakeProc, id uint64) bool {
	h.t.Helper()
	for {
		f := h.next(p)
		if r := f.GetRateReply(); r != nil && f.GetId() == id {
			return r.GetAllowed()
		}
		if f.GetPing() == nil && f.GetPressure() == nil {
			h.t.Fatalf("got %T, want the RateReply", f.Body)
		}
	}
}

// TestRateCheckForeignKey: behind a trusted proxy, a worker charges the
// rate limiter only with the key the supervisor derived from the head it
// saw for a connection the worker holds; an address the worker names is
// not charged (it used to be: a worker could charge or churn any key).
func TestRateCheckForeignKey(t *testing.T) {
	h := startLoop(t, baseConfig(1, 2, `
trusted_proxies = ["127.0.0.5"]
rate_limit "login" {
  prefix = "/login"
  rate   = 1
  per    = "60s"
  burst  = 1
}
`))
	p := h.workers[0]
	c := h.dial("127.0.0.5")
	if _, err := c.Write([]byte("GET /login HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 198.51.100.7\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	dc := h.dispatched(p)
	// Two checks naming two other clients: both charge 198.51.100.7, so
	// the second is over its burst of 1.
	for i, key := range []string{"203.0.113.1", "203.0.113.2"} {
		if err := p.Send(rateCheckNaming(uint64(i+1), dc.GetConnId(), "login", key), -1); err != nil {
			t.Fatal(err)
		}
		if got, want := h.rateReply(p, uint64(i+1)), i == 0; got != want {
			t.Fatalf("RateCheck %d naming %s: allowed %v, want %v", i+1, key, got, want)
		}
	}
	h.inLoop(func(d *dispatcher) {
		for _, k := range []string{"203.0.113.1", "203.0.113.2", "127.0.0.5"} {
			if slices.Contains(d.limiter.Clients(), netip.MustParseAddr(k)) {
				t.Errorf("the limiter holds %s, a key the supervisor never derived", k)
			}
		}
		if !slices.Contains(d.limiter.Clients(), netip.MustParseAddr("198.51.100.7")) {
			t.Errorf("the limiter does not hold 198.51.100.7, the client named in the head")
		}
	})
	h.checkInvariants()
}

func TestForwardedFor(t *testing.T) {
	for _, tc := range []struct {
		head string
		want []string
	}{
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", nil},
		{"GET / HTTP/1.1\r\nX-Forwarded-For: 1.2.3.4\r\n\r\n", []string{"1.2.3.4"}},
		{"GET / HTTP/1.1\r\nx-forwarded-for:1.2.3.4, 5.6.7.8 \r\nHost: x\r\nX-FORWARDED-FOR: 9.9.9.9\r\n\r\n", []string{"1.2.3.4, 5.6.7.8", "9.9.9.9"}},
		// A field of the body, or of the next request, is not the head's.
		{"POST / HTTP/1.1\r\nHost: x\r\n\r\nX-Forwarded-For: 1.2.3.4\r\n", nil},
		// The request line is no field, and a bare LF ends a line too.
		{"X-Forwarded-For: 1.1.1.1\nX-Forwarded-For: 2.2.2.2\n\n", []string{"2.2.2.2"}},
		// An incomplete head yields its complete lines.
		{"GET / HTTP/1.1\r\nX-Forwarded-For: 1.2.3.4\r\nX-Forwarded-For: 5.6", []string{"1.2.3.4"}},
		{"GET / HTTP/1.1\r\nX-Forwarded-Forx: 1.2.3.4\r\n\r\n", nil},
	} {
		if got := forwardedFor([]byte(tc.head)); !slices.Equal(got, tc.want) {
			t.Errorf("forwardedFor(%q) = %q, want %q", tc.head, got, tc.want)
		}
	}
}
