package handover

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/limits"
)

// Inbound is the new supervisor's end: what the old one passed at start,
// then the state and connections it sends once told Ready.
type Inbound struct {
	s         sock
	Listeners []Listener
	// AdminFD is the admin socket's listening descriptor, or -1.
	AdminFD int
	// OldVersion is the old binary's version.
	OldVersion string
}

// Open reads the old supervisor's first frame from fd (the hand-over
// socket). A format this binary does not read is refused on the socket,
// so the old supervisor reports why, and returned as an error.
func Open(fd int) (*Inbound, error) {
	in := &Inbound{s: sock{fd: fd}, AdminFD: -1}
	buf, oob := recvBufs()
	m, fds, err := in.s.recv(buf, oob)
	if err != nil {
		in.Fail(err.Error())
		return nil, err
	}
	ls := m.GetListeners()
	want := len(ls.GetListeners())
	if ls.GetAdmin() {
		want++
	}
	if ls == nil || len(fds) != want {
		closeAll(fds)
		err := fmt.Errorf("handover: expected the listeners first, with %d descriptors; got %d", want, len(fds))
		in.Fail(err.Error())
		return nil, err
	}
	for i, l := range ls.GetListeners() {
		in.Listeners = append(in.Listeners, Listener{Name: l.GetName(), Address: l.GetAddress(), FD: fds[i]})
	}
	if ls.GetAdmin() {
		in.AdminFD = fds[len(fds)-1]
	}
	in.OldVersion = ls.GetVersion()
	return in, nil
}

// Receive is the new side's end of a hand-over socket fd whose listeners
// came another way (a test's): only Run is of use on it.
func Receive(fd int) *Inbound { return &Inbound{s: sock{fd: fd}, AdminFD: -1} }

// Fail tells the old supervisor why this one cannot take over; it keeps
// serving. The socket is closed.
func (in *Inbound) Fail(reason string) {
	in.s.send(&proto.Handover{Body: &proto.Handover_Failed{Failed: &proto.HandoverFailed{Reason: reason}}}, nil)
	in.s.close()
}

// Ready tells the old supervisor that this one's workers are ready: it
// begins the hand-over.
func (in *Inbound) Ready(pid int, version string) error {
	return in.s.send(&proto.Handover{Body: &proto.Handover_Ready{Ready: &proto.HandoverReady{Pid: uint32(pid), Version: version}}}, nil)
}

// State is the old supervisor's per-client limits.
type State struct {
	Buckets   []limits.BucketState
	Penalties []limits.PenaltyState
}

// Conns is a batch of connections; FDs[i] is Conns[i]'s descriptor, owned
// by whoever the batch is posted to.
type Conns struct {
	Conns []*proto.HandedConn
	FDs   []int
}

// BulkDone: every connection parked at the start has been received.
type BulkDone struct{}

// Progress is what the old supervisor still holds, as it drains.
type Progress struct {
	PID, Staying  int
	Sent, Drained uint64
}

// Closed: the old supervisor closed the socket (it holds nothing more to
// hand over), or the socket failed (Err).
type Closed struct{ Err error }

// Run reads frames until the old supervisor closes the socket, posting
// State, Conns, BulkDone and, last, Closed. post may block.
func (in *Inbound) Run(post func(any)) {
	defer in.s.close()
	buf, oob := recvBufs()
	for {
		m, fds, err := in.s.recv(buf, oob)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			post(Closed{Err: err})
			return
		}
		switch b := m.GetBody().(type) {
		case *proto.Handover_State:
			closeAll(fds)
			post(stateOf(b.State, time.Now()))
		case *proto.Handover_Conns:
			if len(fds) != len(b.Conns.GetConns()) {
				closeAll(fds)
				post(Closed{Err: fmt.Errorf("handover: %d connections with %d descriptors", len(b.Conns.GetConns()), len(fds))})
				return
			}
			post(Conns{Conns: b.Conns.GetConns(), FDs: fds})
		case *proto.Handover_BulkDone:
			closeAll(fds)
			post(BulkDone{})
		case *proto.Handover_Progress:
			closeAll(fds)
			p := b.Progress
			post(Progress{PID: int(p.GetPid()), Staying: int(p.GetStaying()), Sent: p.GetSent(), Drained: p.GetDrained()})
		default:
			closeAll(fds)
			post(Closed{Err: fmt.Errorf("handover: unexpected frame %T", m.GetBody())})
			return
		}
	}
}

func stateOf(m *proto.HandoverState, now time.Time) State {
	var s State
	for _, b := range m.GetBuckets() {
		var a netip.Addr
		if a.UnmarshalBinary(b.GetClient()) == nil {
			s.Buckets = append(s.Buckets, limits.BucketState{Client: a, Class: b.GetClass(), Tokens: b.GetTokens(), Age: time.Duration(b.GetAgeNanos())})
		}
	}
	for _, p := range m.GetPenalties() {
		var a netip.Addr
		if a.UnmarshalBinary(p.GetClient()) == nil {
			s.Penalties = append(s.Penalties, limits.PenaltyState{Key: a, Remaining: time.Duration(p.GetRemainingNanos())})
		}
	}
	return s
}

// StateFrame encodes the old supervisor's limits.
func StateFrame(buckets []limits.BucketState, penalties []limits.PenaltyState) *proto.Handover {
	m := &proto.HandoverState{}
	for _, b := range buckets {
		k, _ := b.Client.MarshalBinary()
		m.Buckets = append(m.Buckets, &proto.RateBucket{Client: k, Class: b.Class, Tokens: b.Tokens, AgeNanos: int64(b.Age)})
	}
	for _, p := range penalties {
		k, _ := p.Key.MarshalBinary()
		m.Penalties = append(m.Penalties, &proto.Penalty{Client: k, RemainingNanos: int64(p.Remaining)})
	}
	return &proto.Handover{Body: &proto.Handover_State{State: m}}
}

// BulkDoneFrame ends the bulk of n connections.
func BulkDoneFrame(n int) *proto.Handover {
	return &proto.Handover{Body: &proto.Handover_BulkDone{BulkDone: &proto.HandoverBulkDone{Conns: uint32(n)}}}
}

// ProgressFrame reports the old supervisor's drain.
func ProgressFrame(p Progress) *proto.Handover {
	return &proto.Handover{Body: &proto.Handover_Progress{Progress: &proto.HandoverProgress{
		Pid: uint32(p.PID), Staying: uint32(p.Staying), Sent: p.Sent, Drained: p.Drained}}}
}
