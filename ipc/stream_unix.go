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

	// Recv's state: the datagrams one recvmmsg took; recv is the poller's
	// condition, made once.
	rb   batch
	rerr error
	fds  []int // descriptors of the last frame received, reused
	recv func(uintptr) bool
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
	s.rb.init()
	s.recv = func(fd uintptr) bool {
		s.rb.n, s.rerr = sysio.Recvmmsg(int(fd), s.rb.prepare(), unix.MSG_CMSG_CLOEXEC)
		return s.rerr != unix.EAGAIN && s.rerr != unix.EINTR
	}
	s.send = func(fd uintptr) bool {
		s.werr = sysio.Sendmsg(int(fd), s.wbuf, s.woob, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
		return s.werr != unix.EAGAIN && s.werr != unix.EINTR
	}
	return s, nil
}

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
		s.rb.closeHeld(s.fds[:0])
		return -1, ErrClosed
	}
	if !s.rb.held() {
		err := s.rc.Read(s.recv)
		if err == nil {
			err = s.rerr
		}
		if err != nil {
			s.rb.n = 0
			if errors.Is(err, unix.ECONNRESET) {
				return -1, ErrClosed
			}
			return -1, fmt.Errorf("ipc: receiving frame: %w", err)
		}
	}
	return s.rb.take(s.fds[:0], f)
}
