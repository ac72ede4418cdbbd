//go:build linux

package ipc_test

import (
	"testing"

	"github.com/gatehouse-dev/gatehouse/proto"
	"golang.org/x/sys/unix"
)

// BenchmarkDispatchFD measures hand-offs: the supervisor's Conn sends a
// Dispatch with one descriptor (a pipe end) to a Stream receiver in another
// goroutine, which closes each descriptor it gets.
func BenchmarkDispatchFD(b *testing.B) {
	c, s, _, _ := newPair(b)
	_, w := pipeFDs(b)
	errc := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		var f proto.Frame
		for range b.N {
			fd, err := s.Recv(&f)
			if err != nil {
				errc <- err
				return
			}
			unix.Close(fd)
		}
		errc <- nil
	}()
	d := &proto.Dispatch{HasFd: true, Peer: "192.0.2.1:40000", ClientKey: "192.0.2.1"}
	f := &proto.Frame{Body: &proto.Frame_Dispatch{Dispatch: d}}
	for i := range b.N {
		d.ConnId = uint64(i)
		if err := sendWait(b, c, f, w); err != nil {
			b.Fatalf("Send: %v", err)
		}
	}
	if err := <-errc; err != nil {
		b.Fatalf("Recv: %v", err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "fds/s")
}

// BenchmarkRoundTrip measures a whole round on the channel: a Dispatch with
// a descriptor from Conn to Stream, and a Done back, the supervisor side
// polling its non-blocking descriptor as the dispatcher does.
func BenchmarkRoundTrip(b *testing.B) {
	c, s, _, _ := newPair(b)
	_, w := pipeFDs(b)
	errc := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		var f proto.Frame
		done := &proto.Done{Disposition: proto.Disposition_KEEP_ALIVE, Outcome: proto.Outcome_OK}
		reply := &proto.Frame{Body: &proto.Frame_Done{Done: done}}
		for range b.N {
			fd, err := s.Recv(&f)
			if err != nil {
				errc <- err
				return
			}
			unix.Close(fd)
			done.ConnId = f.GetDispatch().GetConnId()
			done.Requests = f.GetDispatch().GetRequests() + 1
			if err := s.Send(reply, -1); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	d := &proto.Dispatch{HasFd: true, Peer: "192.0.2.1:40000", ClientKey: "192.0.2.1"}
	f := &proto.Frame{Body: &proto.Frame_Dispatch{Dispatch: d}}
	var got proto.Frame
	for i := range b.N {
		d.ConnId = uint64(i)
		if err := sendWait(b, c, f, w); err != nil {
			b.Fatalf("Send: %v", err)
		}
		got.Reset()
		if _, err := recvWait(b, c, &got); err != nil {
			b.Fatalf("Recv: %v", err)
		}
		if got.GetDone().GetConnId() != uint64(i) {
			b.Fatalf("Done for %d, want %d", got.GetDone().GetConnId(), i)
		}
	}
	if err := <-errc; err != nil {
		b.Fatalf("worker: %v", err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "roundtrips/s")
}

// BenchmarkBatchedFDs is the kernel's upper bound for the protocol: raw
// SEQPACKET sendmsg with 16 descriptors per message (unix.UnixRights), a
// receiver goroutine closing them. One iteration is one message.
func BenchmarkBatchedFDs(b *testing.B) {
	const batch = 16
	sp := rawSocketpair(b)
	b.Cleanup(func() {
		unix.Close(sp[0])
		unix.Close(sp[1])
	})
	_, w := pipeFDs(b)
	fds := make([]int, batch)
	for i := range fds {
		fds[i] = w
	}
	oob := unix.UnixRights(fds...)
	payload := make([]byte, 32)
	errc := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		buf := make([]byte, 64)
		roob := make([]byte, unix.CmsgSpace(batch*4))
		for range b.N {
			_, oobn, flags, _, err := unix.Recvmsg(sp[1], buf, roob, unix.MSG_CMSG_CLOEXEC)
			if err != nil {
				errc <- err
				return
			}
			if flags&unix.MSG_CTRUNC != 0 {
				errc <- unix.EMSGSIZE
				return
			}
			for rest := roob[:oobn]; len(rest) > 0; {
				_, data, next, err := unix.ParseOneSocketControlMessage(rest)
				if err != nil {
					errc <- err
					return
				}
				for i := 0; i+4 <= len(data); i += 4 {
					unix.Close(int(int32(uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24)))
				}
				rest = next
			}
		}
		errc <- nil
	}()
	for range b.N {
		if err := unix.Sendmsg(sp[0], payload, oob, nil, 0); err != nil {
			b.Fatalf("sendmsg: %v", err)
		}
	}
	if err := <-errc; err != nil {
		b.Fatalf("recvmsg: %v", err)
	}
	b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "fds/s")
}
