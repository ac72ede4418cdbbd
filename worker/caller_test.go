package worker

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"golang.org/x/sys/unix"
)

// streamPair is a real SEQPACKET socketpair with a Stream on each end: the
// worker's and one standing in for the supervisor's.
func streamPair(t *testing.T) (worker, super *ipc.Stream) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	worker, err = ipc.NewStream(os.NewFile(uintptr(fds[0]), "worker"))
	if err != nil {
		t.Fatal(err)
	}
	super, err = ipc.NewStream(os.NewFile(uintptr(fds[1]), "supervisor"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { worker.Close(); super.Close() })
	return worker, super
}

// startCaller runs a caller with cap slots over a socketpair, with the
// worker's frame reader delivering replies; it returns the supervisor's end
// and a channel of the requests that reach it.
func startCaller(t *testing.T, cap int) (*caller, *ipc.Stream, <-chan *proto.Frame) {
	t.Helper()
	ws, ss := streamPair(t)
	c := &caller{ch: ws, slots: ipc.NewInFlight(cap)}
	go func() {
		for {
			f := new(proto.Frame)
			fd, err := ws.Recv(f)
			if err != nil {
				return
			}
			c.deliver(reply{f: f, fd: fd})
		}
	}()
	reqs := make(chan *proto.Frame, 64)
	go func() {
		defer close(reqs)
		for {
			f := new(proto.Frame)
			if _, err := ss.Recv(f); err != nil {
				return
			}
			reqs <- f
		}
	}()
	return c, ss, reqs
}

func rateReply(id uint64) *proto.Frame {
	return &proto.Frame{Id: id, Body: &proto.Frame_RateReply{RateReply: &proto.RateReply{Allowed: true}}}
}

// quiet fails if another request reaches the supervisor while the caller
// already has every slot's request outstanding.
func quiet(t *testing.T, reqs <-chan *proto.Frame, outstanding int) {
	t.Helper()
	select {
	case f := <-reqs:
		t.Fatalf("request %d sent with %d outstanding at the cap", f.GetId(), outstanding)
	case <-time.After(30 * time.Millisecond):
	}
}

// TestCallerNeverExceedsTheCap runs more concurrent calls than the cap: the
// supervisor's side, holding the same cap as the real one does, sees at most
// cap requests outstanding and never has to refuse one; the excess callers
// wait for replies instead.
func TestCallerNeverExceedsTheCap(t *testing.T) {
	const cap, calls = 3, 12
	c, ss, reqs := startCaller(t, cap)
	super := ipc.NewInFlight(cap)

	var wg sync.WaitGroup
	var failed atomic.Int32
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; i < calls; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.call(ctx, &proto.Frame{Body: &proto.Frame_RateCheck{RateCheck: &proto.RateCheck{ConnId: 1}}}, nil)
			if err != nil || !r.f.GetRateReply().GetAllowed() {
				failed.Add(1)
			}
		}()
	}

	var outstanding []uint64
	answered := 0
	for answered < calls {
		want := min(cap, calls-answered)
		for len(outstanding) < want {
			select {
			case f := <-reqs:
				if err := super.TryAcquire(); err != nil {
					t.Fatalf("supervisor would refuse request %d: %v", f.GetId(), err)
				}
				outstanding = append(outstanding, f.GetId())
			case <-ctx.Done():
				t.Fatalf("%d requests outstanding, %d answered: the callers stalled", len(outstanding), answered)
			}
		}
		if len(outstanding) == cap {
			quiet(t, reqs, len(outstanding))
		}
		// As the supervisor does: the slot is free before the reply is
		// written.
		super.Release()
		if err := ss.Send(rateReply(outstanding[0]), -1); err != nil {
			t.Fatal(err)
		}
		outstanding = outstanding[1:]
		answered++
	}
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d calls failed", n)
	}
	if n := c.slots.InUse(); n != 0 {
		t.Fatalf("%d slots still taken after every reply", n)
	}
}

// TestCallerAbandonedCallKeepsItsSlot: a call whose context ends before its
// reply is still outstanding at the supervisor, so its slot stays taken until
// the reply comes, and the reply goes to the orphan handler.
func TestCallerAbandonedCallKeepsItsSlot(t *testing.T) {
	c, ss, reqs := startCaller(t, 1)
	orphaned := make(chan uint64, 1)

	ctx, cancel := context.WithCancel(context.Background())
	errA := make(chan error, 1)
	go func() {
		_, err := c.call(ctx, &proto.Frame{Body: &proto.Frame_RateCheck{RateCheck: &proto.RateCheck{ConnId: 1}}}, func(r reply) {
			orphaned <- r.f.GetId()
		})
		errA <- err
	}()
	a := <-reqs
	cancel()
	if err := <-errA; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned call returned %v, want context.Canceled", err)
	}

	errB := make(chan error, 1)
	go func() {
		_, err := c.call(context.Background(), &proto.Frame{Body: &proto.Frame_RateCheck{RateCheck: &proto.RateCheck{ConnId: 1}}}, nil)
		errB <- err
	}()
	quiet(t, reqs, 1)

	if err := ss.Send(rateReply(a.GetId()), -1); err != nil {
		t.Fatal(err)
	}
	if id := <-orphaned; id != a.GetId() {
		t.Fatalf("orphan got reply %d, want %d", id, a.GetId())
	}
	b := <-reqs
	if err := ss.Send(rateReply(b.GetId()), -1); err != nil {
		t.Fatal(err)
	}
	if err := <-errB; err != nil {
		t.Fatalf("second call: %v", err)
	}
}
