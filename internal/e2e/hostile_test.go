package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor"
	"github.com/gatehouse-dev/gatehouse/worker"
	"golang.org/x/sys/unix"
	pb "google.golang.org/protobuf/proto"
)

// hostileWorker is a test-only worker program: slot 0 breaks the protocol in
// the way its mode names, before it ever reports Ready, so that no client is
// dispatched to it; every other slot is a real worker. It peeks at Hello to
// learn its slot without consuming it.
func hostileWorker(args []string) int {
	mode, rest := args[0], args[1:]
	buf := make([]byte, ipc.MaxFrameSize)
	n, _, _, _, err := unix.Recvmsg(3, buf, nil, unix.MSG_PEEK)
	if err != nil {
		return 1
	}
	var hello proto.Frame
	if pb.Unmarshal(buf[:n], &hello) != nil || hello.GetHello().GetWorkerId() != 0 {
		return worker.Main(rest)
	}
	unix.Recvmsg(3, buf, nil, 0) // consume Hello
	send := func(b []byte, oob []byte) { unix.Sendmsg(3, b, oob, nil, 0) }
	switch mode {
	case "garbage":
		send([]byte("\xff\xff\xff\xff garbage that is no protobuf frame \x00\x01"), nil)
	case "oversize":
		send(make([]byte, ipc.MaxFrameSize+100), nil)
	case "descriptor":
		b, _ := pb.Marshal(&proto.Frame{Body: &proto.Frame_Pong{Pong: &proto.Pong{Seq: 1}}})
		send(b, unix.UnixRights(0))
	case "foreign-done":
		b, _ := pb.Marshal(&proto.Frame{Body: &proto.Frame_Done{Done: &proto.Done{ConnId: 424242, Disposition: proto.Disposition_KEEP_ALIVE}}})
		send(b, nil)
	case "empty":
		b, _ := pb.Marshal(&proto.Frame{Id: 7})
		send(b, nil)
	}
	// Wait to be killed; exit on our own only if the supervisor never does.
	time.Sleep(30 * time.Second)
	return 0
}

// A worker that sends a malformed, oversized or unexpected frame, or a
// descriptor, is killed and replaced, the supervisor stays up and the other
// worker's clients are served throughout.
func TestHostileWorkerIsKilled(t *testing.T) {
	for _, mode := range []string{"garbage", "oversize", "descriptor", "foreign-done", "empty"} {
		t.Run(mode, func(t *testing.T) {
			h := startHostile(t, mode)
			// Killed before it served a request: respawn is throttled (a
			// minute), not retried at once.
			h.waitFor("the hostile worker to be killed and throttled", 20*time.Second, func(s supervisor.Snapshot) bool {
				return s.Workers[0].Restarts >= 1 && s.Workers[0].Backoff == time.Minute
			})
			cl := newClient(t, "127.0.0.1", h.addr)
			for i := 0; i < 50; i++ {
				if resp, _, err := cl.get("/ok"); err != nil || resp.StatusCode != 200 {
					t.Fatalf("request %d: %v", i, err)
				}
			}
			s := h.snapshot()
			if s.Workers[1].Restarts != 0 {
				t.Errorf("the well-behaved worker was restarted %d times", s.Workers[1].Restarts)
			}
			if got := s.Counters["worker_kills"]; got != 1 {
				t.Errorf("worker_kills = %d, want 1", got)
			}
			if testing.Verbose() {
				t.Logf("log:\n%s", h.logs.String())
			}
			if !strings.Contains(h.logs.String(), "killing worker") {
				t.Errorf("no log line for the violation")
			}
		})
	}
}

// startHostile runs two workers of which slot 0 is hostile in mode, and
// waits for slot 1 to be ready.
func startHostile(t *testing.T, mode string) *harness {
	t.Helper()
	h := startNoWait(t, `
workers {
  count       = 2
  concurrency = 4
}
`, "hostile-worker", mode)
	h.waitFor("the well-behaved worker", 20*time.Second, func(s supervisor.Snapshot) bool {
		return s.Workers[1].State == "ready"
	})
	return h
}
