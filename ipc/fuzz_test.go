//go:build linux

package ipc_test

import (
	"errors"
	"testing"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"golang.org/x/sys/unix"
	pb "google.golang.org/protobuf/proto"
)

// fuzzSeed is one datagram: its payload and a selector byte whose value
// mod 3 is the number of descriptors attached, and whose bit 2 puts each
// descriptor in its own SCM_RIGHTS cmsg.
type fuzzSeed struct {
	name string
	data []byte
	sel  byte
}

// fuzzSeeds are the frames a worker sends, valid and not. The same seeds are
// committed under testdata/fuzz/FuzzRecv.
func fuzzSeeds(tb testing.TB) []fuzzSeed {
	frame := func(f *proto.Frame) []byte { return encode(tb, f) }
	ready := frame(&proto.Frame{Body: &proto.Frame_Ready{Ready: &proto.Ready{Pid: 4242, Layers: []*proto.SandboxLayer{
		{Name: "namespaces", Applied: true}, {Name: "seccomp", Applied: true, Detail: "tsync"},
	}}}})
	done := frame(&proto.Frame{Body: &proto.Frame_Done{Done: &proto.Done{
		ConnId: 17, Disposition: proto.Disposition_KEEP_ALIVE, Carried: []byte("GET /next HTTP/1.1\r\nHost: a\r\n\r\n"),
		Requests: 2, Outcome: proto.Outcome_OK,
	}}})
	doneClose := frame(&proto.Frame{Body: &proto.Frame_Done{Done: &proto.Done{
		ConnId: 18, Disposition: proto.Disposition_LINGER, Requests: 1, Outcome: proto.Outcome_BAD_REQUEST,
	}}})
	pong := frame(&proto.Frame{Body: &proto.Frame_Pong{Pong: &proto.Pong{Seq: 3, Active: 2}}})
	dispatch := frame(&proto.Frame{Body: &proto.Frame_Dispatch{Dispatch: &proto.Dispatch{
		ConnId: 19, HasFd: true, Peer: "[::1]:4000", ClientKey: "::/64",
	}}})
	bodyStart := frame(&proto.Frame{Id: 9, Body: &proto.Frame_BodyStart{BodyStart: &proto.BodyStart{ConnId: 17, Length: 1000000}}})
	bodyDone := frame(&proto.Frame{Id: 10, Body: &proto.Frame_BodyDone{BodyDone: &proto.BodyDone{ConnId: 17}}})
	sign := frame(&proto.Frame{Id: 11, Body: &proto.Frame_Sign{Sign: &proto.Sign{
		KeyId: 1, Hash: 5, Digest: make([]byte, 32), Pss: true,
	}}})
	signHuge := frame(&proto.Frame{Id: 12, Body: &proto.Frame_Sign{Sign: &proto.Sign{
		KeyId: 1 << 31, Hash: 1 << 31, Digest: make([]byte, 4096),
	}}})
	doneKept := frame(&proto.Frame{Body: &proto.Frame_Done{Done: &proto.Done{
		ConnId: 20, Disposition: proto.Disposition_KEEP_ALIVE, Requests: 3, Kept: true, Pending: true,
	}}})
	doneResponses := frame(&proto.Frame{Body: &proto.Frame_Done{Done: &proto.Done{
		ConnId: 21, Disposition: proto.Disposition_KEEP_ALIVE, Requests: 4, Outcome: proto.Outcome_OK,
		ResponseStatus: []uint32{200, 304, 404}, ResponseMicros: []uint64{120, 80, 1 << 40}, HotRequests: 2, Handback: proto.Handback_HOT_WINDOW,
	}}})
	accessLog := frame(&proto.Frame{Body: &proto.Frame_AccessLog{AccessLog: &proto.AccessLog{}}})
	return []fuzzSeed{
		{"ready", ready, 0},
		{"done-responses", doneResponses, 0},
		{"access-log-fd", accessLog, 1},
		{"access-log-missing-fd", accessLog, 0},
		{"body-start", bodyStart, 0},
		{"body-done", bodyDone, 0},
		{"body-start-with-fd", bodyStart, 1},
		{"sign", sign, 0},
		{"sign-with-fd", sign, 1},
		{"sign-huge-fields", signHuge, 0},
		{"truncated-sign", sign[:len(sign)-7], 0},
		{"done-kept", doneKept, 0},
		{"done-kept-with-fd", doneKept, 1},
		{"done", done, 0},
		{"done-linger", doneClose, 0},
		{"pong", pong, 0},
		{"dispatch-fd", dispatch, 1},
		{"dispatch-missing-fd", dispatch, 0},
		{"dispatch-two-fds", dispatch, 2},
		{"dispatch-two-cmsgs", dispatch, 2 | 4},
		{"done-with-fd", done, 1},
		{"pong-with-fd", pong, 1},
		{"no-body", frame(&proto.Frame{Id: 7}), 0},
		{"truncated-done", done[:len(done)/2], 0},
		{"garbage", []byte("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"), 0},
		{"empty", nil, 0},
		{"empty-with-fd", nil, 1},
	}
}

// FuzzRecv feeds one datagram, with 0..2 descriptors, from a hostile worker
// into the supervisor's Conn.Recv.
func FuzzRecv(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s.data, s.sel)
	}
	f.Add(encode(f, helloOfSize(f, ipc.MaxFrameSize+1)), byte(1))
	c, peer := hostileConn(f)
	f.Fuzz(func(t *testing.T, data []byte, sel byte) {
		fuzzRecv(t, c, peer, data, sel)
	})
}

// FuzzStreamRecv does the same into the worker's Stream.Recv.
func FuzzStreamRecv(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s.data, s.sel)
	}
	s, peer := hostileStream(f)
	f.Fuzz(func(t *testing.T, data []byte, sel byte) {
		fuzzRecv(t, s, peer, data, sel)
	})
}

// fuzzRecv sends data with the descriptors sel asks for and checks the
// receiver's invariants: no panic; on error a *FrameError (or ErrClosed for
// an empty datagram) and every descriptor closed; on success a frame within
// the cap that re-marshals, and exactly the descriptors it names.
func fuzzRecv(t *testing.T, rcv receiver, peer int, data []byte, sel byte) {
	nfds, split := int(sel%3), sel&4 != 0
	_, w := pipeFDs(t)
	fds := make([]int, nfds)
	for i := range fds {
		fds[i] = w
	}
	before := openFDs(t)
	if err := sendRaw(peer, data, rights(fds, split)); err != nil {
		if err == unix.EMSGSIZE {
			t.Skipf("datagram of %d bytes exceeds the socket buffer", len(data))
		}
		t.Fatalf("sendmsg: %v", err)
	}
	var f proto.Frame
	fd, err := rcv.Recv(&f)
	if err != nil {
		if fd != -1 {
			t.Errorf("Recv on error: got descriptor %d, want -1", fd)
		}
		var fe *ipc.FrameError
		switch {
		case err == ipc.ErrClosed:
			if len(data) != 0 || nfds != 0 {
				t.Errorf("Recv of %d bytes and %d fds: got ErrClosed, want a *FrameError", len(data), nfds)
			}
		case !errors.As(err, &fe):
			t.Errorf("Recv: got %v (%T), want a *FrameError", err, err)
		}
		checkFDs(t, before)
		return
	}

	want := 0
	if f.GetDispatch().GetHasFd() || f.GetDialReply().GetOk() || f.GetAccessLog() != nil {
		want = 1
	}
	if nfds != want {
		t.Errorf("Recv accepted %T with %d descriptors, want %d", f.Body, nfds, want)
	}
	if (fd >= 0) != (want == 1) {
		t.Errorf("Recv of %T: got descriptor %d, want %d descriptor", f.Body, fd, want)
	}
	if fd >= 0 {
		if !cloexec(t, fd) {
			t.Errorf("received descriptor %d: FD_CLOEXEC not set", fd)
		}
		unix.Close(fd)
	}
	checkFDs(t, before)
	if f.Body == nil {
		t.Errorf("Recv accepted a frame without a body")
	}
	if len(data) > ipc.MaxFrameSize {
		t.Errorf("Recv accepted %d bytes, over the %d cap", len(data), ipc.MaxFrameSize)
	}
	b, err := ipc.Marshal(nil, &f)
	if err != nil {
		// A negative enum read from a 5-byte varint re-encodes in 10 bytes
		// (TestRecvNegativeEnum); the supervisor rejects such a Done.
		d := f.GetDone()
		if d == nil || (d.GetOutcome() >= 0 && d.GetDisposition() >= 0) || pb.Size(&f) > len(data)+10 {
			t.Fatalf("re-marshal of an accepted frame: %v", err)
		}
		return
	}
	var again proto.Frame
	if err := pb.Unmarshal(b, &again); err != nil || !pb.Equal(&again, &f) {
		t.Errorf("re-marshalled frame does not round-trip: %v", err)
	}
}
