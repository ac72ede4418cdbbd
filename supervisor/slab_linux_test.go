package supervisor

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestAdmitAllocs: admitting a connection (its record, its timers, its
// client's lists, its poller registration) and closing it allocate nothing
// once the slab has room: a parked connection costs its record in the slab
// and nothing on the heap besides.
func TestAdmitAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	h := startAllocLoop(t)
	d := h.d
	// From h.c's client, which stays open, so no client record is made.
	peer := h.c.peer.addrPort()
	sock, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sock)
	cycle := func() {
		fd, err := unix.FcntlInt(uintptr(sock), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		n := d.conns.len()
		d.admit(fd, d.listeners[0].id, peer, false, false, false, time.Now())
		c := d.lists[listFreshTimers].last()
		if d.conns.len() != n+1 || c == nil || c.fd != fd || d.conns.get(c.id) != c {
			t.Fatalf("connection not admitted: %d records, was %d", d.conns.len(), n)
		}
		d.closeConn(c)
	}
	cycle()
	if allocs := testing.AllocsPerRun(200, cycle); allocs != 0 {
		t.Errorf("%.1f allocations per admitted and closed connection, want 0", allocs)
	}
}
