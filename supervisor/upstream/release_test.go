package upstream

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// fakeWorker records what the broker sends a worker.
type fakeWorker struct {
	replies  []*proto.DialReply
	reclaims []string
}

func (f *fakeWorker) DialReply(_ uint64, r *proto.DialReply, fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
	f.replies = append(f.replies, r)
}

func (f *fakeWorker) Reclaimable() bool      { return true }
func (f *fakeWorker) Reclaim(name string)    { f.reclaims = append(f.reclaims, name) }
func (f *fakeWorker) last() *proto.DialReply { return f.replies[len(f.replies)-1] }

// The budget end to end against a real listener: a worker's share, the wait
// for Reclaims when max_connections is spent, the release that serves the
// waiting dial, and a worker gone while its dial is under way, whose result
// is dropped.
func TestBrokerBudgetReclaimAndGone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	results := make(chan any, 4)
	b := New(hclog.NewNullLogger(), func(r any) { results <- r })
	up := config.Upstream{Name: "app", MaxConnections: 2, MaxFails: 1, FailTimeout: time.Second, ConnectTimeout: 5 * time.Second,
		Addresses: []config.Address{{AddrPort: netip.MustParseAddrPort(ln.Addr().String())}}}
	b.Configure([]config.Upstream{up}, nil, nil, 2) // a share of 1
	now := time.Unix(1000, 0)
	finish := func() {
		t.Helper()
		select {
		case r := <-results:
			b.Dialed(r.(DialResult), now)
		case <-time.After(10 * time.Second):
			t.Fatal("no dial result")
		}
		if err := b.Check(); err != nil {
			t.Fatal(err)
		}
	}
	w1, w2, w3 := &fakeWorker{}, &fakeWorker{}, &fakeWorker{}
	b.Dial(w1, 1, "app", now)
	finish()
	if !w1.last().GetOk() {
		t.Fatalf("first dial: %v", w1.last())
	}
	b.Dial(w1, 2, "app", now)
	if r := w1.last(); !r.GetRefused() || len(w1.replies) != 2 {
		t.Fatalf("a dial over the worker's share: %v, want refused at once", r)
	}
	b.Dial(w2, 1, "app", now)
	finish()
	// The budget is spent: w3 waits while the holders are asked.
	b.Dial(w3, 1, "app", now)
	if len(w3.replies) != 0 || len(w1.reclaims) != 1 || len(w2.reclaims) != 1 || b.Pending(w3) != 1 {
		t.Fatalf("with the budget spent: replies %v, reclaims %v %v, pending %d", w3.replies, w1.reclaims, w2.reclaims, b.Pending(w3))
	}
	if !b.Holds(w1, w1.replies[0].GetConn(), "app") || b.Holds(w2, w1.replies[0].GetConn(), "app") {
		t.Fatal("Holds does not tell w1's connection from w2's")
	}
	b.Release(w1, w1.replies[0].GetConn(), "app", now)
	b.Reclaimed(w1, "app", now)
	if b.Pending(w3) != 1 || b.HeldFDs() != 1 {
		t.Fatalf("after w1's release: w3 pending %d, %d descriptors held", b.Pending(w3), b.HeldFDs())
	}
	// w3 dies while its dial is under way: the connection goes nowhere.
	b.Gone(w3, now)
	finish()
	if len(w3.replies) != 0 || b.HeldFDs() != 1 {
		t.Fatalf("a dial of a gone worker: replies %v, %d descriptors held, want none and 1", w3.replies, b.HeldFDs())
	}
	b.Gone(w2, now)
	if b.HeldFDs() != 0 || b.Reclaiming(w2, "app") {
		t.Fatalf("after w2 is gone: %d descriptors held", b.HeldFDs())
	}
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
}
