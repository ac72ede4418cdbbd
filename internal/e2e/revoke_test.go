package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
	"golang.org/x/sys/unix"
)

// A compromised worker keeps a dup() of a client descriptor it was handed
// and writes into it after the supervisor decided the connection's end
// (issue 16 item 4). The supervisor shuts every connection down before it
// closes its descriptor, so the copy is dead with it; a worker recycled (or
// drained on reload) that does not exit is killed at shutdown_grace, so it
// takes no copy along.

const (
	// injectDelay is how long after returning a connection the dup-keeper
	// writes into its copy: past the 1 s idle timeout of the first test,
	// past the 1 s drain grace of the second.
	injectDelay = 3 * time.Second
	injected    = "INJECTED BY A COMPROMISED WORKER"
)

// dupKeeperWorker serves each dispatched connection with a keep-alive 200,
// returns it, and injectDelay later writes injected into the dup() it kept,
// reporting the outcome on stderr ("hostile: injected ..."). It ignores Drain.
func dupKeeperWorker() int {
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
			kept, err := unix.Dup(fd)
			if err != nil {
				fmt.Fprintln(os.Stderr, "hostile: dup:", err)
				return 1
			}
			go func(d *proto.Dispatch, fd int) {
				serveKeepAlive(d, fd)
				ch.Send(&proto.Frame{Body: &proto.Frame_Done{Done: &proto.Done{
					ConnId:         d.GetConnId(),
					Disposition:    proto.Disposition_KEEP_ALIVE,
					Requests:       d.GetRequests() + 1,
					ResponseStatus: []uint32{200},
					ResponseMicros: []uint64{0},
				}}}, -1)
				time.Sleep(injectDelay)
				n, err := unix.Write(kept, []byte(injected))
				fmt.Fprintf(os.Stderr, "hostile: injected n=%d error=%v\n", n, err)
			}(b.Dispatch, fd)
			fd = -1
		case *proto.Frame_Drain:
			fmt.Fprintln(os.Stderr, "hostile: ignoring Drain")
		}
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// serveKeepAlive reads one request head from fd and answers a keep-alive 200
// with cannedBody; it closes fd (the worker's own copy stays).
func serveKeepAlive(d *proto.Dispatch, fd int) {
	f := os.NewFile(uintptr(fd), "client")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	head := string(d.GetCarried())
	buf := make([]byte, 4096)
	for !strings.Contains(head, "\r\n\r\n") {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		head += string(buf[:n])
	}
	fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(cannedBody), cannedBody)
}

// waitLog waits until the supervisor's log holds want.
func waitLog(t *testing.T, h *harness, want string, limit time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		if l := h.logs.String(); strings.Contains(l, want) {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log within %v:\n%s", want, limit, h.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The client of a kept-alive connection gets its FIN at the idle timeout
// although the worker still holds a copy, and never the bytes the worker
// writes into that copy later.
func TestKeptDescriptorRevokedAtIdleTimeout(t *testing.T) {
	h := startNoWait(t, `
workers {
  count       = 1
  concurrency = 4
}
limits {
  keep_alive_idle_timeout = "1s"
}
`, "hostile-worker", "dup-keeper")
	h.waitFor("the dup-keeper ready", 20*time.Second, func(s view.Snapshot) bool { return s.Workers[0].State == "ready" })
	c := dialFrom(t, "127.0.0.2", h.addr)
	defer c.Close()
	fmt.Fprintf(c, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	resp, body, err := readResponse(br, "GET")
	if err != nil || resp.StatusCode != 200 || body != cannedBody {
		t.Fatalf("first response: %v %q %v", resp, body, err)
	}
	// Everything after the response, up to the end of the connection.
	c.SetReadDeadline(time.Now().Add(injectDelay + 5*time.Second))
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Errorf("no FIN: %v (the connection outlived the idle timeout)", err)
	}
	if len(rest) > 0 {
		t.Errorf("the client received %q after its response", rest)
	}
	// The worker did try, later, and its copy was dead.
	l := waitLog(t, h, "hostile: injected", injectDelay+10*time.Second)
	if !strings.Contains(l, "broken pipe") {
		t.Errorf("the injection did not fail with EPIPE:\n%s", l)
	}
}

// A worker recycled after max_rounds_per_worker that ignores Drain is killed
// at shutdown_grace: the copy it kept dies with it before it can write into
// the connection, which the next worker serves cleanly.
func TestRecycledWorkerTakesNoCopy(t *testing.T) {
	h := startNoWait(t, `
workers {
  count                 = 1
  concurrency           = 4
  max_rounds_per_worker = 1
}
limits {
  keep_alive_idle_timeout = "30s"
  shutdown_grace          = "1s"
}
`, "hostile-worker", "dup-keeper")
	h.expectDeaths(1) // the kill at the drain deadline
	h.waitFor("the dup-keeper ready", 20*time.Second, func(s view.Snapshot) bool { return s.Workers[0].State == "ready" })
	hostilePID := h.snapshot().Workers[0].PID
	c := dialFrom(t, "127.0.0.3", h.addr)
	defer c.Close()
	fmt.Fprintf(c, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	if resp, body, err := readResponse(br, "GET"); err != nil || resp.StatusCode != 200 || body != cannedBody {
		t.Fatalf("first response: %v %q %v", resp, body, err)
	}
	waitLog(t, h, "did not exit within shutdown_grace after Drain", 20*time.Second)
	h.waitFor("the recycled worker reaped and its replacement ready", 20*time.Second, func(s view.Snapshot) bool {
		return len(s.Workers) == 1 && s.Workers[0].PID != hostilePID && s.Workers[0].State == "ready"
	})
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", hostilePID)); err == nil {
		t.Errorf("the recycled worker (pid %d) still runs", hostilePID)
	}
	// The kept-alive connection is served by the replacement, with nothing
	// in front of its response.
	fmt.Fprintf(c, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, body, err := readResponse(br, "GET"); err != nil || resp.StatusCode != 200 || body != "ok\n" {
		t.Fatalf("second response: %v %q %v", resp, body, err)
	}
	if strings.Contains(h.logs.String(), "hostile: injected") {
		t.Errorf("the recycled worker lived to write into its copy:\n%s", h.logs.String())
	}
}
