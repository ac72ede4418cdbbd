//go:build unix

package ipc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/gatehouse-dev/gatehouse/internal/sysio"
	"github.com/gatehouse-dev/gatehouse/proto"
	"golang.org/x/sys/unix"
)

// Stream is the worker's end of the channel under the Go runtime's poller.
// Send is safe for concurrent use; Recv must be called from one goroutine.
type Stream struct {
	uc *net.UnixConn
	rc syscall.RawConn // the calls themselves: raw, non-blocking (recvmsg, sendmsg)

	// Recv's state: the datagrams one recvmmsg took (rn of them), handed
	// out one a call from rnext; recv is the poller's condition, made once.
	rbufs [recvBatch][]byte
	roobs [recvBatch][]byte
	rmm   [recvBatch]sysio.Mmsghdr
	riovs [recvBatch]unix.Iovec
	rn    int
	rnext int
	rerr  error
	fds   []int // descriptors of the last frame received, reused
	recv  func(uintptr) bool
	// closed is set by Close, which may run beside Recv.
	closed atomic.Bool

	mu   sync.Mutex // guards the send state and serialises sends
	wbuf []byte
	woob []byte
	werr error
	send func(uintptr) bool
}

// NewStream takes ownership of f, a SEQPACKET socket (the worker's fd 3).
func NewStream(f *os.File) (*Stream, error) {
	c, err := net.FileConn(f)
	f.Close() // FileConn made its own copy
	if err != nil {
		return nil, fmt.Errorf("ipc: wrapping channel: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("ipc: channel is a %T, not a unix socket", c)
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		uc.Close()
		return nil, fmt.Errorf("ipc: channel: %w", err)
	}
	s := &Stream{uc: uc, rc: rc, fds: make([]int, 0, oobFDs)}
	for i := range recvBatch {
		// Pages of a buffer are touched only as far as frames fill it.
		s.rbufs[i] = make([]byte, MaxFrameSize+1)
		s.roobs[i] = make([]byte, unix.CmsgSpace(oobFDs*4))
	}
	s.recv = func(fd uintptr) bool {
		for i := range s.rmm {
			iov := &s.riovs[i]
			iov.Base = &s.rbufs[i][0]
			iov.SetLen(len(s.rbufs[i]))
			h := &s.rmm[i]
			*h = sysio.Mmsghdr{}
			h.Hdr.Iov = iov
			h.Hdr.SetIovlen(1)
			h.Hdr.Control = &s.roobs[i][0]
			h.Hdr.SetControllen(len(s.roobs[i]))
		}
		s.rn, s.rerr = sysio.Recvmmsg(int(fd), s.rmm[:], unix.MSG_CMSG_CLOEXEC)
		s.rnext = 0
		return s.rerr != unix.EAGAIN && s.rerr != unix.EINTR
	}
	s.send = func(fd uintptr) bool {
		s.werr = sysio.Sendmsg(int(fd), s.wbuf, s.woob, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
		return s.werr != unix.EAGAIN && s.werr != unix.EINTR
	}
	return s, nil
}

// recvBatch is the most frames Recv takes in one recvmmsg(2), at either
// end: a worker reads the Dispatches the supervisor sent in one batch with
// one call, and the supervisor the Done frames a worker sent meanwhile.
const recvBatch = 8

// Close closes the channel. It may be called while Recv runs: the next Recv
// returns ErrClosed, closing the descriptors of the frames it took and had
// not handed out.
func (s *Stream) Close() error {
	s.closed.Store(true)
	return s.uc.Close()
}

// Send writes one frame with fd attached when fd >= 0; it never closes fd.
func (s *Stream) Send(f *proto.Frame, fd int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := Marshal(s.wbuf, f)
	if err != nil {
		return err
	}
	s.wbuf, s.woob = b, nil
	if fd >= 0 {
		s.woob = unix.UnixRights(fd)
	}
	err = s.rc.Write(s.send)
	if err == nil {
		err = s.werr
	}
	if err != nil {
		if errors.Is(err, unix.EPIPE) || errors.Is(err, unix.ECONNRESET) {
			return ErrClosed
		}
		return fmt.Errorf("ipc: sending frame: %w", err)
	}
	return nil
}

// Recv blocks for one frame, decoded into f (empty: new, or emptied by
// Reset), and returns its descriptor or -1. The caller owns
// a returned descriptor; on error any received descriptor is already closed.
// Received descriptors are close-on-exec (MSG_CMSG_CLOEXEC).
func (s *Stream) Recv(f *proto.Frame) (int, error) {
	if s.closed.Load() {
		for ; s.rnext < s.rn; s.rnext++ {
			h := &s.rmm[s.rnext].Hdr
			closeAll(parseRights(s.fds[:0], s.roobs[s.rnext][:h.Controllen]))
		}
		return -1, ErrClosed
	}
	if s.rnext >= s.rn {
		err := s.rc.Read(s.recv)
		if err == nil {
			err = s.rerr
		}
		if err != nil {
			s.rn = 0
			if errors.Is(err, unix.ECONNRESET) {
				return -1, ErrClosed
			}
			return -1, fmt.Errorf("ipc: receiving frame: %w", err)
		}
	}
	i := s.rnext
	s.rnext++
	h := &s.rmm[i]
	n, flags := int(h.Len), int(h.Hdr.Flags)
	fds := parseRights(s.fds[:0], s.roobs[i][:h.Hdr.Controllen])
	if n == 0 && len(fds) == 0 && flags&unix.MSG_TRUNC == 0 {
		return -1, ErrClosed
	}
	return check(s.rbufs[i][:n], n, flags, fds, f)
}
