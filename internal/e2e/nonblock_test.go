package e2e

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
	"golang.org/x/sys/unix"
)

// nonblockClearerWorker serves each connection it is dispatched by its
// request's path, and for the first two clears O_NONBLOCK on the
// connection's open file description, which the supervisor's descriptor
// shares, before it closes its own copy:
//
//   - /linger: a canned 200 with its write side shut, returned with LINGER;
//   - /fill: the client's receive window and the socket's send buffer filled
//     with junk, returned kept alive (KEEP_ALIVE, not kept);
//   - any other: a canned 200, returned with LINGER, O_NONBLOCK untouched.
//
// The real sandbox refuses that fcntl; this worker runs without it.
func nonblockClearerWorker() int {
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
			go serveClearing(ch, b.Dispatch, fd)
			fd = -1
		case *proto.Frame_Drain:
			return 0
		}
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

func serveClearing(ch *ipc.Stream, d *proto.Dispatch, fd int) {
	done := &proto.Done{ConnId: d.GetConnId(), Requests: d.GetRequests(), Disposition: proto.Disposition_CLOSE}
	defer func() { ch.Send(&proto.Frame{Body: &proto.Frame_Done{Done: done}}, -1) }()
	if fd < 0 {
		return
	}
	f := os.NewFile(uintptr(fd), "client")
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostile: FileConn:", err)
		return
	}
	c := nc.(*net.TCPConn)
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	head := string(d.GetCarried())
	buf := make([]byte, 64<<10)
	for !strings.Contains(head, "\r\n\r\n") {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		head += string(buf[:n])
	}
	done.Requests++
	done.ResponseStatus, done.ResponseMicros = []uint32{200}, []uint64{1}
	path := strings.Fields(head + " /")[1]
	if path == "/fill" {
		done.Disposition = proto.Disposition_KEEP_ALIVE
		n, err := fill(c, buf)
		if err != nil {
			fmt.Fprintf(os.Stderr, "hostile: filling: %v\n", err)
			return
		}
		clearNonblock(c, fmt.Sprintf("filled %d bytes", n))
		return
	}
	fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(cannedBody), cannedBody)
	c.CloseWrite()
	done.Disposition = proto.Disposition_LINGER
	if path == "/linger" {
		clearNonblock(c, "lingering")
	}
}

// fill writes buf to c, which the client does not read, until the send
// buffer stays full: the kernel grows it and the receiver makes room once
// after the first refusal, so it writes until nothing more goes for
// fillQuiet, at most fillRounds rounds.
func fill(c *net.TCPConn, buf []byte) (int, error) {
	const fillRounds, fillQuiet = 100, 5 // of 100 ms
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	total, quiet := 0, 0
	cerr := rc.Control(func(fd uintptr) {
		for round := 0; round < fillRounds && quiet < fillQuiet; round++ {
			wrote := 0
			for {
				n, werr := unix.Write(int(fd), buf)
				if werr != nil {
					if werr != unix.EAGAIN {
						err = werr
						return
					}
					break
				}
				wrote += n
			}
			total += wrote
			if quiet++; wrote > 0 {
				quiet = 0
			}
			time.Sleep(100 * time.Millisecond)
		}
		if quiet < fillQuiet {
			err = fmt.Errorf("still writing after %d rounds", fillRounds)
		}
	})
	if err == nil {
		err = cerr
	}
	return total, err
}

// clearNonblock clears O_NONBLOCK on c's open file description and says so
// on stderr with what.
func clearNonblock(c *net.TCPConn, what string) {
	rc, err := c.SyscallConn()
	if err == nil {
		rc.Control(func(fd uintptr) { err = unix.SetNonblock(int(fd), false) })
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "hostile: clearing O_NONBLOCK: %v\n", err)
		return
	}
	fmt.Fprintf(os.Stderr, "hostile: %s, O_NONBLOCK cleared\n", what)
}

// A worker can clear O_NONBLOCK on a client connection it is dispatched:
// the flag belongs to the open file description its SCM_RIGHTS copy shares
// with the supervisor's. The dispatcher's own calls on client sockets must
// not block whatever the flag says (docs/DESIGN.md §2.0), so that:
//
//   - linger: a connection handed back to linger whose client sends one byte
//     and then nothing is read without blocking the loop;
//   - fill: a canned 408 to a client that reads nothing, its window and the
//     send buffer full, is not waited for.
//
// Either way the loop goes on: another client is answered, and the
// supervisor's own snapshots (served by the loop) come back.
func TestWorkerClearsNonblock(t *testing.T) {
	config := `
workers {
  count       = 1
  concurrency = 4
}
`
	t.Run("linger", func(t *testing.T) {
		h := startNoWait(t, config, "hostile-worker", "nonblock-clearer")
		h.waitFor("the hostile worker", 20*time.Second, func(s view.Snapshot) bool { return s.Workers[0].State == "ready" })
		a := dialFrom(t, "127.0.0.2", h.addr)
		defer a.Close()
		a.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprint(a, "GET /linger HTTP/1.1\r\nHost: test\r\n\r\n")
		br := bufio.NewReader(a)
		if resp, body, err := readResponse(br, "GET"); err != nil || resp.StatusCode != 200 || body != cannedBody {
			t.Fatalf("the lingering client: %v %q %v", resp, body, err)
		}
		h.waitLog("hostile: lingering, O_NONBLOCK cleared", 10*time.Second)
		h.waitFor("the connection lingering", 10*time.Second, func(s view.Snapshot) bool {
			return s.AtWorkers == 0 && s.Conns["linger"] == 1
		})
		// One byte, then nothing: a blocking read for more never returns.
		if _, err := a.Write([]byte{'x'}); err != nil {
			t.Fatal(err)
		}
		b := newClient(t, "127.0.0.3", h.addr)
		if resp, body, err := b.get("/ok"); err != nil || resp.StatusCode != 200 {
			t.Fatalf("another client after the byte: %v %q %v", resp, body, err)
		}
		// The lingering connection ends as any does: closed at its timeout.
		if err := expectClosed(a, 10*time.Second); err != nil {
			t.Errorf("the lingering connection: %v", err)
		}
		h.waitFor("the connections closed", 10*time.Second, func(s view.Snapshot) bool { return s.Conns["linger"] == 0 })
	})
	t.Run("fill", func(t *testing.T) {
		h := startNoWait(t, config, "hostile-worker", "nonblock-clearer")
		h.waitFor("the hostile worker", 20*time.Second, func(s view.Snapshot) bool { return s.Workers[0].State == "ready" })
		// A small receive buffer keeps the fill small.
		dl := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")},
			Control: func(_, _ string, rc syscall.RawConn) error {
				var serr error
				err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096) })
				if err == nil {
					err = serr
				}
				return err
			}}
		nc, err := dl.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		a := nc.(*net.TCPConn)
		defer a.Close()
		fmt.Fprint(a, "GET /fill HTTP/1.1\r\nHost: test\r\n\r\n")
		line := h.waitLog("hostile: filled", 15*time.Second)
		if !strings.Contains(line, "O_NONBLOCK cleared") {
			t.Fatalf("the hostile worker: %s", line)
		}
		h.waitFor("the connection parked", 10*time.Second, func(s view.Snapshot) bool {
			return s.AtWorkers == 0 && s.Conns["idle"] == 1
		})
		// Part of a head, then silence: the gap's 408 meets a full
		// send buffer the client never drains.
		fmt.Fprint(a, "GET /ok HTTP/1.1\r\n")
		h.waitFor("the head's gap to pass", 20*time.Second, func(s view.Snapshot) bool {
			return s.Counters["timeout_head_gap"] == 1
		})
		b := newClient(t, "127.0.0.3", h.addr)
		if resp, body, err := b.get("/ok"); err != nil || resp.StatusCode != 200 {
			t.Fatalf("another client after the 408: %v %q %v", resp, body, err)
		}
		h.waitFor("the connections closed", 10*time.Second, func(s view.Snapshot) bool {
			return s.Conns["linger"] == 0 && s.Conns["head"] == 0
		})
	})
}
