package worker

import (
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/worker/transport"
	"golang.org/x/sys/unix"
)

// hotDispatch dispatches h's connection with its first request in the socket
// and reads that response.
func hotDispatch(t *testing.T, h *allocHarness, req []byte, n int) {
	t.Helper()
	if _, err := unix.Write(h.client, req); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.FcntlInt(uintptr(h.server), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	h.sendRaw(dispatchBytes(t), fd)
	unix.Close(fd)
	h.readResponse(n)
}

// A hot connection is not handed back after a number of rounds: a dispatch
// serves every request that keeps arriving within the window (far more than
// the 64 rounds that once ended a dispatch) until its time is up.
func TestHotDispatchManyRounds(t *testing.T) {
	req := []byte("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")
	n := startAllocWorker(t, 0).responseLen(req, dispatchBytes(t))
	h := startAllocWorker(t, 10*time.Second)
	hotDispatch(t, h, req, n)
	const hot = 300
	for range hot {
		if _, err := unix.Write(h.client, req); err != nil {
			t.Fatal(err)
		}
		h.readResponse(n)
	}
	unix.Shutdown(h.client, unix.SHUT_WR)
	done := h.recvFrame().GetDone()
	if done == nil {
		t.Fatal("no Done after the client closed")
	}
	if got := done.GetHotRequests(); got < hot {
		t.Errorf("Done counts %d hot requests, want all %d in one dispatch", got, hot)
	}
	if done.GetHandback() == proto.Handback_ROUNDS {
		t.Errorf("the dispatch ended on its bound after %d requests", done.GetRequests())
	}
}

// A dispatch ends on its age, so that the supervisor's counters lag by at
// most that: the connection comes back, kept alive, with reason ROUNDS and
// every request it served counted.
func TestHotDispatchAgeBound(t *testing.T) {
	const age = 100 * time.Millisecond
	req := []byte("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")
	n := startAllocWorker(t, 0).responseLen(req, dispatchBytes(t))
	h := startAgedWorker(t, 10*time.Second, age)
	start := time.Now()
	hotDispatch(t, h, req, n)
	served := 1
	// One request at a time, a few milliseconds after the last response
	// (far under the connection's 1000 requests by the age), until the
	// worker hands the connection back: then the request just sent stays
	// unread in the socket, for the supervisor. The loop's own bounds only
	// stop a broken worker.
	var done *proto.Done
	for served < 500 && time.Since(start) < 20*time.Second && done == nil {
		time.Sleep(5 * time.Millisecond)
		if _, err := unix.Write(h.client, req); err != nil {
			t.Fatal(err)
		}
		fds := []unix.PollFd{{Fd: int32(h.client), Events: unix.POLLIN}, {Fd: int32(h.super), Events: unix.POLLIN}}
		if _, err := transport.IgnoringEINTR(func() (int, error) { return unix.Poll(fds, int(roundWait.Milliseconds())) }); err != nil {
			t.Fatal(err)
		}
		switch {
		case fds[0].Revents&unix.POLLIN != 0:
			h.readResponse(n)
			served++
		case fds[1].Revents&unix.POLLIN != 0:
			done = h.recvFrame().GetDone()
		default:
			t.Fatal("neither a response nor Done")
		}
	}
	if done == nil {
		t.Fatal("no Done after the dispatch's age")
	}
	if done.GetHandback() != proto.Handback_ROUNDS || done.GetDisposition() != proto.Disposition_KEEP_ALIVE {
		t.Errorf("Done: handback %v, disposition %v; want ROUNDS, KEEP_ALIVE", done.GetHandback(), done.GetDisposition())
	}
	if got := int(done.GetRequests()) - 1; got != served { // the Dispatch said 1 before
		t.Errorf("Done counts %d requests, want the %d served", got, served)
	}
}
