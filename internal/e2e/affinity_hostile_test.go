package e2e

import (
	"bufio"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
	"golang.org/x/sys/unix"
)

// keptLiarWorker answers each connection it is dispatched with a descriptor
// (a keep-alive 200 with cannedBody) and returns it with Done kept, having
// closed its copy. A Dispatch without a descriptor it cannot serve: it
// returns the connection with Done close and says so on stderr.
func keptLiarWorker() int {
	ch := hostileChannel()
	for {
		var f proto.Frame
		fd, err := ch.Recv(&f)
		if err != nil {
			return 0
		}
		switch b := f.Body.(type) {
		case *proto.Frame_Ping:
			go ch.Send(&proto.Frame{Body: &proto.Frame_Pong{Pong: &proto.Pong{Seq: b.Ping.GetSeq()}}}, -1)
		case *proto.Frame_Dispatch:
			d := b.Dispatch
			done := &proto.Done{ConnId: d.GetConnId(), Requests: d.GetRequests()}
			if fd >= 0 {
				serveKeepAlive(d, fd) // closes fd
				fd = -1
				done.Disposition, done.Kept, done.Requests = proto.Disposition_KEEP_ALIVE, true, d.GetRequests()+1
				done.ResponseStatus, done.ResponseMicros = []uint32{200}, []uint64{1}
			} else {
				fmt.Fprintln(os.Stderr, "hostile: dispatched without a descriptor I do not hold")
				done.Disposition = proto.Disposition_CLOSE
			}
			ch.Send(&proto.Frame{Body: &proto.Frame_Done{Done: done}}, -1)
		case *proto.Frame_Forget:
			fmt.Fprintln(os.Stderr, "hostile: told to forget", b.Forget.GetConnId())
		case *proto.Frame_Drain:
			return 0
		}
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// A worker that claims to keep a connection it closed can fail only that
// connection: its next request is dispatched to it without a descriptor,
// the liar can only give it back, and the supervisor closes it. Nothing is
// a protocol violation (the liar is not killed), the supervisor's count of
// copies comes back to zero, and the other worker serves on.
func TestAffinityLiarFailsOnlyItsConnection(t *testing.T) {
	h := startNoWait(t, `
workers {
  count                = 2
  concurrency          = 4
  hot_window           = "0s"
  max_kept_connections = 256
}
`, "hostile-worker", "kept-liar")
	h.waitFor("both workers ready", 20*time.Second, settled(2))
	// A client the liar served: the first two land on different workers.
	var liar *client
	for i := 0; i < 2 && liar == nil; i++ {
		cl := newClient(t, fmt.Sprintf("127.0.0.%d", 2+i), h.addr)
		resp, body, err := cl.get("/ok")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("client %d: %v %v", i, resp, err)
		}
		if body == cannedBody {
			liar = cl
		}
	}
	if liar == nil {
		t.Fatal("no client landed on the liar")
	}
	h.waitFor("the liar's claim counted", 10*time.Second, func(s view.Snapshot) bool { return s.Workers[0].Kept == 1 })
	fmt.Fprint(liar.c, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
	liar.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if resp, _, err := readResponse(bufio.NewReader(liar.c), "GET"); err == nil {
		t.Fatalf("answered %d through a copy the liar does not hold", resp.StatusCode)
	}
	h.waitLog("hostile: dispatched without a descriptor", 10*time.Second)
	s := h.waitFor("the connection closed", 10*time.Second, func(s view.Snapshot) bool {
		return s.Workers[0].Kept == 0 && s.AtWorkers == 0
	})
	if s.Counters["worker_kills"] != 0 || s.Counters["affinity"] != 1 {
		t.Errorf("worker_kills %d, affinity %d; want 0, 1", s.Counters["worker_kills"], s.Counters["affinity"])
	}
	// New connections are served as before (the liar may serve a first
	// request too; only a round without a descriptor fails there).
	for i := 0; i < 5; i++ {
		cl := newClient(t, fmt.Sprintf("127.0.0.%d", 10+i), h.addr)
		if resp, _, err := cl.get("/ok"); err != nil || resp.StatusCode != 200 {
			t.Fatalf("new client %d: %v %v", i, resp, err)
		}
	}
}
