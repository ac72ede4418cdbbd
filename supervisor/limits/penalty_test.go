package limits

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

func TestPenaltyBox(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	a, b := netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3")
	box := NewPenaltyBox(3, time.Minute, 100)
	steps := []struct {
		at       time.Duration
		strike   netip.Addr
		want     bool // strike penalized it
		refusedA bool // a is refused right after
	}{
		{0, a, false, false},
		{10 * time.Second, a, false, false},
		{10 * time.Second, b, false, false},
		// The first death left the window: two within it.
		{61 * time.Second, a, false, false},
		{62 * time.Second, a, true, true},
		// Deaths while refused do not extend the penalty.
		{100 * time.Second, a, false, true},
		{121 * time.Second, b, false, true},
		// Over at 122 s; the count starts again.
		{122 * time.Second, a, false, false},
	}
	for i, s := range steps {
		now := t0.Add(s.at)
		if got := box.Strike(s.strike, now); got != s.want {
			t.Errorf("step %d: strike(%v) at %v = %v, want %v", i, s.strike, s.at, got, s.want)
		}
		if got := box.Penalized(a, now); got != s.refusedA {
			t.Errorf("step %d: penalized(a) at %v = %v, want %v", i, s.at, got, s.refusedA)
		}
	}
	if box.Penalized(b, t0.Add(122*time.Second)) {
		t.Error("b penalized")
	}
	if box.Penalties() != 1 {
		t.Errorf("penalties = %d, want 1", box.Penalties())
	}
	l := box.List(t0.Add(122 * time.Second))
	if len(l) != 2 || l[0].Key != "127.0.0.2" || l[0].Deaths != 1 || l[0].Refused != 3 || l[0].Remaining != 0 {
		t.Errorf("list = %+v", l)
	}
}

// The box is bounded: past max keys the least recently struck is forgotten,
// so a flood of addresses costs memory only up to the bound.
func TestPenaltyBoxBounded(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	box := NewPenaltyBox(1, time.Hour, 10)
	first := netip.MustParseAddr("10.0.0.1")
	box.Strike(first, t0)
	if !box.Penalized(first, t0) {
		t.Fatal("threshold 1: not penalized at once")
	}
	for i := 0; i < 1000; i++ {
		box.Strike(netip.MustParseAddr(fmt.Sprintf("10.1.%d.%d", i/256, i%256)), t0)
		if len(box.entries) > 10 {
			t.Fatalf("after %d keys the box holds %d entries, over its bound 10", i+2, len(box.entries))
		}
	}
	if box.Penalized(first, t0) {
		t.Error("the least recently struck key was kept past the bound")
	}
	n := 0
	for el := box.lru.Front(); el != nil; el = el.Next() {
		n++
	}
	if n != len(box.entries) {
		t.Errorf("LRU list holds %d entries, map %d", n, len(box.entries))
	}
	box.Configure(1, time.Hour, 3)
	if len(box.entries) != 3 || box.lru.Len() != 3 {
		t.Errorf("after lowering the bound to 3: %d entries", len(box.entries))
	}
	// Off: nothing is struck.
	box.Configure(0, time.Hour, 3)
	if box.Strike(netip.MustParseAddr("10.9.9.9"), t0) {
		t.Error("threshold 0 penalized")
	}
}

// A penalty imposed by another instance refuses the key here until its end,
// and never shortens one in force.
func TestPenaltyBoxImpose(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	a := netip.MustParseAddr("192.0.2.7")
	box := NewPenaltyBox(3, time.Minute, 100)
	if !box.Impose(a, t0.Add(30*time.Second), t0) || !box.Penalized(a, t0.Add(29*time.Second)) || box.Penalized(a, t0.Add(30*time.Second)) {
		t.Fatal("an imposed penalty did not refuse the key for its span")
	}
	if box.Impose(a, t0.Add(10*time.Second), t0) {
		t.Error("a shorter penalty replaced a longer one")
	}
	if box.Impose(a, t0, t0) {
		t.Error("a penalty already over was imposed")
	}
	if box.Imported() != 1 || box.Penalties() != 0 {
		t.Errorf("Imported %d, Penalties %d", box.Imported(), box.Penalties())
	}
	off := NewPenaltyBox(0, time.Minute, 100)
	if off.Impose(a, t0.Add(time.Minute), t0) || off.Penalized(a, t0) {
		t.Error("penalties off, yet an imposed one refused the key")
	}
}
