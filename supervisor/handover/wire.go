// Package handover moves a running gatehouse to a new binary (docs/DESIGN.md
// §11): the old supervisor starts the new one with one end of a socketpair,
// and over it passes its listeners, its admin socket, its parked connections
// and its per-client limits, as Handover frames (proto/handover.proto) with
// the descriptors in the same datagram (SCM_RIGHTS).
//
// This package is the wire and the two processes' ends of it (Outbound in
// the old supervisor, Inbound in the new one); what moves is decided by the
// supervisor's loop, which it never calls.
package handover

import (
	"errors"
	"fmt"
	"io"

	"github.com/gatehouse-dev/gatehouse/proto"
	"golang.org/x/sys/unix"
	protobuf "google.golang.org/protobuf/proto"
)

// Format is the hand-over format this binary writes and reads. A change
// that an older or newer binary would misread takes a new number: the
// receiver then refuses, and the old supervisor keeps serving.
const Format = 1

// MaxBatch is the most descriptors one datagram carries (the kernel's
// SCM_MAX_FD is 253).
const MaxBatch = 200

// batchBytes bounds the encoded size of a batch of connections, far below
// the socket's buffer (sockBuf), which bounds one datagram.
const batchBytes = 256 << 10

const (
	sockBuf     = 4 << 20
	maxDatagram = sockBuf
)

// ErrFormat is a frame in a format this binary does not read.
var ErrFormat = errors.New("handover: unsupported format")

// sock is one end of the hand-over socketpair (SOCK_SEQPACKET, blocking).
type sock struct{ fd int }

// Pair makes the hand-over socketpair: the old supervisor's end and the
// new one's, which it passes as fd 3.
func Pair() (parent, child int, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("handover: socketpair: %w", err)
	}
	for _, fd := range fds {
		setBuffers(fd, sockBuf)
	}
	return fds[0], fds[1], nil
}

// send writes m with fds in one datagram. It does not take the fds.
func (s *sock) send(m *proto.Handover, fds []int) error {
	m.Format = Format
	b, err := protobuf.Marshal(m)
	if err != nil {
		return err
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	for {
		err = unix.Sendmsg(s.fd, b, oob, nil, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("handover: send: %w", err)
	}
	return nil
}

// recv reads one datagram: io.EOF once the other end closed. The
// descriptors it returns are the caller's, also with an error from
// decoding (ErrFormat among them), which closes them.
func (s *sock) recv(buf, oob []byte) (*proto.Handover, []int, error) {
	var n, oobn, flags int
	var err error
	for {
		n, oobn, flags, _, err = unix.Recvmsg(s.fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("handover: receive: %w", err)
	}
	var fds []int
	if oobn > 0 {
		msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
		if perr == nil {
			for _, cm := range msgs {
				r, rerr := unix.ParseUnixRights(&cm)
				if rerr == nil {
					fds = append(fds, r...)
				}
			}
		}
	}
	fail := func(err error) (*proto.Handover, []int, error) {
		closeAll(fds)
		return nil, nil, err
	}
	if n == 0 && oobn == 0 {
		return nil, nil, io.EOF
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		return fail(errors.New("handover: datagram truncated"))
	}
	m := &proto.Handover{}
	if err := protobuf.Unmarshal(buf[:n], m); err != nil {
		return fail(fmt.Errorf("handover: decoding: %w", err))
	}
	if m.GetFormat() != Format {
		return fail(fmt.Errorf("%w %d (this binary reads format %d)", ErrFormat, m.GetFormat(), Format))
	}
	return m, fds, nil
}

func (s *sock) close() { unix.Close(s.fd) }

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// recvBufs are the buffers one receiving goroutine reuses.
func recvBufs() (buf, oob []byte) {
	return make([]byte, maxDatagram), make([]byte, unix.CmsgSpace(4*(MaxBatch+16)))
}
