package supervisor

import (
	"net"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/internal/poll"
	"github.com/gatehouse-dev/gatehouse/supervisor/sockets"
	"golang.org/x/sys/unix"
)

// acceptNew accepts on h's listener until a connection other than h.c is
// admitted (bounded), and returns it.
func (h *allocLoop) acceptNew() *conn {
	h.t.Helper()
	d := h.d
	for i := 0; i < 2000; i++ {
		d.accept(d.listeners[0].id, time.Now())
		for c := range d.conns.all() {
			if c != h.c {
				d.flushSends()
				return c
			}
		}
		time.Sleep(time.Millisecond)
	}
	h.t.Fatal("the dispatcher accepted no new connection")
	return nil
}

// TestDeferredAcceptDispatch: on a deferring listener (TCP_DEFER_ACCEPT) a
// connection whose head came with it is dispatched in the wake-up that
// accepted it, without ever being registered with the poller; it is
// registered only when it is parked after its round.
func TestDeferredAcceptDispatch(t *testing.T) {
	h := startAllocLoop(t)
	d := h.d
	l := &d.listeners[0]
	if !sockets.SetDeferAccept(l.fd) {
		t.Skip("TCP_DEFER_ACCEPT refused")
	}
	l.deferred = true
	client, err := net.Dial("tcp", l.addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, err := client.Write(allocRequest); err != nil {
		t.Fatal(err)
	}
	c := h.acceptNew()
	if c.state != stateAtWorker || c.flags&flagPolled != 0 || d.c.acceptDispatches != 1 {
		t.Fatalf("connection %s, polled %v, %d dispatched at accept; want at_worker, never polled, 1",
			c.state, c.flags&flagPolled != 0, d.c.acceptDispatches)
	}
	// The worker serves it and keeps it alive: parked, it is registered.
	n, oobn, err := recvmsgRaw(h.peer, h.rbuf, h.oob)
	if err != nil || n == 0 || oobn < unix.CmsgLen(4) {
		t.Fatalf("no Dispatch with a descriptor: %d bytes, %d of control, %v", n, oobn, err)
	}
	b := h.oob[unix.CmsgLen(0):]
	unix.Close(int(int32(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)))
	if err := unix.Sendmsg(h.peer, h.doneFrame(c.id, 1), nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	d.workerEvent(h.w.token(), poll.Event{Readable: true}, time.Now())
	if c.state != stateIdle || c.flags&flagPolled == 0 {
		t.Fatalf("connection %s, polled %v after Done keep-alive; want idle and polled", c.state, c.flags&flagPolled != 0)
	}
	if _, err := client.Write(allocRequest); err != nil {
		t.Fatal(err)
	}
	if !h.polled(c) {
		t.Fatal("the parked connection's next request was not reported by the poller")
	}
}

// TestDeferredAcceptSilent: a connection a deferring listener queued
// without input (the kernel's wait ran out) finds nothing at its first look
// and is parked fresh, registered, so its first bytes wake the loop.
func TestDeferredAcceptSilent(t *testing.T) {
	h := startAllocLoop(t)
	d := h.d
	// The listener does not defer (startAllocLoop), but the loop believes
	// it does: its connections arrive silent, as after the kernel's wait.
	d.listeners[0].deferred = true
	client, err := net.Dial("tcp", d.listeners[0].addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c := h.acceptNew()
	if c.state != stateFresh || c.flags&flagPolled == 0 || d.c.acceptDispatches != 0 {
		t.Fatalf("connection %s, polled %v, %d dispatched at accept; want fresh, polled, 0",
			c.state, c.flags&flagPolled != 0, d.c.acceptDispatches)
	}
	if _, err := client.Write(allocRequest); err != nil {
		t.Fatal(err)
	}
	if !h.polled(c) {
		t.Fatal("the silent connection's first bytes were not reported by the poller")
	}
}

// polled reports whether the poller reports c readable within frameWait.
func (h *allocLoop) polled(c *conn) bool {
	events := make([]poll.Event, 8)
	deadline := time.Now().Add(frameWait)
	for time.Now().Before(deadline) {
		n, err := h.d.p.Wait(events, 100*time.Millisecond)
		if err != nil {
			h.t.Fatal(err)
		}
		for _, ev := range events[:n] {
			if ev.Token == token(kindConn, c.id) {
				return true
			}
		}
	}
	return false
}

// TestClosingDispatchGivesUpDescriptor: a connection whose head asks to
// close is dispatched with the supervisor's descriptor given up: once the
// worker closes its copy the client sees the end of the connection at once,
// and the Done only takes the record and the counts back.
func TestClosingDispatchGivesUpDescriptor(t *testing.T) {
	for _, deferred := range []bool{false, true} {
		h := startAllocLoop(t)
		d := h.d
		l := &d.listeners[0]
		if deferred {
			if !sockets.SetDeferAccept(l.fd) {
				t.Skip("TCP_DEFER_ACCEPT refused")
			}
			l.deferred = true
		}
		conns, closed, clientConns := d.conns.len(), d.c.closed, h.c.client.conns
		client, err := net.Dial("tcp", l.addr.String())
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		if _, err := client.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		c := h.acceptNew()
		if !deferred {
			if c.state != stateFresh {
				t.Fatalf("connection %s before its event, want fresh", c.state)
			}
			d.connEvent(c, poll.Event{Readable: true}, time.Now())
			d.flushSends()
		}
		if c.state != stateAtWorker || c.fd != -1 || c.flags&(flagPolled|flagClosing) != 0 || d.c.closingDispatches != 1 {
			t.Fatalf("deferred %v: connection %s, fd %d, flags %b, %d closing dispatches; want at_worker, -1, none, 1",
				deferred, c.state, c.fd, c.flags, d.c.closingDispatches)
		}
		n, oobn, err := recvmsgRaw(h.peer, h.rbuf, h.oob)
		if err != nil || n == 0 || oobn < unix.CmsgLen(4) {
			t.Fatalf("no Dispatch with a descriptor: %d bytes, %d of control, %v", n, oobn, err)
		}
		b := h.oob[unix.CmsgLen(0):]
		unix.Close(int(int32(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)))
		// The worker's copy was the last: the client reads the end now,
		// before any Done.
		client.SetReadDeadline(time.Now().Add(frameWait))
		if n, err := client.Read(make([]byte, 16)); n != 0 || err == nil {
			t.Fatalf("the client read %d bytes, %v; want the connection's end", n, err)
		}
		id, cl := c.id, c.client
		if err := unix.Sendmsg(h.peer, h.doneFrame(id, 1), nil, nil, 0); err != nil {
			t.Fatal(err)
		}
		d.workerEvent(h.w.token(), poll.Event{Readable: true}, time.Now())
		if d.conns.get(id) != nil || d.conns.len() != conns || d.out != 0 || h.w.active != 0 || d.c.closed != closed+1 || cl.conns != clientConns {
			t.Fatalf("after Done: record kept %v, %d records (want %d), %d out, %d active, %d closed (want %d), client's conns %d (want %d)",
				d.conns.get(id) != nil, d.conns.len(), conns, d.out, h.w.active, d.c.closed, closed+1, cl.conns, clientConns)
		}
		if err := d.invariants(); err != nil {
			t.Fatal(err)
		}
	}
}
