package supervisor

import (
	"os"
	"sync"
	"testing"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
	"golang.org/x/sys/unix"
)

// TestSendRefusedForNow: a send the kernel refuses for now (ETOOMANYREFS:
// the account has more descriptors in flight than its descriptor limit) is
// kept and tried again; the worker is not given up. It is given up only
// when the refusals last sendHoldMax.
//
// The refusal is the kernel's own: the loop's thread loses the two
// capabilities that exempt it, the descriptor limit is lowered, and the
// test puts more descriptors in flight than that, on a socket nobody
// reads.
func TestSendRefusedForNow(t *testing.T) {
	h := startLoop(t, baseConfig(1, 4, ""))
	w := h.workers[0]
	h.inLoop(func(*dispatcher) { setExemptCaps(t, false) })
	var floods []func()
	t.Cleanup(func() {
		// Whatever a failure left held goes before the loop stops: the
		// clock is the test's, so nothing else would retry it.
		for _, end := range floods {
			end()
		}
		h.inLoop(func(*dispatcher) { setExemptCaps(t, true) })
		h.advance(sendRetryDelay)
	})
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	low := old
	low.Cur = 256
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Setrlimit(unix.RLIMIT_NOFILE, &old) })

	retries := func(n uint64) func(view.Snapshot) bool {
		return func(s view.Snapshot) bool { return s.Counters["send_retries"] >= n }
	}
	flood := inFlight(t, 400)
	floods = append(floods, flood)
	c := h.dial("127.0.0.2")
	h.send(c)
	h.waitFor("a Dispatch refused", retries(1))
	h.noFrame(w)
	h.advance(sendRetryDelay)
	h.waitFor("the Dispatch refused again", retries(2))
	h.noFrame(w)

	// The descriptors in flight are gone: the next try sends the Dispatch.
	flood()
	h.advance(sendRetryDelay)
	d := h.dispatched(w)
	if err := w.Send(&proto.Frame{Body: &proto.Frame_Done{Done: done(d.ConnId, 1, proto.Disposition_CLOSE)}}, -1); err != nil {
		t.Fatal(err)
	}
	if got, closed := closedByPeer(c); !closed {
		t.Fatalf("connection not closed after its Done (read %q)", got)
	}
	if w.killed.Load() {
		t.Fatal("the worker was killed for a refusal that passed")
	}

	// Refusals for sendHoldMax in a row give the worker up, as any failed
	// send does.
	floods = append(floods, inFlight(t, 400))
	n := h.snapshot().Counters["send_retries"]
	c = h.dial("127.0.0.3")
	h.send(c)
	h.waitFor("a Dispatch refused", retries(n+1))
	h.advance(sendHoldMax)
	h.waitFor("the worker given up", func(s view.Snapshot) bool { return s.Counters["worker_deaths"] == 1 })
	if !w.killed.Load() {
		t.Fatal("the worker was not given up after refusals for sendHoldMax")
	}
	if got, closed := closedByPeer(c); !closed {
		t.Fatalf("the given-up worker's connection was not closed (read %q)", got)
	}
}

// inFlight puts n copies of a pipe's descriptor in flight on a socket pair
// nobody reads, in messages of at most 200, and returns what ends them (once).
func inFlight(t *testing.T, n int) (end func()) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	end = func() {
		once.Do(func() {
			unix.Close(p[0])
			unix.Close(p[1])
			r.Close()
			w.Close()
		})
	}
	for n > 0 {
		k := min(n, 200)
		fds := make([]int, k)
		for i := range fds {
			fds[i] = int(r.Fd())
		}
		if err := unix.Sendmsg(p[0], []byte{1}, unix.UnixRights(fds...), nil, unix.MSG_DONTWAIT); err != nil {
			end()
			t.Fatalf("putting descriptors in flight: %v", err)
		}
		n -= k
	}
	return end
}

// setExemptCaps clears (or restores from the permitted set) the calling
// thread's effective CAP_SYS_RESOURCE and CAP_SYS_ADMIN, which exempt a
// sender from the cap on descriptors in flight.
func setExemptCaps(t *testing.T, on bool) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		t.Error(err)
		return
	}
	for _, c := range []uint{unix.CAP_SYS_RESOURCE, unix.CAP_SYS_ADMIN} {
		bit := uint32(1) << (c % 32)
		if on {
			data[c/32].Effective |= data[c/32].Permitted & bit
		} else {
			data[c/32].Effective &^= bit
		}
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		t.Error(err)
	}
}
