//go:build unix

package ipc

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"

	"github.com/gatehouse-dev/gatehouse/proto"
	"golang.org/x/sys/unix"
)

// Stream is the worker's end of the channel under the Go runtime's poller.
// Send is safe for concurrent use; Recv must be called from one goroutine.
type Stream struct {
	uc   *net.UnixConn
	rbuf []byte
	oob  []byte
	fds  []int // descriptors of the last frame received, reused

	mu   sync.Mutex // guards wbuf and serialises sends
	wbuf []byte
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
	return &Stream{
		uc:   uc,
		rbuf: make([]byte, MaxFrameSize+1),
		oob:  make([]byte, unix.CmsgSpace(oobFDs*4)),
		fds:  make([]int, 0, oobFDs),
	}, nil
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
	s.wbuf = b
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	if _, _, err := s.uc.WriteMsgUnix(b, oob, nil); err != nil {
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
// The runtime's ReadMsgUnix sets MSG_CMSG_CLOEXEC on Linux.
func (s *Stream) Recv(f *proto.Frame) (int, error) {
	n, oobn, flags, _, err := s.uc.ReadMsgUnix(s.rbuf, s.oob)
	fds := parseRights(s.fds[:0], s.oob[:oobn])
	if err != nil && !(errors.Is(err, io.EOF) && len(fds) > 0) { // a 0-byte datagram with fds is a violation, not EOF
		closeAll(fds)
		if errors.Is(err, io.EOF) || errors.Is(err, unix.ECONNRESET) {
			return -1, ErrClosed
		}
		return -1, fmt.Errorf("ipc: receiving frame: %w", err)
	}
	if n == 0 && len(fds) == 0 && flags&unix.MSG_TRUNC == 0 {
		return -1, ErrClosed
	}
	return check(s.rbuf[:n], n, flags, fds, f)
}
