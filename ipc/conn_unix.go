//go:build unix

package ipc

import (
	"encoding/binary"
	"os"

	"github.com/gatehouse-dev/gatehouse/internal/sysio"
	"github.com/gatehouse-dev/gatehouse/proto"
	"golang.org/x/sys/unix"
)

// Conn is a non-blocking SEQPACKET endpoint on a raw descriptor, for use from
// one goroutine (the dispatcher). It is not safe for concurrent use.
type Conn struct {
	fd     int // owned; immutable until Close
	wbuf   []byte
	rights []byte // an SCM_RIGHTS message for one descriptor, reused
	fds    []int  // descriptors of the last frame received, reused

	// SendBatch's messages, their buffers and descriptors' control
	// messages (one SCM_RIGHTS message for one descriptor each), made at
	// its first call and reused.
	mm    []sysio.Mmsghdr
	iovs  []unix.Iovec
	cmsgs []byte

	// Recv's batch, made at the first Recv; rfull says its last receive
	// filled it, so more may be queued.
	rb    batch
	rfull bool
}

// MaxBatch is the most frames one SendBatch call sends.
const MaxBatch = 16

// Out is one frame of a batch: its encoding, and the descriptor to attach
// (-1 for none), which the sender keeps.
type Out struct {
	B  []byte
	FD int
}

// Pair creates a socketpair. The returned Conn (non-blocking) is the
// supervisor's end; the *os.File is the worker's end, to be passed as fd 3,
// and the caller owns and closes it after starting the worker.
func Pair() (*Conn, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, os.NewSyscallError("socketpair", err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, os.NewSyscallError("fcntl", err)
	}
	return NewConn(fds[0]), os.NewFile(uintptr(fds[1]), "ipc"), nil
}

// NewConn takes ownership of fd, which must be a non-blocking SEQPACKET socket.
func NewConn(fd int) *Conn {
	return &Conn{
		fd:     fd,
		rights: unix.UnixRights(0),
		fds:    make([]int, 0, oobFDs),
	}
}

// FD returns the descriptor, for registering with epoll. Conn keeps ownership.
func (c *Conn) FD() int { return c.fd }

// Close closes the descriptor and the descriptors of received frames not
// yet handed out.
func (c *Conn) Close() error {
	c.rb.closeHeld(c.fds[:0])
	c.rfull = false
	return unix.Close(c.fd)
}

// Send writes one frame, with fd attached when fd >= 0. Send never closes fd:
// the caller keeps its copy (the supervisor keeps every connection it hands
// out). It returns ErrWouldBlock when the socket buffer is full.
func (c *Conn) Send(f *proto.Frame, fd int) error {
	b, err := Marshal(c.wbuf, f)
	if err != nil {
		return err
	}
	c.wbuf = b
	return c.SendEncoded(b, fd)
}

// SendEncoded is Send for a frame already encoded (by Marshal or a
// DispatchEncoder).
func (c *Conn) SendEncoded(b []byte, fd int) error {
	var oob []byte
	if fd >= 0 {
		// One descriptor: the data of the message made for fd 0 at
		// NewConn, rewritten, as unix.UnixRights would allocate anew.
		binary.NativeEndian.PutUint32(c.rights[unix.CmsgLen(0):], uint32(int32(fd)))
		oob = c.rights
	}
	var err error
	for {
		err = sysio.Sendmsg(c.fd, b, oob, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
		if err != unix.EINTR {
			break
		}
	}
	switch err {
	case nil:
		return nil
	case unix.EAGAIN:
		return ErrWouldBlock
	case unix.EPIPE, unix.ECONNRESET:
		return ErrClosed
	}
	return os.NewSyscallError("sendmsg", err)
}

// SendBatch writes the first frames of out (at most MaxBatch), in order,
// in one sendmmsg(2) where the system has it: as many as the socket takes.
// It returns how many it sent, at least one, or ErrWouldBlock when the
// socket took none, or ErrTryLater when the kernel took none for now. Like
// Send, it never closes a descriptor.
func (c *Conn) SendBatch(out []Out) (int, error) {
	out = out[:min(len(out), MaxBatch)]
	space := unix.CmsgSpace(4)
	if c.mm == nil {
		c.mm = make([]sysio.Mmsghdr, MaxBatch)
		c.iovs = make([]unix.Iovec, MaxBatch)
		c.cmsgs = make([]byte, 0, MaxBatch*space)
		for range MaxBatch {
			c.cmsgs = append(c.cmsgs, unix.UnixRights(0)...)
		}
	}
	for i, o := range out {
		m, iov := &c.mm[i], &c.iovs[i]
		*m = sysio.Mmsghdr{}
		iov.Base, iov.Len = nil, 0
		if len(o.B) > 0 {
			iov.Base = &o.B[0]
			iov.SetLen(len(o.B))
		}
		m.Hdr.Iov = iov
		m.Hdr.SetIovlen(1)
		if o.FD >= 0 {
			cm := c.cmsgs[i*space : (i+1)*space]
			binary.NativeEndian.PutUint32(cm[unix.CmsgLen(0):], uint32(int32(o.FD)))
			m.Hdr.Control = &cm[0]
			m.Hdr.SetControllen(space)
		}
	}
	var n int
	var err error
	for {
		n, err = sysio.Sendmmsg(c.fd, c.mm[:len(out)], unix.MSG_NOSIGNAL)
		if err != unix.EINTR {
			break
		}
	}
	switch err {
	case nil:
		return n, nil
	case unix.EAGAIN:
		return 0, ErrWouldBlock
	case unix.EPIPE, unix.ECONNRESET:
		return 0, ErrClosed
	case unix.ETOOMANYREFS, unix.ENOBUFS, unix.ENOMEM:
		return 0, ErrTryLater
	}
	return 0, os.NewSyscallError("sendmmsg", err)
}

// Recv reads one frame into f, which must be empty: new, or emptied by Reset. It returns the attached descriptor, or -1.
// The caller owns a returned descriptor. On every error, any descriptor that
// arrived has already been closed. A *FrameError is the peer's fault.
//
// Recv takes the datagrams queued, up to recvBatch, in one recvmmsg(2) and
// hands them out a call; Pending says whether it holds more.
func (c *Conn) Recv(f *proto.Frame) (int, error) {
	if !c.rb.held() {
		if err := c.receive(); err != nil {
			switch err {
			case unix.EAGAIN:
				return -1, ErrWouldBlock
			case unix.ECONNRESET:
				return -1, ErrClosed
			}
			return -1, os.NewSyscallError("recvmmsg", err)
		}
	}
	return c.rb.take(c.fds[:0], f)
}

// Pending reports whether Recv may return a frame at once: frames of the
// last receive are held, or it filled the batch and more may be queued.
// After the last frame of a receive that emptied the queue it is false, and
// a caller whose poller is level-triggered waits for readiness instead of
// calling Recv to find the socket empty.
func (c *Conn) Pending() bool { return c.Held() || c.rfull }

// Held reports whether Recv holds frames it has received and not handed
// out: they are the caller's to take (or Close), as no readiness of the
// socket will announce them.
func (c *Conn) Held() bool { return c.rb.held() }

// receive takes the datagrams queued into the batch.
func (c *Conn) receive() error {
	c.rfull = false
	if c.rb.mm == nil {
		c.rb.init()
	}
	mm := c.rb.prepare()
	var n int
	var err error
	for {
		n, err = sysio.Recvmmsg(c.fd, mm, unix.MSG_CMSG_CLOEXEC)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return err
	}
	c.rb.n, c.rfull = n, n == len(mm)
	return nil
}

// check validates a received datagram. It closes every descriptor on error.
func check(b []byte, n, flags int, fds []int, f *proto.Frame) (int, error) {
	fail := func(err error) (int, error) {
		closeAll(fds)
		return -1, err
	}
	switch {
	case flags&unix.MSG_CTRUNC != 0:
		return fail(&FrameError{Reason: "control data truncated", Size: n, FDs: len(fds)})
	case flags&unix.MSG_TRUNC != 0 || n > MaxFrameSize:
		return fail(&FrameError{Reason: "frame over the size cap", Size: n, FDs: len(fds)})
	case len(fds) > maxFDsPerFrame:
		return fail(&FrameError{Reason: "too many descriptors", Size: n, FDs: len(fds)})
	}
	if err := decode(b, len(fds), f); err != nil {
		return fail(err)
	}
	if len(fds) == 1 {
		return fds[0], nil
	}
	return -1, nil
}

// parseRights appends every descriptor in every SCM_RIGHTS message of oob to
// fds.
func parseRights(fds []int, oob []byte) []int {
	for len(oob) > 0 {
		h, data, rest, err := unix.ParseOneSocketControlMessage(oob)
		if err != nil {
			break
		}
		if h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_RIGHTS {
			for i := 0; i+4 <= len(data); i += 4 {
				fds = append(fds, int(int32(uint32(data[i])|uint32(data[i+1])<<8|uint32(data[i+2])<<16|uint32(data[i+3])<<24)))
			}
		}
		oob = rest
	}
	return fds
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
