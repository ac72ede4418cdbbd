//go:build unix

package ipc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
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

	// Recv's state; recv is the poller's condition, made once.
	rbuf              []byte
	oob               []byte
	fds               []int // descriptors of the last frame received, reused
	rn, roobn, rflags int
	rerr              error
	recv              func(uintptr) bool

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
	s := &Stream{
		uc:   uc,
		rc:   rc,
		rbuf: make([]byte, MaxFrameSize+1),
		oob:  make([]byte, unix.CmsgSpace(oobFDs*4)),
		fds:  make([]int, 0, oobFDs),
	}
	s.recv = func(fd uintptr) bool {
		s.rn, s.roobn, s.rflags, s.rerr = sysio.Recvmsg(int(fd), s.rbuf, s.oob, unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
		return s.rerr != unix.EAGAIN && s.rerr != unix.EINTR
	}
	s.send = func(fd uintptr) bool {
		s.werr = sysio.Sendmsg(int(fd), s.wbuf, s.woob, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
		return s.werr != unix.EAGAIN && s.werr != unix.EINTR
	}
	return s, nil
}

// Close closes the channel.
func (s *Stream) Close() error { return s.uc.Close() }

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
	err := s.rc.Read(s.recv)
	if err == nil {
		err = s.rerr
	}
	n, oobn, flags := s.rn, s.roobn, s.rflags
	if err != nil {
		oobn = 0
	}
	fds := parseRights(s.fds[:0], s.oob[:oobn])
	if err != nil {
		if errors.Is(err, unix.ECONNRESET) {
			return -1, ErrClosed
		}
		return -1, fmt.Errorf("ipc: receiving frame: %w", err)
	}
	if n == 0 && len(fds) == 0 && flags&unix.MSG_TRUNC == 0 {
		return -1, ErrClosed
	}
	return check(s.rbuf[:n], n, flags, fds, f)
}
