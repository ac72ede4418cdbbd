//go:build linux

package ipc_test

import (
	"errors"
	"testing"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"golang.org/x/sys/unix"
)

// TestSendBatch: the frames of a batch arrive in order, each with its own
// descriptor or none, as separate frames; a full channel takes part of a
// batch and then none (ErrWouldBlock).
func TestSendBatch(t *testing.T) {
	c, s, _, _ := newPair(t)
	r, w := pipeFDs(t)
	var outs []ipc.Out
	for i := range 5 {
		fd := -1
		if i%2 == 0 {
			fd = r
		}
		f := &proto.Frame{Body: &proto.Frame_Dispatch{Dispatch: &proto.Dispatch{ConnId: uint64(i + 1), HasFd: fd >= 0}}}
		outs = append(outs, ipc.Out{B: encode(t, f), FD: fd})
	}
	n, err := c.SendBatch(outs)
	if n != len(outs) || err != nil {
		t.Fatalf("SendBatch sent %d of %d: %v", n, len(outs), err)
	}
	for i := range outs {
		var f proto.Frame
		fd, err := s.Recv(&f)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if got := f.GetDispatch().GetConnId(); got != uint64(i+1) || (fd >= 0) != (i%2 == 0) {
			t.Fatalf("frame %d: connection %d, descriptor %d", i, got, fd)
		}
		if fd >= 0 {
			// The descriptor is the pipe's read end: what w writes reads.
			if _, err := unix.Write(w, []byte("x")); err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 1)
			if n, err := unix.Read(fd, b); n != 1 || err != nil || b[0] != 'x' {
				t.Fatalf("frame %d's descriptor reads %q, %v", i, b[:n], err)
			}
			unix.Close(fd)
		}
	}
	// Fill the channel: the last call takes only part, the next none.
	big := encode(t, helloOfSize(t, 60<<10))
	fill := make([]ipc.Out, ipc.MaxBatch)
	for i := range fill {
		fill[i] = ipc.Out{B: big, FD: -1}
	}
	sent, partial := 0, false
	for range 1000 {
		n, err := c.SendBatch(fill)
		if errors.Is(err, ipc.ErrWouldBlock) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if n < len(fill) {
			partial = true
		}
		sent += n
	}
	if sent == 0 || !partial {
		t.Fatalf("a full channel: %d frames sent, a partial batch %v; want some, and a partial one", sent, partial)
	}
}

// TestStreamBatchClose: the worker's Stream takes queued frames several a
// call and hands them out in order, a frame a Recv; once it is closed, Recv
// says so and closes the descriptors of those it had not handed out.
func TestStreamBatchClose(t *testing.T) {
	c, s, _, closeStream := newPair(t)
	r, _ := pipeFDs(t)
	const frames = 6
	var outs []ipc.Out
	for i := range frames {
		f := &proto.Frame{Body: &proto.Frame_Dispatch{Dispatch: &proto.Dispatch{ConnId: uint64(i + 1), HasFd: true}}}
		outs = append(outs, ipc.Out{B: encode(t, f), FD: r})
	}
	if n, err := c.SendBatch(outs); n != frames || err != nil {
		t.Fatalf("SendBatch sent %d of %d: %v", n, frames, err)
	}
	var f proto.Frame
	fd, err := s.Recv(&f)
	if err != nil || f.GetDispatch().GetConnId() != 1 || fd < 0 {
		t.Fatalf("first frame: %v, fd %d, %v", f.Body, fd, err)
	}
	unix.Close(fd)
	before := len(openFDs(t))
	if err := closeStream(); err != nil {
		t.Fatal(err)
	}
	if fd, err := s.Recv(&f); err != ipc.ErrClosed || fd >= 0 {
		t.Fatalf("Recv after Close: fd %d, %v; want ErrClosed", fd, err)
	}
	// The channel and the five descriptors not handed out are gone.
	if after := len(openFDs(t)); after != before-frames {
		t.Errorf("%d descriptors open after Close and Recv, want %d (%d before)", after, before-frames, before)
	}
}
