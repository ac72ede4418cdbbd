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

// doneFrame is a Done for connection id, encoded.
func doneFrame(t *testing.T, id uint64) []byte {
	return encode(t, &proto.Frame{Body: &proto.Frame_Done{Done: &proto.Done{ConnId: id, Disposition: proto.Disposition_CLOSE}}})
}

// TestRecvArena: Conns sharing an arena take the frames queued in one
// call each and hand them out in order; one whose arena holds another's
// frames receives alone, losing none; a Conn closed with frames still in
// the arena closes their descriptors; the peer's end is ErrClosed.
func TestRecvArena(t *testing.T) {
	arena := ipc.NewRecvArena()
	fds := rawSocketpair(t)
	if err := unix.SetNonblock(fds[1], true); err != nil {
		t.Fatal(err)
	}
	a, pa := ipc.NewConn(fds[1]), fds[0]
	defer unix.Close(pa)
	b, pb := hostileConn(t)
	a.UseArena(arena)
	b.UseArena(arena)
	for id := uint64(1); id <= 3; id++ {
		if err := sendRaw(pa, doneFrame(t, id), nil); err != nil {
			t.Fatal(err)
		}
	}
	for id := uint64(11); id <= 12; id++ {
		if err := sendRaw(pb, doneFrame(t, id), nil); err != nil {
			t.Fatal(err)
		}
	}
	var f proto.Frame
	recv := func(c *ipc.Conn, want uint64) {
		t.Helper()
		ipc.Reset(&f)
		if _, err := c.Recv(&f); err != nil || f.GetDone().GetConnId() != want {
			t.Fatalf("Recv: connection %d, %v; want %d", f.GetDone().GetConnId(), err, want)
		}
	}
	recv(a, 1)
	if n := a.Buffered(); n != 2 {
		t.Fatalf("a holds %d frames after its first, want 2", n)
	}
	recv(b, 11) // alone: a's frames stay
	recv(a, 2)
	recv(a, 3)
	if a.Buffered() != 0 {
		t.Fatal("a holds frames after its last")
	}
	recv(b, 12)
	if _, err := a.Recv(&f); !errors.Is(err, ipc.ErrWouldBlock) {
		t.Fatalf("Recv on an empty channel: %v, want ErrWouldBlock", err)
	}

	// Descriptors left in the arena are closed with their Conn.
	r, _ := pipeFDs(t)
	for range 3 {
		if err := sendRaw(pa, encode(t, &proto.Frame{Body: &proto.Frame_AccessLog{AccessLog: &proto.AccessLog{}}}), rights([]int{r}, false)); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := a.Recv(&f)
	if err != nil || fd < 0 || a.Buffered() != 2 {
		t.Fatalf("Recv: descriptor %d, %v, %d buffered; want one, 2 buffered", fd, err, a.Buffered())
	}
	unix.Close(fd)
	open := len(openFDs(t))
	a.Close()
	if n := len(openFDs(t)); n != open-3 {
		t.Fatalf("%d descriptors open after closing a Conn holding two in its arena, want %d", n, open-3)
	}

	// b receives into the arena again, and sees its peer's end.
	if err := sendRaw(pb, doneFrame(t, 13), nil); err != nil {
		t.Fatal(err)
	}
	recv(b, 13)
	unix.Shutdown(pb, unix.SHUT_WR)
	if _, err := b.Recv(&f); !errors.Is(err, ipc.ErrClosed) {
		t.Fatalf("Recv after the peer's end: %v, want ErrClosed", err)
	}
}
