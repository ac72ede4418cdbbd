//go:build linux

package ipc_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protowire"
	pb "google.golang.org/protobuf/proto"
)

// sampleFrames holds one frame of every type, none carrying a descriptor.
func sampleFrames() []struct {
	name string
	f    *proto.Frame
} {
	return []struct {
		name string
		f    *proto.Frame
	}{
		{"Hello", &proto.Frame{Id: 1, Body: &proto.Frame_Hello{Hello: &proto.Hello{
			WorkerId: 3, Config: []byte("workers { count = 4 }\n"), ConfigName: "/etc/gatehouse.hcl",
			Concurrency: 8, BaseDir: "/etc",
		}}}},
		{"Ready", &proto.Frame{Body: &proto.Frame_Ready{Ready: &proto.Ready{
			Pid: 4242, Layers: []*proto.SandboxLayer{
				{Name: "namespaces", Applied: true},
				{Name: "landlock", Applied: false, Detail: "ABI 0"},
			},
		}}}},
		{"Dispatch/affinity", &proto.Frame{Body: &proto.Frame_Dispatch{Dispatch: &proto.Dispatch{
			ConnId: 77, HasFd: false, Listener: 1, Peer: "[2001:db8::1]:5000", ClientKey: "2001:db8::/64",
			Carried: []byte("GET / HTTP/1.1\r\n\r\n"), Requests: 3, AcceptedUnixNano: 1_700_000_000_000_000_000,
		}}}},
		{"Done", &proto.Frame{Body: &proto.Frame_Done{Done: &proto.Done{
			ConnId: 77, Disposition: proto.Disposition_KEEP_ALIVE, Carried: []byte("GET /next"),
			Requests: 4, Outcome: proto.Outcome_OK,
		}}}},
		{"Done/linger", &proto.Frame{Body: &proto.Frame_Done{Done: &proto.Done{
			ConnId: math.MaxUint64, Disposition: proto.Disposition_LINGER, Requests: 1, Outcome: proto.Outcome_BAD_REQUEST,
		}}}},
		{"Ping", &proto.Frame{Body: &proto.Frame_Ping{Ping: &proto.Ping{Seq: 9}}}},
		{"Pong", &proto.Frame{Body: &proto.Frame_Pong{Pong: &proto.Pong{Seq: 9, Active: 5}}}},
		{"Drain", &proto.Frame{Body: &proto.Frame_Drain{Drain: &proto.Drain{}}}},
		{"Drain/zero", &proto.Frame{Id: 0, Body: &proto.Frame_Drain{Drain: &proto.Drain{}}}},
	}
}

// TestRoundTrip sends every frame type in both directions: the transport
// itself does not know who may send what (the supervisor and worker do).
func TestRoundTrip(t *testing.T) {
	c, s, _, _ := newPair(t)
	dirs := []struct {
		name string
		send sender
		recv receiver
	}{
		{"supervisor→worker", c, s},
		{"worker→supervisor", s, c},
	}
	for _, d := range dirs {
		for _, tt := range sampleFrames() {
			t.Run(d.name+"/"+tt.name, func(t *testing.T) {
				if err := d.send.Send(tt.f, -1); err != nil {
					t.Fatalf("Send: %v", err)
				}
				var got proto.Frame
				fd, err := d.recv.Recv(&got)
				if err != nil {
					t.Fatalf("Recv: %v", err)
				}
				if fd != -1 {
					unix.Close(fd)
					t.Errorf("Recv descriptor: got %d, want -1", fd)
				}
				if !pb.Equal(&got, tt.f) {
					t.Errorf("Recv frame:\ngot  %v\nwant %v", &got, tt.f)
				}
			})
		}
	}
}

// TestDispatchFD passes a descriptor with a Dispatch both ways and checks
// that it arrives working and close-on-exec, as a new descriptor, and that
// Send leaves the sender's copy open and working.
func TestDispatchFD(t *testing.T) {
	type endpoint struct {
		fd   int                 // the descriptor to pass
		peer func([]byte) []byte // reads len(b) bytes written to fd
		use  func([]byte) error  // writes through the sender's copy
	}
	kinds := []struct {
		name string
		make func(t *testing.T) endpoint
	}{
		{"pipe", func(t *testing.T) endpoint {
			r, w := pipeFDs(t)
			return endpoint{
				fd: w,
				peer: func(b []byte) []byte {
					got := make([]byte, len(b))
					n, _ := unix.Read(r, got)
					return got[:n]
				},
				use: func(b []byte) error { _, err := unix.Write(w, b); return err },
			}
		}},
		{"tcp", func(t *testing.T) endpoint {
			client, server := tcpPair(t)
			return endpoint{
				fd: rawFD(t, server),
				peer: func(b []byte) []byte {
					got := make([]byte, len(b))
					client.SetReadDeadline(time.Now().Add(10 * time.Second))
					n, _ := io.ReadFull(client, got)
					return got[:n]
				},
				use: func(b []byte) error { _, err := server.Write(b); return err },
			}
		}},
	}
	for _, kind := range kinds {
		for _, dir := range []string{"supervisor→worker", "worker→supervisor"} {
			t.Run(kind.name+"/"+dir, func(t *testing.T) {
				c, s, _, _ := newPair(t)
				var snd sender = c
				var rcv receiver = s
				if dir == "worker→supervisor" {
					snd, rcv = s, c
				}
				ep := kind.make(t)
				before := openFDs(t)

				want := &proto.Frame{Id: 12, Body: &proto.Frame_Dispatch{Dispatch: &proto.Dispatch{
					ConnId: 5, HasFd: true, Peer: "127.0.0.1:40000", ClientKey: "127.0.0.1",
				}}}
				if err := snd.Send(want, ep.fd); err != nil {
					t.Fatalf("Send: %v", err)
				}
				if !valid(ep.fd) {
					t.Fatalf("Send closed the sender's descriptor %d", ep.fd)
				}
				var got proto.Frame
				fd, err := rcv.Recv(&got)
				if err != nil {
					t.Fatalf("Recv: %v", err)
				}
				if !pb.Equal(&got, want) {
					t.Errorf("Recv frame:\ngot  %v\nwant %v", &got, want)
				}
				if fd < 0 {
					t.Fatalf("Recv descriptor: got %d, want one", fd)
				}
				if fd == ep.fd {
					t.Errorf("Recv descriptor: got the sender's number %d, want a new one", fd)
				}
				if !cloexec(t, fd) {
					t.Errorf("received descriptor %d: FD_CLOEXEC not set", fd)
				}
				msg := []byte("via the received descriptor\n")
				if _, err := unix.Write(fd, msg); err != nil {
					t.Fatalf("write to received descriptor: %v", err)
				}
				if got := ep.peer(msg); !bytes.Equal(got, msg) {
					t.Errorf("read through the connection: got %q, want %q", got, msg)
				}
				unix.Close(fd)

				msg = []byte("via the sender's copy\n")
				if err := ep.use(msg); err != nil {
					t.Fatalf("sender's copy after Send and close of received copy: %v", err)
				}
				if got := ep.peer(msg); !bytes.Equal(got, msg) {
					t.Errorf("read through the sender's copy: got %q, want %q", got, msg)
				}
				checkFDs(t, before)
			})
		}
	}
}

// violation is one datagram a hostile peer sends.
type violation struct {
	name    string
	payload []byte
	nfds    int    // descriptors attached (copies of one pipe end)
	split   bool   // one SCM_RIGHTS cmsg per descriptor
	raw     bool   // send an empty payload as is (no dummy byte)
	reason  string // substring of FrameError.Reason
	gotFDs  int    // FrameError.FDs: descriptors that reached the receiver
}

func violations(tb testing.TB) []violation {
	dispatch := func(hasFD bool) []byte {
		return encode(tb, &proto.Frame{Body: &proto.Frame_Dispatch{Dispatch: &proto.Dispatch{ConnId: 1, HasFd: hasFD}}})
	}
	done := encode(tb, &proto.Frame{Body: &proto.Frame_Done{Done: &proto.Done{ConnId: 1, Disposition: proto.Disposition_CLOSE}}})
	// A Dispatch whose peer (a proto3 string) is not UTF-8.
	badPeer := protowire.AppendTag(nil, 4, protowire.BytesType)
	badPeer = protowire.AppendBytes(badPeer, protowire.AppendString(protowire.AppendTag(nil, 4, protowire.BytesType), "\xff\xfe"))
	// A frame holding only a field this version does not know.
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1)
	over := encode(tb, helloOfSize(tb, ipc.MaxFrameSize+1))
	return []violation{
		{name: "garbage", payload: []byte{0xff, 0xff, 0xff, 0xff, 0xff}, reason: "malformed"},
		{name: "garbage with fd", payload: []byte("GET / HTTP/1.1\r\n"), nfds: 1, reason: "malformed", gotFDs: 1},
		{name: "truncated varint", payload: []byte{0x08, 0x80}, reason: "malformed"},
		{name: "truncated body", payload: dispatch(true)[:3], nfds: 1, reason: "malformed", gotFDs: 1},
		{name: "field number zero", payload: []byte{0x00}, reason: "malformed"},
		{name: "invalid UTF-8 string", payload: badPeer, reason: "malformed"},
		{name: "no body", payload: encode(tb, &proto.Frame{Id: 7}), reason: "without a body"},
		{name: "no body with fd", payload: encode(tb, &proto.Frame{Id: 7}), nfds: 1, reason: "without a body", gotFDs: 1},
		{name: "unknown field only", payload: unknown, reason: "without a body"},
		{name: "empty payload with fd", raw: true, nfds: 1, reason: "without a body", gotFDs: 1},
		{name: "oversized by one byte", payload: over, reason: "size cap"},
		{name: "oversized with fd", payload: over, nfds: 1, reason: "size cap", gotFDs: 1},
		{name: "oversized 200000 bytes with 2 fds", payload: make([]byte, 200_000), nfds: 2, reason: "size cap", gotFDs: 2},
		{name: "fd on Done", payload: done, nfds: 1, reason: "want 0", gotFDs: 1},
		{name: "fd on Ready", payload: encode(tb, &proto.Frame{Body: &proto.Frame_Ready{Ready: &proto.Ready{Pid: 1}}}), nfds: 1, reason: "want 0", gotFDs: 1},
		{name: "fd on Pong", payload: encode(tb, &proto.Frame{Body: &proto.Frame_Pong{Pong: &proto.Pong{Seq: 1}}}), nfds: 1, reason: "want 0", gotFDs: 1},
		{name: "fd on Hello", payload: encode(tb, &proto.Frame{Body: &proto.Frame_Hello{Hello: &proto.Hello{WorkerId: 1}}}), nfds: 1, reason: "want 0", gotFDs: 1},
		{name: "fd on Ping", payload: encode(tb, &proto.Frame{Body: &proto.Frame_Ping{Ping: &proto.Ping{Seq: 1}}}), nfds: 1, reason: "want 0", gotFDs: 1},
		{name: "fd on Drain", payload: encode(tb, &proto.Frame{Body: &proto.Frame_Drain{Drain: &proto.Drain{}}}), nfds: 1, reason: "want 0", gotFDs: 1},
		{name: "fd on Dispatch without has_fd", payload: dispatch(false), nfds: 1, reason: "want 0", gotFDs: 1},
		{name: "Dispatch has_fd without fd", payload: dispatch(true), reason: "want 1"},
		{name: "Dispatch with 2 fds", payload: dispatch(true), nfds: 2, reason: "too many descriptors", gotFDs: 2},
		{name: "Dispatch with 8 fds", payload: dispatch(true), nfds: 8, reason: "too many descriptors", gotFDs: 8},
		{name: "Dispatch with 9 fds", payload: dispatch(true), nfds: 9, reason: "control data truncated", gotFDs: 8},
		{name: "Dispatch with 16 fds", payload: dispatch(true), nfds: 16, reason: "control data truncated", gotFDs: 8},
		{name: "Dispatch with 253 fds", payload: dispatch(true), nfds: 253, reason: "control data truncated", gotFDs: 8},
		{name: "Dispatch with 2 cmsgs", payload: dispatch(true), nfds: 2, split: true, reason: "too many descriptors", gotFDs: 2},
		{name: "Done with 3 cmsgs", payload: done, nfds: 3, split: true, reason: "too many descriptors", gotFDs: 3},
		{name: "Dispatch with 10 cmsgs", payload: dispatch(true), nfds: 10, split: true, reason: "control data truncated", gotFDs: 8},
	}
}

// TestRecvViolation sends each protocol violation to both receivers. Each
// must return a *FrameError, close every descriptor that arrived, and leave
// the channel in step: the next datagram is the next frame.
func TestRecvViolation(t *testing.T) {
	receivers := []struct {
		name string
		make func(testing.TB) (receiver, int)
	}{
		{"Conn", func(tb testing.TB) (receiver, int) { return hostileConn(tb) }},
		{"Stream", func(tb testing.TB) (receiver, int) { return hostileStream(tb) }},
	}
	for _, r := range receivers {
		for _, tt := range violations(t) {
			t.Run(r.name+"/"+tt.name, func(t *testing.T) {
				rcv, peer := r.make(t)
				_, w := pipeFDs(t)
				fds := make([]int, tt.nfds)
				for i := range fds {
					fds[i] = w
				}
				before := openFDs(t)
				if err := sendRaw(peer, tt.payload, rights(fds, tt.split)); err != nil {
					t.Fatalf("sendmsg: %v", err)
				}
				var f proto.Frame
				fd, err := rcv.Recv(&f)
				var fe *ipc.FrameError
				if !errors.As(err, &fe) {
					if fd >= 0 {
						unix.Close(fd)
					}
					t.Fatalf("Recv: got (%d, %v), want a *FrameError", fd, err)
				}
				if fd != -1 {
					t.Errorf("Recv descriptor on error: got %d, want -1", fd)
				}
				if !strings.Contains(fe.Reason, tt.reason) {
					t.Errorf("FrameError.Reason: got %q, want it to contain %q", fe.Reason, tt.reason)
				}
				if fe.FDs != tt.gotFDs {
					t.Errorf("FrameError.FDs: got %d, want %d", fe.FDs, tt.gotFDs)
				}
				checkFDs(t, before)

				next := &proto.Frame{Body: &proto.Frame_Pong{Pong: &proto.Pong{Seq: 99}}}
				if err := sendRaw(peer, encode(t, next), nil); err != nil {
					t.Fatalf("sendmsg: %v", err)
				}
				f.Reset()
				if fd, err := rcv.Recv(&f); err != nil || fd != -1 || !pb.Equal(&f, next) {
					t.Errorf("next frame: got (%d, %v, %v), want (-1, nil, %v)", fd, err, &f, next)
				}
			})
		}
	}
}

// TestRecvEmptyDatagram: on SEQPACKET a zero-length datagram reads exactly
// like the peer's close, so both receivers report ErrClosed for it (the
// supervisor then drops the worker, as it would for a violation).
func TestRecvEmptyDatagram(t *testing.T) {
	for _, r := range []struct {
		name string
		make func(testing.TB) (receiver, int)
	}{
		{"Conn", func(tb testing.TB) (receiver, int) { return hostileConn(tb) }},
		{"Stream", func(tb testing.TB) (receiver, int) { return hostileStream(tb) }},
	} {
		t.Run(r.name, func(t *testing.T) {
			rcv, peer := r.make(t)
			if err := sendRaw(peer, nil, nil); err != nil {
				t.Fatalf("sendmsg: %v", err)
			}
			var f proto.Frame
			if fd, err := rcv.Recv(&f); fd != -1 || err != ipc.ErrClosed {
				t.Errorf("Recv: got (%d, %v), want (-1, %v)", fd, err, ipc.ErrClosed)
			}
		})
	}
}

// TestConnWouldBlock fills the socket with no reader until Send reports
// ErrWouldBlock, then checks that nothing was lost or half-sent, and that an
// empty socket gives ErrWouldBlock from Recv.
func TestConnWouldBlock(t *testing.T) {
	c, s, _, _ := newPair(t)
	var f proto.Frame
	if fd, err := c.Recv(&f); fd != -1 || err != ipc.ErrWouldBlock {
		t.Fatalf("Recv on an empty socket: got (%d, %v), want (-1, %v)", fd, err, ipc.ErrWouldBlock)
	}

	_, w := pipeFDs(t)
	before := openFDs(t)
	ping := func(seq uint64) *proto.Frame {
		return &proto.Frame{Body: &proto.Frame_Ping{Ping: &proto.Ping{Seq: seq}}}
	}
	const limit = 1 << 20
	sent := uint64(0)
	for ; sent < limit; sent++ {
		err := c.Send(ping(sent), -1)
		if err == ipc.ErrWouldBlock {
			break
		}
		if err != nil {
			t.Fatalf("Send #%d: %v", sent, err)
		}
	}
	if sent == limit {
		t.Fatalf("Send: no ErrWouldBlock after %d frames", limit)
	}
	t.Logf("socket full after %d Ping frames", sent)
	// A Dispatch with a descriptor is refused the same way, and the
	// descriptor stays the caller's.
	d := &proto.Frame{Body: &proto.Frame_Dispatch{Dispatch: &proto.Dispatch{ConnId: 1, HasFd: true}}}
	if err := c.Send(d, w); err != ipc.ErrWouldBlock {
		t.Fatalf("Send of a Dispatch on a full socket: got %v, want %v", err, ipc.ErrWouldBlock)
	}
	if !valid(w) {
		t.Fatalf("Send closed the caller's descriptor on ErrWouldBlock")
	}

	for i := uint64(0); i < sent; i++ {
		f.Reset()
		fd, err := s.Recv(&f)
		if err != nil || fd != -1 || f.GetPing().GetSeq() != i {
			t.Fatalf("Recv #%d: got (%d, %v, %v), want Ping %d", i, fd, err, &f, i)
		}
	}
	if err := c.Send(ping(limit), -1); err != nil {
		t.Fatalf("Send after the reader drained: %v", err)
	}
	f.Reset()
	if _, err := s.Recv(&f); err != nil || f.GetPing().GetSeq() != limit {
		t.Fatalf("Recv after drain: got (%v, %v), want Ping %d (the refused frames must not arrive)", err, &f, uint64(limit))
	}
	checkFDs(t, before)
}

// TestClosed checks that each end reports ErrClosed once its peer is gone,
// whether or not the peer left frames unread, and that frames sent before a
// clean close are still delivered.
func TestClosed(t *testing.T) {
	done := &proto.Frame{Body: &proto.Frame_Done{Done: &proto.Done{ConnId: 1, Disposition: proto.Disposition_CLOSE}}}
	ping := &proto.Frame{Body: &proto.Frame_Ping{Ping: &proto.Ping{Seq: 1}}}
	tests := []struct {
		name string
		run  func(t *testing.T, c *ipc.Conn, s *ipc.Stream, closeConn, closeStream func() error) error
	}{
		{"Conn.Recv after worker close", func(t *testing.T, c *ipc.Conn, s *ipc.Stream, _, closeStream func() error) error {
			closeStream()
			var f proto.Frame
			_, err := c.Recv(&f)
			return err
		}},
		{"Conn.Send after worker close", func(t *testing.T, c *ipc.Conn, s *ipc.Stream, _, closeStream func() error) error {
			closeStream()
			return c.Send(ping, -1)
		}},
		{"Conn.Recv after worker close with frames unread", func(t *testing.T, c *ipc.Conn, s *ipc.Stream, _, closeStream func() error) error {
			if err := c.Send(ping, -1); err != nil {
				t.Fatal(err)
			}
			closeStream()
			var f proto.Frame
			_, err := c.Recv(&f)
			return err
		}},
		{"Conn.Recv gets frames sent before the close", func(t *testing.T, c *ipc.Conn, s *ipc.Stream, _, closeStream func() error) error {
			if err := s.Send(done, -1); err != nil {
				t.Fatal(err)
			}
			closeStream()
			var f proto.Frame
			if _, err := c.Recv(&f); err != nil || !pb.Equal(&f, done) {
				t.Fatalf("Recv: got (%v, %v), want %v", err, &f, done)
			}
			_, err := c.Recv(&f)
			return err
		}},
		{"Stream.Recv after supervisor close", func(t *testing.T, c *ipc.Conn, s *ipc.Stream, closeConn, _ func() error) error {
			closeConn()
			var f proto.Frame
			_, err := s.Recv(&f)
			return err
		}},
		{"Stream.Send after supervisor close", func(t *testing.T, c *ipc.Conn, s *ipc.Stream, closeConn, _ func() error) error {
			closeConn()
			return s.Send(done, -1)
		}},
		{"Stream.Recv after supervisor close with frames unread", func(t *testing.T, c *ipc.Conn, s *ipc.Stream, closeConn, _ func() error) error {
			if err := s.Send(done, -1); err != nil {
				t.Fatal(err)
			}
			closeConn()
			var f proto.Frame
			_, err := s.Recv(&f)
			return err
		}},
		{"Stream.Recv wakes when the supervisor closes", func(t *testing.T, c *ipc.Conn, s *ipc.Stream, closeConn, _ func() error) error {
			errc := make(chan error, 1)
			go func() {
				var f proto.Frame
				_, err := s.Recv(&f)
				errc <- err
			}()
			time.Sleep(20 * time.Millisecond)
			closeConn()
			select {
			case err := <-errc:
				return err
			case <-time.After(10 * time.Second):
				t.Fatal("Stream.Recv still blocked 10s after the supervisor closed")
				return nil
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, s, closeConn, closeStream := newPair(t)
			if err := tt.run(t, c, s, closeConn, closeStream); err != ipc.ErrClosed {
				t.Errorf("got %v, want %v", err, ipc.ErrClosed)
			}
		})
	}
}

// TestMarshalCap checks Marshal's limit at and around MaxFrameSize, and that
// a frame at the cap crosses the channel.
func TestMarshalCap(t *testing.T) {
	tests := []struct {
		size int
		ok   bool
	}{
		{0, true}, // a bodyless frame encodes to nothing; Marshal does not judge bodies
		{ipc.MaxFrameSize - 1, true},
		{ipc.MaxFrameSize, true},
		{ipc.MaxFrameSize + 1, false},
		{4 * ipc.MaxFrameSize, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.size), func(t *testing.T) {
			f := &proto.Frame{}
			if tt.size > 0 {
				f = helloOfSize(t, tt.size)
			}
			buf := make([]byte, 0, 16)
			b, err := ipc.Marshal(buf, f)
			if tt.ok {
				if err != nil || len(b) != tt.size {
					t.Fatalf("Marshal: got (%d bytes, %v), want (%d bytes, nil)", len(b), err, tt.size)
				}
			} else if err == nil || b != nil {
				t.Fatalf("Marshal: got (%d bytes, %v), want (nil, an error)", len(b), err)
			}
		})
	}

	t.Run("over the channel", func(t *testing.T) {
		c, s, _, _ := newPair(t)
		for _, n := range []int{ipc.MaxFrameSize, ipc.MaxFrameSize + 1} {
			f := helloOfSize(t, n)
			err := c.Send(f, -1)
			if n > ipc.MaxFrameSize {
				if err == nil {
					t.Errorf("Conn.Send of %d bytes: got nil, want an error", n)
				}
				if err := s.Send(f, -1); err == nil {
					t.Errorf("Stream.Send of %d bytes: got nil, want an error", n)
				}
				continue
			}
			if err != nil {
				t.Fatalf("Conn.Send of %d bytes: %v", n, err)
			}
			var got proto.Frame
			if _, err := s.Recv(&got); err != nil || !pb.Equal(&got, f) {
				t.Fatalf("Stream.Recv of %d bytes: %v (equal %v)", n, err, pb.Equal(&got, f))
			}
			if err := s.Send(f, -1); err != nil {
				t.Fatalf("Stream.Send of %d bytes: %v", n, err)
			}
			got.Reset()
			if _, err := c.Recv(&got); err != nil || !pb.Equal(&got, f) {
				t.Fatalf("Conn.Recv of %d bytes: %v (equal %v)", n, err, pb.Equal(&got, f))
			}
		}
	})
}

// TestCarriedFits checks the guarantee MaxCarried documents and the
// supervisor relies on (it relays a Done's carried bytes into the next
// Dispatch): with MaxCarried carried bytes and every other field at its
// largest realistic value, a Dispatch or Done fits under MaxFrameSize.
func TestCarriedFits(t *testing.T) {
	// The longest textual IPv6 address is 45 characters; add a zone of
	// IFNAMSIZ-1 characters, brackets and a port for the peer.
	const ipv6 = "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255"
	if len(ipv6) != 45 {
		t.Fatalf("test setup: %q is %d characters", ipv6, len(ipv6))
	}
	carried := bytes.Repeat([]byte{0xff}, ipc.MaxCarried)
	tests := []struct {
		name string
		f    *proto.Frame
	}{
		{"Dispatch", &proto.Frame{Id: math.MaxUint64, Body: &proto.Frame_Dispatch{Dispatch: &proto.Dispatch{
			ConnId: math.MaxUint64, HasFd: true, Listener: math.MaxUint32,
			Peer:      "[" + ipv6 + "%" + strings.Repeat("e", 15) + "]:65535",
			ClientKey: ipv6 + "/128",
			Carried:   carried, Requests: math.MaxUint32, AcceptedUnixNano: math.MinInt64,
		}}}},
		{"Done", &proto.Frame{Id: math.MaxUint64, Body: &proto.Frame_Done{Done: &proto.Done{
			ConnId: math.MaxUint64, Disposition: proto.Disposition_LINGER, Carried: carried,
			Requests: math.MaxUint32, Kept: true, Outcome: proto.Outcome_BAD_REQUEST,
		}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := ipc.Marshal(nil, tt.f)
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			if len(b) > ipc.MaxFrameSize {
				t.Fatalf("size: got %d, want ≤ %d", len(b), ipc.MaxFrameSize)
			}
			t.Logf("%s with %d carried bytes: %d bytes, %d under the cap", tt.name, ipc.MaxCarried, len(b), ipc.MaxFrameSize-len(b))

			c, s, _, _ := newPair(t)
			fd := -1
			if tt.f.GetDispatch().GetHasFd() {
				_, fd = pipeFDs(t)
			}
			before := openFDs(t)
			if err := c.Send(tt.f, fd); err != nil {
				t.Fatalf("Conn.Send: %v", err)
			}
			var got proto.Frame
			rfd, err := s.Recv(&got)
			if err != nil || !pb.Equal(&got, tt.f) || (rfd >= 0) != (fd >= 0) {
				t.Fatalf("Stream.Recv: got (%d, %v), equal %v", rfd, err, pb.Equal(&got, tt.f))
			}
			if rfd >= 0 {
				unix.Close(rfd)
			}
			checkFDs(t, before)
		})
	}
}

// TestStreamConcurrentSend sends from 16 goroutines at once; every frame must
// arrive once, intact, and in each sender's order.
func TestStreamConcurrentSend(t *testing.T) {
	const senders, each = 16, 200
	c, s, _, _ := newPair(t)
	payload := func(g, i int) []byte {
		n := (g*each + i) * 37 % 4096
		b := make([]byte, n)
		for k := range b {
			b[k] = byte(g ^ i ^ k)
		}
		return b
	}
	var wg sync.WaitGroup
	errc := make(chan error, senders)
	for g := range senders {
		wg.Go(func() {
			for i := range each {
				f := &proto.Frame{Id: uint64(g), Body: &proto.Frame_Done{Done: &proto.Done{
					ConnId: uint64(g)<<32 | uint64(i), Disposition: proto.Disposition_KEEP_ALIVE,
					Carried: payload(g, i), Requests: uint32(i),
				}}}
				if err := s.Send(f, -1); err != nil {
					errc <- fmt.Errorf("sender %d frame %d: %w", g, i, err)
					return
				}
			}
		})
	}
	next := make([]int, senders)
	for n := 0; n < senders*each; n++ {
		var f proto.Frame
		fd, err := recvWait(t, c, &f)
		if err != nil || fd != -1 {
			t.Fatalf("Recv #%d: got (%d, %v)", n, fd, err)
		}
		d := f.GetDone()
		g, i := int(d.GetConnId()>>32), int(uint32(d.GetConnId()))
		switch {
		case g >= senders || uint64(g) != f.GetId():
			t.Fatalf("Recv #%d: sender %d in conn_id, %d in id", n, g, f.GetId())
		case i != next[g]:
			t.Fatalf("Recv #%d: sender %d frame %d, want frame %d", n, g, i, next[g])
		case int(d.GetRequests()) != i || !bytes.Equal(d.GetCarried(), payload(g, i)):
			t.Fatalf("Recv #%d: sender %d frame %d corrupted", n, g, i)
		}
		next[g]++
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	var f proto.Frame
	if _, err := c.Recv(&f); err != ipc.ErrWouldBlock {
		t.Errorf("Recv after all frames: got %v, %v; want %v", err, &f, ipc.ErrWouldBlock)
	}
}

// TestFrameError checks the error text carries its data.
func TestFrameError(t *testing.T) {
	err := error(&ipc.FrameError{Reason: "too many descriptors", Size: 10, FDs: 2})
	want := "ipc: protocol violation: too many descriptors (size 10, fds 2)"
	if got := err.Error(); got != want {
		t.Errorf("Error: got %q, want %q", got, want)
	}
}

// TestRecvNegativeEnum pins a corner the fuzz target allows for: protobuf
// reads a 5-byte varint as a negative int32 enum and re-encodes it in 10
// bytes, so a Done of exactly MaxFrameSize bytes with negative disposition and
// outcome is accepted by Recv yet re-marshals 10 bytes over the cap. The
// transport does not judge field values; the supervisor kills a worker that
// sends a Done with an unknown outcome or disposition (or over MaxCarried),
// and it never re-sends a worker's frame, so nothing over the cap is sent.
func TestRecvNegativeEnum(t *testing.T) {
	c, peer := hostileConn(t)
	neg := []byte{0xff, 0xff, 0xff, 0xff, 0x0f} // int32(-1) in 5 bytes
	var done []byte
	var b []byte
	for k := ipc.MaxFrameSize - 64; len(b) != ipc.MaxFrameSize; k++ {
		done = protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), make([]byte, k))
		done = append(protowire.AppendTag(done, 2, protowire.VarintType), neg...)
		done = append(protowire.AppendTag(done, 6, protowire.VarintType), neg...)
		b = protowire.AppendBytes(protowire.AppendTag(nil, 5, protowire.BytesType), done)
	}
	if err := sendRaw(peer, b, nil); err != nil {
		t.Fatalf("sendmsg: %v", err)
	}
	var f proto.Frame
	if _, err := c.Recv(&f); err != nil {
		t.Fatalf("Recv of %d bytes: %v", len(b), err)
	}
	d := f.GetDone()
	if d.GetOutcome() >= 0 || d.GetDisposition() >= 0 {
		t.Fatalf("Done: got outcome %v disposition %v, want both negative", d.GetOutcome(), d.GetDisposition())
	}
	if size := pb.Size(&f); size != len(b)+10 {
		t.Errorf("re-encoded size: got %d, want %d", size, len(b)+10)
	}
	if _, err := ipc.Marshal(nil, &f); err == nil {
		t.Errorf("Marshal of the re-encoded frame: got nil, want the size-cap error")
	}
}
