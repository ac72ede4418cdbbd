package worker

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/worker/transport"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
	pb "google.golang.org/protobuf/proto"
)

// The allocation tests run a real Worker (frame loop, round, handler) over a
// SEQPACKET socketpair and a loopback connection, and count the heap
// allocations of one steady-state request. The test's own side (the fake
// supervisor and the client) uses raw system calls on buffers made before
// the count, so every allocation counted is the worker's.

const allocConfig = `
listener "http" {
  address = "127.0.0.1:0"
}
workers {
  concurrency = 4
  hot_window  = "%[1]s"
}
log {
  access_log = false
}
route "/static/" {
  static {
    root = "%[2]s"
  }
}
route "/gz/" {
  static {
    root = "%[2]s"
  }
  compress {
    min_length = 1
  }
}
route "/" {
  respond {
    status       = 200
    body         = "hello, world\n"
    content_type = "text/plain; charset=utf-8"
  }
}
`

// allocHarness is a running worker with one client connection.
type allocHarness struct {
	t      *testing.T
	w      *Worker
	super  int // the supervisor's end of the channel (blocking)
	client int // the client's end of the connection (blocking)
	server int // the server's end, as the supervisor keeps it (non-blocking)
	rbuf   []byte
	oob    []byte
}

func startAllocWorker(t *testing.T, hot time.Duration) *allocHarness {
	t.Helper()
	return startAgedWorker(t, hot, 0)
}

// startAgedWorker is startAllocWorker with each dispatch lasting at most age
// (0: maxDispatchAge).
func startAgedWorker(t *testing.T, hot, age time.Duration) *allocHarness {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "small.txt"), []byte("a small static file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := ipc.NewStream(os.NewFile(uintptr(fds[0]), "worker"))
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{log: hclog.NewNullLogger(), roots: map[string]*os.Root{dir: root}, testDispatchAge: age}
	w.ch, w.calls.ch = ws, ws
	stopped := make(chan error, 1)
	go func() { stopped <- w.run(nil) }()
	h := &allocHarness{t: t, w: w, super: fds[1], rbuf: make([]byte, ipc.MaxFrameSize+1), oob: make([]byte, unix.CmsgSpace(8*4))}
	t.Cleanup(func() {
		unix.Close(h.super)
		select {
		case err := <-stopped:
			if err != nil {
				t.Errorf("worker: %v", err)
			}
		case <-time.After(roundWait):
			t.Error("worker did not stop when its channel closed")
		}
	})
	src := fmt.Sprintf(allocConfig, hot, dir)
	h.sendFrame(&proto.Frame{Body: &proto.Frame_Hello{Hello: &proto.Hello{Config: []byte(src), ConfigName: "alloc.hcl", Concurrency: 4}}}, -1)
	if f := h.recvFrame(); f.GetReady() == nil {
		t.Fatalf("got %T after Hello, want Ready", f.Body)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	h.client = dupFD(t, c)
	h.server = dupFD(t, sc)
	c.Close()
	sc.Close()
	if err := unix.SetNonblock(h.server, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(h.client); unix.Close(h.server) })
	// A bounded receive: a broken worker fails the test instead of hanging it.
	// A receive timeout makes a read interruptible by the runtime's signals
	// (SA_RESTART does not apply), so every read on these retries EINTR.
	tv := unix.NsecToTimeval(roundWait.Nanoseconds())
	for _, fd := range []int{h.super, h.client} {
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func dupFD(t *testing.T, c net.Conn) int {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	fd := -1
	rc.Control(func(s uintptr) { fd, err = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) })
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		t.Fatal(err)
	}
	return fd
}

func (h *allocHarness) sendFrame(f *proto.Frame, fd int) {
	h.t.Helper()
	b, err := ipc.Marshal(nil, f)
	if err != nil {
		h.t.Fatal(err)
	}
	h.sendRaw(b, fd)
}

// sendRaw writes an encoded frame, with fd attached when fd >= 0.
func (h *allocHarness) sendRaw(b []byte, fd int) {
	var oob []byte
	if fd >= 0 {
		oob = h.oob[:unix.CmsgSpace(4)]
		putRights(oob, fd)
	}
	if _, err := unix.SendmsgN(h.super, b, oob, nil, 0); err != nil {
		h.t.Fatal(err)
	}
}

// putRights writes an SCM_RIGHTS control message for fd into oob without
// allocating (unix.UnixRights would): the header of one made for fd 0, then
// fd in native byte order (every Linux port gatehouse builds for is little-endian).
func putRights(oob []byte, fd int) {
	copy(oob, rights0)
	d := oob[unix.CmsgLen(0):]
	d[0], d[1], d[2], d[3] = byte(fd), byte(fd>>8), byte(fd>>16), byte(fd>>24)
}

var rights0 = unix.UnixRights(0)

// recvRaw reads one frame's bytes from the worker (which sends no
// descriptor on this path; read(2) takes one datagram).
func (h *allocHarness) recvRaw() []byte {
	n, err := transport.IgnoringEINTR(func() (int, error) { return unix.Read(h.super, h.rbuf) })
	if err != nil || n == 0 {
		h.t.Fatalf("receiving from the worker: %d bytes, %v", n, err)
	}
	return h.rbuf[:n]
}

func (h *allocHarness) recvFrame() *proto.Frame {
	h.t.Helper()
	f := new(proto.Frame)
	if err := pb.Unmarshal(h.recvRaw(), f); err != nil {
		h.t.Fatal(err)
	}
	return f
}

// round is one steady-state request: the client writes it, the supervisor
// dispatches the connection (a new copy of the descriptor, as the kernel
// gives the worker), the client reads the whole response and the
// supervisor reads Done.
func (h *allocHarness) round(req, dispatch []byte, respLen int) {
	if _, err := unix.Write(h.client, req); err != nil {
		h.t.Fatal(err)
	}
	fd, err := unix.FcntlInt(uintptr(h.server), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	h.sendRaw(dispatch, fd)
	unix.Close(fd) // the kernel gave the worker its own copy
	h.readResponse(respLen)
	if b := h.recvRaw(); len(b) == 0 {
		h.t.Fatal("empty Done")
	}
}

// readResponse reads exactly n bytes of response from the client's end.
func (h *allocHarness) readResponse(n int) {
	buf := h.rbuf[:n]
	for got := 0; got < n; {
		m, err := transport.IgnoringEINTR(func() (int, error) { return unix.Read(h.client, buf[got:]) })
		if err != nil || m <= 0 {
			h.t.Fatalf("reading the response: %d of %d bytes, %v", got, n, err)
		}
		got += m
	}
}

// responseLen serves one request and returns the length of its response,
// which the counted rounds then read exactly.
func (h *allocHarness) responseLen(req, dispatch []byte) int {
	h.t.Helper()
	if _, err := unix.Write(h.client, req); err != nil {
		h.t.Fatal(err)
	}
	fd, err := unix.FcntlInt(uintptr(h.server), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	h.sendRaw(dispatch, fd)
	unix.Close(fd)
	h.recvRaw()
	buf := make([]byte, 4096)
	unix.SetNonblock(h.client, true)
	defer unix.SetNonblock(h.client, false)
	n, err := transport.IgnoringEINTR(func() (int, error) { return unix.Read(h.client, buf) })
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

func dispatchBytes(t *testing.T) []byte {
	t.Helper()
	b, err := ipc.Marshal(nil, &proto.Frame{Body: &proto.Frame_Dispatch{Dispatch: &proto.Dispatch{
		ConnId: 7, HasFd: true, Peer: "127.0.0.1:40000", ClientKey: "127.0.0.1", Requests: 1, ListenerName: "http",
		AcceptedUnixNano: time.Now().UnixNano(),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Allocation bounds of the worker's round, as measured (go1.26). Everything
// a server goroutine can reuse from one round or dispatch to the next is
// reused (Done frame, connection server, readers and writer, response and
// its header map, request body, parent context, Dispatch frame); zero is not
// reached because a round builds what a net/http handler is given and may
// keep: per request (13) the parsed head (7: the Head, its Header map, the
// values' slab, the request line's strings, the *url.URL), the
// *http.Request, its normalised URL, its context (WithCancel, 2) and
// WithContext's copy; per dispatch (3 more) the Dispatch's peer, client key
// and listener name strings (a round that never waits puts the descriptor
// under no *os.File). A small
// static file adds net/http's ServeContent (the open file, its stat, the
// Last-Modified and ETag values, the range parsing).
const (
	maxAllocsDispatchRespond = 16
	maxAllocsDispatchStatic  = 46
	maxAllocsHotRespond      = 13
	maxAllocsHotStatic       = 43
)

// TestRoundAllocs counts the heap allocations of one kept-alive GET served
// by the worker: dispatched with its descriptor and returned with Done, and
// served in a hot wait, with no frame at all; for a respond route, a small
// static file, and the same file gzipped by a compressing route.
func TestRoundAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	// A collection during the count would empty the pools the round
	// reuses from, and their refill would be counted as the round's
	// (once 49 against 46 for the static file).
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for _, tc := range []struct {
		name, target  string
		dispatch, hot float64
	}{
		{"respond", "/", maxAllocsDispatchRespond, maxAllocsHotRespond},
		{"static", "/static/small.txt", maxAllocsDispatchStatic, maxAllocsHotStatic},
		// Compressed: the encoder comes from the pool; the round adds
		// its header values (Vary, Content-Encoding, the weak ETag).
		{"static gzip", "/gz/small.txt", maxAllocsDispatchStatic + 4, maxAllocsHotStatic + 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startAllocWorker(t, 0)
			req := []byte("GET " + tc.target + " HTTP/1.1\r\nHost: example.com\r\nUser-Agent: wrk\r\nAccept-Encoding: gzip\r\n\r\n")
			disp := dispatchBytes(t)
			n := h.responseLen(req, disp)
			allocs := testing.AllocsPerRun(200, func() { h.round(req, disp, n) })
			t.Logf("%s: %.1f allocations per dispatched round", tc.name, allocs)
			if allocs > tc.dispatch {
				t.Errorf("%s: %.1f allocations per dispatched round, want at most %.0f", tc.name, allocs, tc.dispatch)
			}

			// Hot: one dispatch, a window longer than the test, and
			// requests that come while the worker waits for them.
			// The response is as long as above.
			h = startAllocWorker(t, 10*time.Second)
			if _, err := unix.Write(h.client, req); err != nil {
				t.Fatal(err)
			}
			fd, err := unix.FcntlInt(uintptr(h.server), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			h.sendRaw(disp, fd)
			unix.Close(fd)
			h.readResponse(n)
			// 1 + 1 + 50 rounds: under the rounds of one dispatch.
			allocs = testing.AllocsPerRun(50, func() {
				if _, err := unix.Write(h.client, req); err != nil {
					t.Fatal(err)
				}
				h.readResponse(n)
			})
			t.Logf("%s: %.1f allocations per hot request", tc.name, allocs)
			if allocs > tc.hot {
				t.Errorf("%s: %.1f allocations per hot request, want at most %.0f", tc.name, allocs, tc.hot)
			}
			// The client closes: the hot wait ends and the connection
			// comes back, with every request counted.
			unix.Shutdown(h.client, unix.SHUT_WR)
			f := h.recvFrame()
			if got := f.GetDone().GetRequests(); got < 50 {
				t.Errorf("Done counts %d requests after 50 hot ones and more", got)
			}
		})
	}
}
