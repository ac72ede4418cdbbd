package handover

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"golang.org/x/sys/unix"
	protobuf "google.golang.org/protobuf/proto"
)

func pipeFDs(t *testing.T, n int) []int {
	t.Helper()
	var fds []int
	for i := 0; i < n; i++ {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		unix.Close(p[1])
		fds = append(fds, p[0])
	}
	t.Cleanup(func() { closeAll(fds) })
	return fds
}

// The listeners and the admin socket arrive with their names, in order.
func TestOpenReadsListeners(t *testing.T) {
	parent, child, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(parent)
	fds := pipeFDs(t, 3)
	s := sock{fd: parent}
	m := &proto.Handover{Body: &proto.Handover_Listeners{Listeners: &proto.HandoverListeners{Admin: true, Version: "old",
		Listeners: []*proto.HandoverListener{{Name: "http", Address: "127.0.0.1:80"}, {Name: "tls", Address: "[::1]:443"}}}}}
	if err := s.send(m, fds); err != nil {
		t.Fatal(err)
	}
	in, err := Open(child)
	if err != nil {
		t.Fatal(err)
	}
	defer in.s.close()
	if len(in.Listeners) != 2 || in.Listeners[0].Name != "http" || in.Listeners[1].Address != "[::1]:443" || in.AdminFD < 0 || in.OldVersion != "old" {
		t.Fatalf("got %+v", in)
	}
	for _, l := range in.Listeners {
		unix.Close(l.FD)
	}
	unix.Close(in.AdminFD)
}

// A frame in another format is refused: the new side tells the old one why
// and closes every descriptor it got.
func TestOpenRefusesAnotherFormat(t *testing.T) {
	parent, child, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(parent)
	b, err := protobuf.Marshal(&proto.Handover{Format: Format + 1, Body: &proto.Handover_Listeners{Listeners: &proto.HandoverListeners{}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Sendmsg(parent, b, unix.UnixRights(pipeFDs(t, 1)...), nil, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(child); !errors.Is(err, ErrFormat) {
		t.Fatalf("Open: %v, want ErrFormat", err)
	}
	unix.SetsockoptTimeval(parent, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
	buf, oob := recvBufs()
	m, fds, err := (&sock{fd: parent}).recv(buf, oob)
	if err != nil || len(fds) != 0 || !strings.Contains(m.GetFailed().GetReason(), "format") {
		t.Fatalf("old side got %v, %d descriptors, %v", m, len(fds), err)
	}
}

// Connections queued on an Outbound arrive in order with their
// descriptors, then the end of the bulk, then Closed.
func TestConnsArriveInOrder(t *testing.T) {
	parent, child, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	out := Attach(parent, 1, "new", nil)
	const n = MaxBatch + 50
	for i := 0; i < n; i++ {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		unix.Close(p[1])
		out.Add(&proto.HandedConn{Listener: "http", Requests: uint32(i)}, p[0])
	}
	out.Flush()
	out.Queue(BulkDoneFrame(n), nil)
	out.Close()
	in := Receive(child)
	got := make(chan any, 16)
	go in.Run(func(m any) { got <- m })
	next := 0
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-got:
			switch m := m.(type) {
			case Conns:
				for i, c := range m.Conns {
					if int(c.GetRequests()) != next {
						t.Fatalf("connection %d arrived as %d", c.GetRequests(), next)
					}
					next++
					unix.Close(m.FDs[i])
				}
			case BulkDone:
				if next != n {
					t.Fatalf("bulk done after %d of %d", next, n)
				}
			case Closed:
				if m.Err != nil || next != n {
					t.Fatalf("closed after %d of %d: %v", next, n, m.Err)
				}
				out.Wait()
				if sent, lost := out.Counts(); sent != n || lost != 0 {
					t.Fatalf("sent %d, lost %d", sent, lost)
				}
				return
			}
		case <-deadline:
			t.Fatalf("%d of %d connections arrived", next, n)
		}
	}
}

// A new binary that fails says why and exits: Begin reports its reason,
// even when it sees the exit first (its reason waits in the socket).
func TestBeginReportsFailureBeforeExit(t *testing.T) {
	for i := range 20 {
		exited := make(chan error, 1)
		launch := func(f *os.File) (Launched, error) {
			fd, err := unix.Dup(int(f.Fd()))
			if err != nil {
				return Launched{}, err
			}
			go func() {
				in, err := Open(fd)
				if err != nil {
					unix.Close(fd)
					exited <- err
					return
				}
				// The reason is sent, and the exit is seen at once.
				in.Fail("configuration: no_such_key")
				exited <- errors.New("exit status 2")
			}()
			return Launched{Exited: exited, Kill: func() {}}, nil
		}
		_, err := Begin(context.Background(), Start{AdminFD: -1, Timeout: 10 * time.Second, Launch: launch})
		if err == nil || !strings.Contains(err.Error(), "no_such_key") {
			t.Fatalf("try %d: Begin: %v, want the new binary's reason", i, err)
		}
	}
}
