package ipc

import (
	"net/netip"
	"testing"

	"github.com/gatehouse-dev/gatehouse/proto"
	pb "google.golang.org/protobuf/proto"
)

// TestDispatchEncoder: what the encoder writes decodes to the Dispatch with
// every field set, the peer and client key included, for IPv4 and a zoned
// IPv6 peer; the peer and key may not be set twice; once warm it allocates
// nothing.
func TestDispatchEncoder(t *testing.T) {
	var e DispatchEncoder
	for _, tc := range []struct {
		peer, key string
	}{
		{"192.0.2.1:40000", "192.0.2.1"},
		{"[fe80::1%eth0]:65535", "fe80::"},
	} {
		peer, key := netip.MustParseAddrPort(tc.peer), netip.MustParseAddr(tc.key)
		d := &proto.Dispatch{
			ConnId: 1<<64 - 1, HasFd: true, Listener: 3, Carried: []byte("GET / HTTP/1.1\r\n"),
			Requests: 7, AcceptedUnixNano: 1234567890, Tls: true, ListenerName: "https",
		}
		b, err := e.Encode(d, peer, key)
		if err != nil {
			t.Fatal(err)
		}
		var f proto.Frame
		if err := decode(b, 1, &f); err != nil {
			t.Fatal(err)
		}
		want := pb.Clone(d).(*proto.Dispatch)
		want.Peer, want.ClientKey = tc.peer, key.String()
		if got := f.GetDispatch(); !pb.Equal(got, want) {
			t.Errorf("decoded %v, want %v", got, want)
		}
		if allocs := testing.AllocsPerRun(100, func() { e.Encode(d, peer, key) }); allocs != 0 && !raceEnabled {
			t.Errorf("%.1f allocations per Encode, want 0", allocs)
		}
	}
	if _, err := e.Encode(&proto.Dispatch{Peer: "192.0.2.1:1"}, netip.MustParseAddrPort("192.0.2.1:1"), netip.Addr{}); err == nil {
		t.Error("a Dispatch with its peer set was encoded")
	}
}

// TestResetKeepsDone: a Done decoded into a frame emptied by Reset reuses
// its message and slices and equals a fresh decode; another body is dropped.
func TestResetKeepsDone(t *testing.T) {
	first := &proto.Frame{Id: 9, Body: &proto.Frame_Done{Done: &proto.Done{
		ConnId: 1, Disposition: proto.Disposition_KEEP_ALIVE, Requests: 3, Carried: []byte("x"),
		ResponseStatus: []uint32{200, 404}, ResponseMicros: []uint64{5, 6}, HotRequests: 1, Handback: proto.Handback_HOT_WINDOW,
	}}}
	second := &proto.Frame{Body: &proto.Frame_Done{Done: &proto.Done{ConnId: 2, Requests: 4, ResponseStatus: []uint32{500}, ResponseMicros: []uint64{7}}}}
	var f proto.Frame
	for _, m := range []*proto.Frame{first, second} {
		b, err := Marshal(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		Reset(&f)
		if err := decode(b, 0, &f); err != nil {
			t.Fatal(err)
		}
		if !pb.Equal(&f, m) {
			t.Errorf("decoded %v after Reset, want %v", &f, m)
		}
	}
	f.Body = &proto.Frame_Ping{Ping: &proto.Ping{Seq: 1}}
	Reset(&f)
	if f.Body != nil || f.Id != 0 {
		t.Errorf("Reset left %v", &f)
	}
}
