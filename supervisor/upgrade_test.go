package supervisor

import (
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/handover"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// TestHandOverAdopt: the old loop hands its idle, head and fresh
// connections to the new one in their states, the idle one with the time
// it had left; a request in flight finishes at the old worker and its
// connection, with the input it carried, goes to the new loop; the old
// loop then stops, and no connection was closed on the way.
func TestHandOverAdopt(t *testing.T) {
	cfg := baseConfig(1, 8, "limits {\n keep_alive_idle_timeout = \"10s\"\n shutdown_grace = \"0s\"\n}")
	old, next := startLoop(t, cfg), startLoop(t, cfg)

	idle := old.dial("127.0.0.2")
	old.send(idle)
	d := old.dispatched(old.workers[0])
	if err := old.workers[0].Done(done(d.GetConnId(), 1, proto.Disposition_KEEP_ALIVE)); err != nil {
		t.Fatal(err)
	}
	old.waitFor("parked", func(s view.Snapshot) bool { return s.Conns["idle"] == 1 })
	old.advance(4 * time.Second) // 6 s of its idle timeout left
	head := old.dial("127.0.0.3")
	if _, err := head.Write([]byte("GET /partial HTTP/1.1\r\nHo")); err != nil {
		t.Fatal(err)
	}
	fresh := old.dial("127.0.0.4")
	busy := old.dial("127.0.0.5")
	old.send(busy)
	inFlight := old.dispatched(old.workers[0])
	old.waitFor("head and fresh", func(s view.Snapshot) bool { return s.Conns["head"] == 1 && s.Conns["fresh"] == 1 })

	parent, child, err := handover.Pair()
	if err != nil {
		t.Fatal(err)
	}
	go handover.Receive(child).Run(next.s.Adopt)
	old.s.HandOver(handover.Attach(parent, 1, "next", nil))
	old.waitFor("three handed over", func(s view.Snapshot) bool { return s.Upgrade.Sent == 3 && s.Upgrade.HandingOver })
	s := next.waitFor("three adopted", func(s view.Snapshot) bool { return s.Upgrade.Received == 3 })
	if s.Conns["idle"] != 1 || s.Conns["head"] != 1 || s.Conns["fresh"] != 1 || s.HeadBytes == 0 {
		t.Fatalf("adopted as %v, head bytes %d", s.Conns, s.HeadBytes)
	}

	// The request in flight finishes at the old worker; its connection and
	// the request it carried go to the new loop, which dispatches it.
	const pipelined = "GET /next HTTP/1.1\r\nHost: y\r\n\r\n"
	m := done(inFlight.GetConnId(), 1, proto.Disposition_KEEP_ALIVE)
	m.Carried = []byte(pipelined)
	if err := old.workers[0].Done(m); err != nil {
		t.Fatal(err)
	}
	if got := next.dispatched(next.workers[0]); string(got.GetCarried()) != pipelined || got.GetRequests() != 1 {
		t.Errorf("the carried request arrived as %q, requests %d", got.GetCarried(), got.GetRequests())
	}
	// The head completes at the new loop, with what the old one read.
	if _, err := head.Write([]byte("st: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if got := next.dispatched(next.workers[0]); !strings.HasPrefix(string(got.GetCarried()), "GET /partial HTTP/1.1\r\nHo") {
		t.Errorf("the head arrived as %q", got.GetCarried())
	}
	// The old loop holds nothing now and stops.
	select {
	case err := <-old.done:
		old.done <- err
	case <-time.After(frameWait):
		t.Fatal("the old loop did not stop after the hand-over")
	}

	// The fresh connection was not closed on the way (nor shut down).
	fresh.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := fresh.Read(make([]byte, 1)); err == nil || !isTimeout(err) {
		t.Errorf("the fresh connection was closed: %v", err)
	}
	// The idle connection kept the 6 s it had left.
	next.advance(5900 * time.Millisecond)
	if n := next.snapshot().Conns["idle"]; n != 1 {
		t.Fatalf("idle connection gone before its time: %d idle", n)
	}
	next.advance(200 * time.Millisecond)
	next.waitFor("idle timeout", func(s view.Snapshot) bool { return s.Counters["timeout_idle"] == 1 })
	if _, closed := closedByPeer(idle); !closed {
		t.Error("the idle connection is open past its idle timeout")
	}
}

func isTimeout(err error) bool {
	type timeout interface{ Timeout() bool }
	te, ok := err.(timeout)
	return ok && te.Timeout()
}
