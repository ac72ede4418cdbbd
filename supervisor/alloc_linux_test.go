package supervisor

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/internal/poll"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protowire"
)

// The allocation test drives the dispatcher's own code (no loop goroutine)
// over a real loopback connection and a real SEQPACKET channel: a readable
// kept-alive connection is peeked, dispatched with its descriptor, and taken
// back from a Done. The fake worker uses raw system calls on buffers made
// before the count, so every allocation counted is the dispatcher's.

type allocLoop struct {
	t      *testing.T
	d      *dispatcher
	w      *workerProc
	c      *conn
	peer   int // the worker's end of the channel (blocking, bounded)
	client int // the client's end of the connection
	rbuf   []byte
	oob    []byte
	done   []byte
}

func startAllocLoop(t *testing.T) *allocLoop {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gatehouse.hcl")
	if err := os.WriteFile(path, []byte(baseConfig(1, 8, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	s := newSupervisor(cfg, Options{Logger: hclog.NewNullLogger(), ConfigPath: path})
	if s.boot.listeners, err = openListeners(cfg, nil); err != nil {
		t.Fatal(err)
	}
	s.publishListeners(s.boot.listeners)
	s.boot.spec = &workerSpec{cfg: cfg}
	if s.poller, err = poll.New(); err != nil {
		t.Fatal(err)
	}
	d, err := newDispatcher(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for c := range d.conns.all() {
			d.closeConn(c)
		}
		s.closeListeners()
		d.p.Close()
	})
	h := &allocLoop{t: t, d: d, rbuf: make([]byte, ipc.MaxFrameSize+1), oob: make([]byte, 256)}
	// The connection below is accepted before it sends anything, so the
	// listener must not defer it.
	for i := range d.listeners {
		unix.SetsockoptInt(d.listeners[i].fd, unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, 0)
		d.listeners[i].deferred = false
	}

	// A worker slot with a channel and a Ready process, as spawned and
	// readied by the loop.
	ch, peer, err := ipc.Pair()
	if err != nil {
		t.Fatal(err)
	}
	h.peer = int(peer.Fd())
	t.Cleanup(func() { peer.Close(); ch.Close() })
	unix.SetNonblock(h.peer, false)
	tv := unix.NsecToTimeval(int64(frameWait))
	unix.SetsockoptTimeval(h.peer, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	w := d.workers[0]
	w.gen, w.state, w.exited, w.reportedReady = 1, workerReady, false, true
	w.ch = ch
	w.slots = ipc.NewInFlight(cfg.Limits.IPCMaxInFlightRequests)
	if err := d.add(ch.FD(), kindWorker, w.token(), poll.In); err != nil {
		t.Fatal(err)
	}
	h.w = w

	// One client connection, accepted by the dispatcher.
	c, err := net.Dial("tcp", s.Addrs()[0].String())
	if err != nil {
		t.Fatal(err)
	}
	rc, _ := c.(*net.TCPConn).SyscallConn()
	rc.Control(func(fd uintptr) { h.client, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) })
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(h.client) })
	now := time.Now()
	for i := 0; i < 100 && d.conns.len() == 0; i++ {
		d.accept(d.listeners[0].id, now)
		time.Sleep(time.Millisecond)
	}
	for cc := range d.conns.all() {
		h.c = cc
	}
	if h.c == nil {
		t.Fatal("the dispatcher accepted no connection")
	}
	h.done = make([]byte, 0, 256)
	return h
}

var allocRequest = []byte("GET / HTTP/1.1\r\nHost: example.com\r\nUser-Agent: wrk\r\n\r\n")

// round is one kept-alive request as the dispatcher sees it: the connection
// turns readable, is dispatched, the worker serves it and sends Done, and
// the dispatcher re-parks it.
func (h *allocLoop) round() {
	d, c := h.d, h.c
	now := time.Now()
	if _, err := unix.Write(h.client, allocRequest); err != nil {
		h.t.Fatal(err)
	}
	d.connEvent(c, poll.Event{Readable: true}, now)
	d.flushSends()
	if c.state != stateAtWorker {
		h.t.Fatalf("connection %s after a complete head, want at_worker", c.state)
	}
	// The worker's side: the Dispatch and its descriptor, the request read
	// from it, the descriptor closed, Done sent.
	n, oobn, err := recvmsgRaw(h.peer, h.rbuf, h.oob)
	if err != nil || n == 0 || oobn < unix.CmsgLen(4) {
		h.t.Fatalf("no Dispatch with a descriptor: %d bytes, %d of control, %v", n, oobn, err)
	}
	b := h.oob[unix.CmsgLen(0):]
	fd := int(int32(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24))
	unix.Read(fd, h.rbuf)
	unix.Close(fd)
	if err := unix.Sendmsg(h.peer, h.doneFrame(c.id, c.requests+1), nil, nil, 0); err != nil {
		h.t.Fatal(err)
	}
	d.workerEvent(h.w.token(), poll.Event{Readable: true}, now)
	if c.state != stateIdle || d.out != 0 {
		h.t.Fatalf("connection %s with %d out after Done, want idle and none out", c.state, d.out)
	}
}

// doneFrame encodes the worker's Done for one served request into h.done
// (a Frame with field 5, Done: conn_id 1, disposition 2 = KEEP_ALIVE,
// requests 4, responses 7 = one Response{status 200, micros 50}).
func (h *allocLoop) doneFrame(id uint64, requests uint32) []byte {
	var resp [16]byte
	r := protowire.AppendTag(resp[:0], 1, protowire.VarintType)
	r = protowire.AppendVarint(r, 200)
	r = protowire.AppendTag(r, 2, protowire.VarintType)
	r = protowire.AppendVarint(r, 50)
	var body [64]byte
	b := protowire.AppendTag(body[:0], 1, protowire.VarintType)
	b = protowire.AppendVarint(b, id)
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(proto.Disposition_KEEP_ALIVE))
	b = protowire.AppendTag(b, 4, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(requests))
	b = protowire.AppendTag(b, 7, protowire.BytesType)
	b = protowire.AppendBytes(b, r)
	f := protowire.AppendTag(h.done[:0], 5, protowire.BytesType)
	h.done = protowire.AppendBytes(f, b)
	return h.done
}

// TestDispatchAllocs: the dispatcher's round for a kept-alive connection
// (peek at a complete head, dispatch with the descriptor, Done, re-park)
// makes no heap allocation once warm: frames are encoded into and decoded
// from reused buffers and messages (docs/DESIGN.md §4).
func TestDispatchAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	h := startAllocLoop(t)
	for i := 0; i < 3; i++ {
		h.round()
	}
	if allocs := testing.AllocsPerRun(200, h.round); allocs != 0 {
		t.Errorf("%.1f allocations per dispatched round, want 0", allocs)
	}
	if h.c.requests < 200 {
		t.Errorf("the connection counts %d requests after 200 rounds and more", h.c.requests)
	}
}

// recvmsgRaw is recvmsg(2) without decoding the sender's address, which
// unix.Recvmsg allocates.
func recvmsgRaw(fd int, p, oob []byte) (n, oobn int, err error) {
	iov := unix.Iovec{Base: &p[0]}
	iov.SetLen(len(p))
	msg := unix.Msghdr{Iov: &iov, Control: &oob[0]}
	msg.SetIovlen(1)
	msg.SetControllen(len(oob))
	r, _, e := unix.Syscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), 0)
	for e == unix.EINTR { // the receive timeout makes it interruptible
		r, _, e = unix.Syscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), 0)
	}
	if e != 0 {
		return 0, 0, e
	}
	return int(r), int(msg.Controllen), nil
}
