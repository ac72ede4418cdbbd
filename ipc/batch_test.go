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

// TestConnRecvBatch: the supervisor's Conn takes the queued frames in one
// receive and hands them out in order; Pending is true while it holds some,
// and after a receive that filled its batch, false once a receive found the
// queue emptied; frames sent meanwhile are received by the next Recv. Close
// closes the descriptors of the frames it held.
func TestConnRecvBatch(t *testing.T) {
	c, s, closeConn, _ := newPair(t)
	r, _ := pipeFDs(t)
	send := func(first, n int) {
		t.Helper()
		for i := range n {
			f := &proto.Frame{Body: &proto.Frame_Dispatch{Dispatch: &proto.Dispatch{ConnId: uint64(first + i), HasFd: true}}}
			if err := s.Send(f, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	recv := func(want uint64) {
		t.Helper()
		var f proto.Frame
		fd, err := c.Recv(&f)
		if err != nil || f.GetDispatch().GetConnId() != want || fd < 0 {
			t.Fatalf("frame %d: %v, fd %d, %v", want, f.Body, fd, err)
		}
		unix.Close(fd)
	}
	if c.Pending() {
		t.Fatal("Pending before any receive")
	}
	// Three queued: one receive, Pending until the third is handed out.
	send(1, 3)
	for id := uint64(1); id <= 3; id++ {
		recv(id)
		if got, want := c.Pending(), id < 3; got != want || c.Held() != want {
			t.Fatalf("after frame %d: Pending %v, Held %v, want %v", id, got, c.Held(), want)
		}
	}
	// More than a batch: Pending stays true past the batch's last frame,
	// as the queue may hold more.
	send(4, 12)
	for id := uint64(4); id <= 15; id++ {
		if !c.Pending() && id != 4 {
			t.Fatalf("before frame %d: Pending false with frames queued", id)
		}
		recv(id)
		if id == 11 && c.Held() {
			t.Fatal("Held after the last frame of a full batch")
		}
	}
	if c.Pending() {
		t.Fatal("Pending after the queue was emptied by a short receive")
	}
	var f proto.Frame
	if _, err := c.Recv(&f); err != ipc.ErrWouldBlock {
		t.Fatalf("Recv on an empty channel: %v, want ErrWouldBlock", err)
	}
	// Held frames' descriptors are closed with the channel.
	send(16, 4)
	recv(16)
	before := len(openFDs(t))
	if err := closeConn(); err != nil {
		t.Fatal(err)
	}
	if after := len(openFDs(t)); after != before-4 {
		t.Errorf("%d descriptors open after Close, want %d (%d before): the channel and 3 held", after, before-4, before)
	}
}
