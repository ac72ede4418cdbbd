package ipc

import (
	"testing"

	"github.com/gatehouse-dev/gatehouse/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// TestSpecs: every field of Frame's body has a Spec of its own kind and
// message, a frame built with that body maps back to it, and the descriptor
// rules are the protocol's (PROTOCOL.md's Descriptors section): a Dispatch
// with has_fd and a DialReply with ok carry one, an AccessLog always, no
// other frame any.
func TestSpecs(t *testing.T) {
	fields := bodyOneof.Fields()
	if len(Specs()) != fields.Len() {
		t.Fatalf("%d specs for %d body fields", len(Specs()), fields.Len())
	}
	carriers := map[string]string{"Dispatch": "one iff `has_fd`", "DialReply": "one iff `ok`", "AccessLog": "exactly one"}
	for _, s := range Specs() {
		fd := fields.ByNumber(protoreflect.FieldNumber(s.Kind))
		if fd == nil || string(fd.Message().Name()) != s.Name {
			t.Errorf("%s: kind %d is not its body field", s.Name, s.Kind)
			continue
		}
		f := s.New()
		if SpecNamed(s.Name) != s {
			t.Errorf("%s: SpecNamed finds another", s.Name)
		}
		if KindOf(f) != s.Kind || SpecOf(f) != s || SpecOfKind(s.Kind) != s {
			t.Errorf("%s: a frame with that body maps to kind %d", s.Name, KindOf(f))
		}
		if want := carriers[s.Name]; want == "" && s.Descriptors() != "none" || want != "" && s.Descriptors() != want {
			t.Errorf("%s carries %s", s.Name, s.Descriptors())
		}
		if s.MayCarry() != (carriers[s.Name] != "") {
			t.Errorf("%s: MayCarry is %v", s.Name, s.MayCarry())
		}
		if s.Role == proto.Role_ROLE_REPLY && s.From != proto.Sender_SENDER_SUPERVISOR {
			t.Errorf("%s: a reply the supervisor does not send", s.Name)
		}
	}
	if KindOf(&proto.Frame{}) != 0 || SpecOf(&proto.Frame{}) != nil {
		t.Error("a frame without a body has a kind")
	}
	for _, c := range []struct {
		f    *proto.Frame
		want int
	}{
		{&proto.Frame{Body: &proto.Frame_Dispatch{Dispatch: &proto.Dispatch{HasFd: true}}}, 1},
		{&proto.Frame{Body: &proto.Frame_Dispatch{Dispatch: &proto.Dispatch{}}}, 0},
		{&proto.Frame{Body: &proto.Frame_DialReply{DialReply: &proto.DialReply{Ok: true}}}, 1},
		{&proto.Frame{Body: &proto.Frame_DialReply{DialReply: &proto.DialReply{Refused: true}}}, 0},
		{&proto.Frame{Body: &proto.Frame_AccessLog{AccessLog: &proto.AccessLog{}}}, 1},
		{&proto.Frame{Body: &proto.Frame_Done{Done: &proto.Done{}}}, 0},
	} {
		if got := SpecOf(c.f).FDs(c.f); got != c.want {
			t.Errorf("%v carries %d descriptors, want %d", c.f, got, c.want)
		}
	}
}

// TestKindOfAllocs: the loop looks a kind up for every frame it reads, so
// the lookup allocates nothing.
func TestKindOfAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	fs := []*proto.Frame{
		{Body: &proto.Frame_Done{Done: &proto.Done{ConnId: 1}}},
		{Body: &proto.Frame_Dispatch{Dispatch: &proto.Dispatch{HasFd: true}}},
	}
	n := testing.AllocsPerRun(100, func() {
		for _, f := range fs {
			if SpecOf(f).FDs(f) < 0 {
				t.Fatal("negative count")
			}
		}
	})
	if n != 0 {
		t.Errorf("KindOf and FDs allocate %v times", n)
	}
}

// BenchmarkKindOf measures the lookup every received frame pays.
func BenchmarkKindOf(b *testing.B) {
	f := &proto.Frame{Body: &proto.Frame_Done{Done: &proto.Done{ConnId: 1}}}
	var k Kind
	for i := 0; i < b.N; i++ {
		k += KindOf(f)
	}
	if k == 0 && b.N > 0 {
		b.Fatal("no kind")
	}
}
