// Package ipc carries gatehouse frames between the supervisor and a worker
// over one AF_UNIX SOCK_SEQPACKET socketpair: one datagram is one protobuf
// Frame, and a descriptor travels in the datagram of the frame that names it.
//
// Conn is the supervisor's end: a raw non-blocking descriptor driven by the
// dispatcher's epoll loop. Stream is the worker's end: the same socket under
// the Go runtime's poller, safe for concurrent senders. See PROTOCOL.md.
package ipc

import (
	"errors"
	"fmt"

	"github.com/gatehouse-dev/gatehouse/proto"
	pb "google.golang.org/protobuf/proto"
)

// MaxFrameSize caps one encoded frame; a larger one is a protocol violation.
const MaxFrameSize = 64 << 10

// MaxCarried caps the carried bytes of a Dispatch or Done so that the frame,
// with its other fields, always fits under MaxFrameSize.
const MaxCarried = 60 << 10

// maxFDsPerFrame is the most descriptors any frame may carry. The receive
// buffer has room for more so that an excess is seen (and closed), not
// silently truncated by the kernel.
const maxFDsPerFrame = 1

// oobSize holds 8 descriptors: enough to detect a sender that attaches more
// than one without MSG_CTRUNC hiding them.
const oobFDs = 8

var (
	// ErrWouldBlock reports that a non-blocking send or receive found the
	// socket full or empty.
	ErrWouldBlock = errors.New("ipc: would block")
	// ErrClosed reports that the peer closed its end.
	ErrClosed = errors.New("ipc: channel closed")
	// ErrTryLater reports that the kernel refused a send for now, with
	// nothing sent: the sender's account has more descriptors in flight
	// (sent, not yet received) than its descriptor limit (ETOOMANYREFS),
	// or the kernel was out of buffer memory. Neither is the channel's
	// fault, and the same send succeeds once that passes.
	ErrTryLater = errors.New("ipc: the kernel refused the send for now")
)

// FrameError is a protocol violation by the peer: a truncated, oversized or
// malformed frame, or descriptors where none (or another number) belong.
type FrameError struct {
	Reason string
	Size   int // bytes received, when relevant
	FDs    int // descriptors received
}

func (e *FrameError) Error() string {
	return fmt.Sprintf("ipc: protocol violation: %s (size %d, fds %d)", e.Reason, e.Size, e.FDs)
}

// Marshal appends f's encoding to buf[:0] and checks it against MaxFrameSize.
func Marshal(buf []byte, f *proto.Frame) ([]byte, error) {
	b, err := pb.MarshalOptions{}.MarshalAppend(buf[:0], f)
	if err != nil {
		return nil, fmt.Errorf("ipc: encoding frame: %w", err)
	}
	if len(b) > MaxFrameSize {
		return nil, fmt.Errorf("ipc: frame of %d bytes exceeds %d", len(b), MaxFrameSize)
	}
	return b, nil
}

// Reset empties f for the next Recv. A Done or Dispatch body, the frames
// of every round, stays allocated (a Done with its slices' capacity), so that
// decoding the next one of the same type into f allocates nothing but its
// strings and bytes; any other body is dropped.
func Reset(f *proto.Frame) {
	body := f.Body
	f.Reset()
	switch b := body.(type) {
	case *proto.Frame_Done:
		m := b.Done
		status, micros := m.ResponseStatus[:0], m.ResponseMicros[:0]
		m.Reset()
		m.ResponseStatus, m.ResponseMicros = status, micros
		f.Body = b
	case *proto.Frame_Dispatch:
		b.Dispatch.Reset()
		f.Body = b
	}
}

// decode parses a received datagram into f, which must be empty (new, or
// emptied by Reset: decoding merges into what f holds, to reuse it), and
// checks its descriptor count.
func decode(b []byte, nfds int, f *proto.Frame) error {
	if err := (pb.UnmarshalOptions{Merge: true, DiscardUnknown: true}).Unmarshal(b, f); err != nil {
		return &FrameError{Reason: "malformed frame: " + err.Error(), Size: len(b), FDs: nfds}
	}
	if f.Body == nil {
		return &FrameError{Reason: "frame without a body", Size: len(b), FDs: nfds}
	}
	if want := SpecOf(f).FDs(f); want != nfds {
		return &FrameError{Reason: fmt.Sprintf("%T carries %d descriptors, want %d", f.Body, nfds, want), Size: len(b), FDs: nfds}
	}
	return nil
}
