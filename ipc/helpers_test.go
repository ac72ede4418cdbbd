//go:build linux

package ipc_test

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"golang.org/x/sys/unix"
	pb "google.golang.org/protobuf/proto"
)

// receiver and sender are what Conn and Stream have in common.
type receiver interface {
	Recv(*proto.Frame) (int, error)
}

type sender interface {
	Send(*proto.Frame, int) error
}

// openFDs lists the process's open descriptors, for leak checks.
func openFDs(tb testing.TB) []int {
	tb.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Skipf("cannot list descriptors: %v", err)
	}
	fds := make([]int, 0, len(ents))
	for _, e := range ents {
		// ReadDir's own descriptor is in the list and closed by now.
		if n, err := strconv.Atoi(e.Name()); err == nil && valid(n) {
			fds = append(fds, n)
		}
	}
	slices.Sort(fds)
	return fds
}

// checkFDs fails tb when the open descriptors differ from before, naming
// those that appeared (leaks) and those that vanished (closed by mistake).
func checkFDs(tb testing.TB, before []int) {
	tb.Helper()
	after := openFDs(tb)
	if slices.Equal(after, before) {
		return
	}
	var extra, gone []string
	for _, fd := range after {
		if !slices.Contains(before, fd) {
			target, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
			extra = append(extra, fmt.Sprintf("%d→%s", fd, target))
		}
	}
	for _, fd := range before {
		if !slices.Contains(after, fd) {
			gone = append(gone, strconv.Itoa(fd))
		}
	}
	tb.Errorf("descriptors: got %d open, want %d (new: %v, closed: %v)", len(after), len(before), extra, gone)
}

// closeOnce wraps a close so that a test may close early and Cleanup may
// close again without closing a reused descriptor number.
func closeOnce(f func() error) func() error {
	var once sync.Once
	var err error
	return func() error {
		once.Do(func() { err = f() })
		return err
	}
}

// newPair returns the supervisor's Conn and the worker's Stream over
// ipc.Pair, both closed at Cleanup. The returned funcs close them early.
func newPair(tb testing.TB) (c *ipc.Conn, s *ipc.Stream, closeConn, closeStream func() error) {
	tb.Helper()
	c, f, err := ipc.Pair()
	if err != nil {
		tb.Fatalf("Pair: %v", err)
	}
	closeConn = closeOnce(c.Close)
	tb.Cleanup(func() { closeConn() })
	s, err = ipc.NewStream(f)
	if err != nil {
		tb.Fatalf("NewStream: %v", err)
	}
	closeStream = closeOnce(s.Close)
	tb.Cleanup(func() { closeStream() })
	return c, s, closeConn, closeStream
}

// rawSocketpair returns a blocking SEQPACKET socketpair closed at Cleanup.
func rawSocketpair(tb testing.TB) [2]int {
	tb.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatalf("socketpair: %v", err)
	}
	return fds
}

// hostileConn returns a Conn and the raw descriptor of its peer, from which a
// test sends whatever a hostile worker could.
func hostileConn(tb testing.TB) (*ipc.Conn, int) {
	tb.Helper()
	fds := rawSocketpair(tb)
	if err := unix.SetNonblock(fds[1], true); err != nil {
		tb.Fatalf("nonblock: %v", err)
	}
	c := ipc.NewConn(fds[1])
	tb.Cleanup(func() {
		c.Close()
		unix.Close(fds[0])
	})
	return c, fds[0]
}

// hostileStream returns a Stream and the raw descriptor of its peer, from
// which a test sends whatever a hostile (or buggy) supervisor could.
func hostileStream(tb testing.TB) (*ipc.Stream, int) {
	tb.Helper()
	fds := rawSocketpair(tb)
	s, err := ipc.NewStream(os.NewFile(uintptr(fds[1]), "worker"))
	if err != nil {
		unix.Close(fds[0])
		tb.Fatalf("NewStream: %v", err)
	}
	tb.Cleanup(func() {
		s.Close()
		unix.Close(fds[0])
	})
	return s, fds[0]
}

// pipeFDs returns a pipe's raw read and write ends, closed at Cleanup.
func pipeFDs(tb testing.TB) (r, w int) {
	tb.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		tb.Fatalf("pipe: %v", err)
	}
	tb.Cleanup(func() {
		unix.Close(p[0])
		unix.Close(p[1])
	})
	return p[0], p[1]
}

// tcpPair returns both ends of a loopback TCP connection, closed at Cleanup.
func tcpPair(tb testing.TB) (client, server net.Conn) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Skipf("no loopback TCP: %v", err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatalf("dial: %v", err)
	}
	tb.Cleanup(func() { client.Close() })
	server, err = ln.Accept()
	if err != nil {
		tb.Fatalf("accept: %v", err)
	}
	tb.Cleanup(func() { server.Close() })
	return client, server
}

// rawFD returns c's descriptor without the blocking-mode switch of File().Fd().
func rawFD(tb testing.TB, c net.Conn) int {
	tb.Helper()
	sc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		tb.Fatalf("SyscallConn: %v", err)
	}
	fd := -1
	if err := sc.Control(func(u uintptr) { fd = int(u) }); err != nil {
		tb.Fatalf("Control: %v", err)
	}
	return fd
}

// cloexec reports whether fd has FD_CLOEXEC set.
func cloexec(tb testing.TB, fd int) bool {
	tb.Helper()
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil {
		tb.Fatalf("F_GETFD on %d: %v", fd, err)
	}
	return fl&unix.FD_CLOEXEC != 0
}

// valid reports whether fd is an open descriptor.
func valid(fd int) bool {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	return err == nil
}

// encode marshals f without ipc.Marshal's cap, for hostile senders.
func encode(tb testing.TB, f *proto.Frame) []byte {
	tb.Helper()
	b, err := pb.Marshal(f)
	if err != nil {
		tb.Fatalf("marshal: %v", err)
	}
	return b
}

// helloOfSize returns a Hello frame whose encoding is exactly n bytes.
func helloOfSize(tb testing.TB, n int) *proto.Frame {
	tb.Helper()
	h := &proto.Hello{}
	f := &proto.Frame{Body: &proto.Frame_Hello{Hello: h}}
	for k := max(0, n-16); k <= n; k++ {
		h.Config = make([]byte, k)
		if pb.Size(f) == n {
			return f
		}
	}
	tb.Fatalf("no Hello encodes to %d bytes", n)
	return nil
}

// rights builds the control message for fds: one SCM_RIGHTS cmsg holding all
// of them, or one cmsg per descriptor when split is set.
func rights(fds []int, split bool) []byte {
	if len(fds) == 0 {
		return nil
	}
	if !split {
		return unix.UnixRights(fds...)
	}
	var oob []byte
	for _, fd := range fds {
		oob = append(oob, unix.UnixRights(fd)...)
	}
	return oob
}

// sendRaw sends one datagram of payload with oob from fd. Unlike
// unix.Sendmsg it sends an empty payload as is, without a dummy byte.
func sendRaw(fd int, payload, oob []byte) error {
	var iov unix.Iovec
	var msg unix.Msghdr
	if len(payload) > 0 {
		iov.Base = &payload[0]
		iov.SetLen(len(payload))
		msg.Iov = &iov
		msg.SetIovlen(1)
	}
	if len(oob) > 0 {
		msg.Control = &oob[0]
		msg.SetControllen(len(oob))
	}
	for {
		_, _, errno := unix.Syscall(unix.SYS_SENDMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), unix.MSG_NOSIGNAL)
		switch errno {
		case 0:
			return nil
		case unix.EINTR:
			continue
		}
		return errno
	}
}

// recvWait polls c until a frame (or an error other than ErrWouldBlock)
// arrives.
func recvWait(tb testing.TB, c *ipc.Conn, f *proto.Frame) (int, error) {
	for {
		fd, err := c.Recv(f)
		if err != ipc.ErrWouldBlock {
			return fd, err
		}
		pfd := []unix.PollFd{{Fd: int32(c.FD()), Events: unix.POLLIN}}
		if _, err := unix.Poll(pfd, 10_000); err != nil && err != unix.EINTR {
			tb.Fatalf("poll: %v", err)
		}
	}
}

// sendWait sends on c, polling for room while the socket is full.
func sendWait(tb testing.TB, c *ipc.Conn, f *proto.Frame, fd int) error {
	for {
		err := c.Send(f, fd)
		if err != ipc.ErrWouldBlock {
			return err
		}
		pfd := []unix.PollFd{{Fd: int32(c.FD()), Events: unix.POLLOUT}}
		if _, err := unix.Poll(pfd, 10_000); err != nil && err != unix.EINTR {
			tb.Fatalf("poll: %v", err)
		}
	}
}
