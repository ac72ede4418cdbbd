package supervisor

import "testing"

func TestConnListFIFO(t *testing.T) {
	var s connSlab
	timers := newConnList(&s, listIdleTimers)
	waits := newConnList(&s, listWaiting)
	cs := make([]*conn, 5)
	ids := map[uint64]uint64{} // connection id -> index
	for i := range cs {
		cs[i] = s.alloc()
		ids[cs[i].id] = uint64(i)
		timers.push(cs[i])
		waits.push(cs[i])
	}
	// One connection sits in both lists at once, through separate links.
	timers.remove(cs[2])
	if cs[2].tlist != listNone || cs[2].qlist != listWaiting {
		t.Fatalf("remove from timers touched the wait links")
	}
	timers.remove(cs[2]) // not a member any more: no effect
	if waits.next(cs[1]) != cs[2] || timers.next(cs[1]) != cs[3] || timers.last() != cs[4] {
		t.Fatalf("links wrong after removing from one list")
	}
	var got []uint64
	for c := timers.pop(); c != nil; c = timers.pop() {
		got = append(got, ids[c.id])
	}
	if want := []uint64{0, 1, 3, 4}; !equal(got, want) {
		t.Errorf("timers popped %v, want %v", got, want)
	}
	if timers.n != 0 || timers.first() != nil || timers.last() != nil {
		t.Errorf("drained list not empty: n=%d", timers.n)
	}
	waits.remove(cs[0])
	waits.remove(cs[4])
	got = got[:0]
	for c := waits.pop(); c != nil; c = waits.pop() {
		got = append(got, ids[c.id])
	}
	if want := []uint64{1, 2, 3}; !equal(got, want) {
		t.Errorf("waits popped %v, want %v", got, want)
	}
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
