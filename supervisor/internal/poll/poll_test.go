//go:build linux || darwin || dragonfly || freebsd || openbsd

package poll_test

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/internal/poll"
	"golang.org/x/sys/unix"
)

// Bounds for the tests. long is generous: it only bounds a failure.
const (
	long  = 5 * time.Second
	quiet = 50 * time.Millisecond // how long "no event" is watched for
)

// pair is a registered descriptor fd and its peer.
type pair struct {
	fd    int                 // non-blocking, watched by the Poller; owned by the test
	write func(tb testing.TB) // writes one byte from the peer
	close func()              // closes the peer
	drain func(tb testing.TB) // reads everything pending on fd
	kind  string
}

func newPoller(tb testing.TB) *poll.Poller {
	tb.Helper()
	p, err := poll.New()
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}

func rawPeer(tb testing.TB, kind string, fd, peer int) pair {
	var once sync.Once
	tb.Cleanup(func() {
		unix.Close(fd)
		once.Do(func() { unix.Close(peer) })
	})
	return pair{
		fd:   fd,
		kind: kind,
		write: func(tb testing.TB) {
			if _, err := unix.Write(peer, []byte{'x'}); err != nil {
				tb.Fatalf("write: %v", err)
			}
		},
		close: func() { once.Do(func() { unix.Close(peer) }) },
		drain: func(tb testing.TB) { drainFD(tb, fd) },
	}
}

func drainFD(tb testing.TB, fd int) {
	var b [512]byte
	for {
		n, err := unix.Read(fd, b[:])
		if err == unix.EAGAIN || n == 0 {
			return
		}
		if err != nil && err != unix.EINTR {
			tb.Fatalf("read: %v", err)
		}
	}
}

func socketPair(tb testing.TB) pair {
	tb.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		tb.Fatalf("socketpair: %v", err)
	}
	for _, fd := range fds {
		unix.CloseOnExec(fd)
		if err := unix.SetNonblock(fd, true); err != nil {
			tb.Fatalf("set nonblock: %v", err)
		}
	}
	return rawPeer(tb, "unix", fds[0], fds[1])
}

func pipePair(tb testing.TB) pair {
	tb.Helper()
	var fds [2]int
	if err := unix.Pipe(fds[:]); err != nil {
		tb.Fatalf("pipe: %v", err)
	}
	for _, fd := range fds {
		unix.CloseOnExec(fd)
		if err := unix.SetNonblock(fd, true); err != nil {
			tb.Fatalf("set nonblock: %v", err)
		}
	}
	return rawPeer(tb, "pipe", fds[0], fds[1])
}

// tcpListener returns a loopback listener; its fd is a close-on-exec dup.
func tcpListener(tb testing.TB) (*net.TCPListener, int) {
	tb.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	tb.Cleanup(func() { ln.Close() })
	rc, err := ln.SyscallConn()
	if err != nil {
		tb.Fatal(err)
	}
	fd := -1
	var derr error
	rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) })
	if derr != nil {
		tb.Fatalf("dup: %v", derr)
	}
	tb.Cleanup(func() { unix.Close(fd) })
	return ln, fd
}

func tcpPair(tb testing.TB) pair {
	tb.Helper()
	ln, _ := tcpListener(tb)
	peer, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		tb.Fatalf("dial: %v", err)
	}
	c, err := ln.AcceptTCP()
	if err != nil {
		tb.Fatalf("accept: %v", err)
	}
	rc, err := c.SyscallConn()
	if err != nil {
		tb.Fatal(err)
	}
	fd := -1
	var derr error
	rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) })
	if derr != nil {
		tb.Fatalf("dup: %v", derr)
	}
	tb.Cleanup(func() {
		unix.Close(fd)
		c.Close()
		peer.Close()
	})
	return pair{
		fd:   fd,
		kind: "tcp",
		write: func(tb testing.TB) {
			if _, err := peer.Write([]byte{'x'}); err != nil {
				tb.Fatalf("write: %v", err)
			}
		},
		close: func() { peer.Close() },
		drain: func(tb testing.TB) { drainFD(tb, fd) },
	}
}

var pairKinds = []struct {
	name string
	new  func(testing.TB) pair
}{
	{"unix", socketPair},
	{"tcp", tcpPair},
	{"pipe", pipePair},
}

// wait calls Wait and returns a copy of the events, failing on error.
func wait(tb testing.TB, p *poll.Poller, timeout time.Duration) []poll.Event {
	tb.Helper()
	evs := make([]poll.Event, 16)
	n, err := p.Wait(evs, timeout)
	if err != nil {
		tb.Fatalf("Wait: %v", err)
	}
	return evs[:n]
}

// waitToken waits up to long for an event with token and returns it.
func waitToken(tb testing.TB, p *poll.Poller, token uint64) poll.Event {
	tb.Helper()
	end := time.Now().Add(long)
	for time.Now().Before(end) {
		for _, e := range wait(tb, p, time.Until(end)) {
			if e.Token == token {
				return e
			}
		}
	}
	tb.Fatalf("no event for token %#x within %v", token, long)
	return poll.Event{}
}

// noToken checks that no event for token arrives within quiet.
func noToken(tb testing.TB, p *poll.Poller, token uint64) {
	tb.Helper()
	for _, e := range wait(tb, p, quiet) {
		if e.Token == token {
			tb.Fatalf("unexpected event %+v", e)
		}
	}
}

func TestLevelTriggeredIn(t *testing.T) {
	for _, k := range pairKinds {
		t.Run(k.name, func(t *testing.T) {
			p := newPoller(t)
			pr := k.new(t)
			const tok = 7
			if err := p.Add(pr.fd, tok, poll.In); err != nil {
				t.Fatalf("Add: %v", err)
			}
			noToken(t, p, tok)
			pr.write(t)
			for i := range 3 {
				e := waitToken(t, p, tok)
				if !e.Readable || e.Writable || e.HangUp {
					t.Fatalf("Wait %d: got %+v, want Readable only", i, e)
				}
			}
			pr.drain(t)
			noToken(t, p, tok)
		})
	}
}

func TestListenerLevelTriggered(t *testing.T) {
	p := newPoller(t)
	ln, fd := tcpListener(t)
	const tok = 2 << 56
	if err := p.Add(fd, tok, poll.In); err != nil {
		t.Fatalf("Add: %v", err)
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 2 { // not accepted: reported again
		if e := waitToken(t, p, tok); !e.Readable {
			t.Fatalf("got %+v, want Readable", e)
		}
	}
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	noToken(t, p, tok)
	if err := p.Del(fd); err != nil {
		t.Fatalf("Del: %v", err)
	}
}

func TestOneShot(t *testing.T) {
	for _, k := range pairKinds {
		t.Run(k.name, func(t *testing.T) {
			p := newPoller(t)
			pr := k.new(t)
			const tok = 4<<56 | 1
			if err := p.Add(pr.fd, tok, poll.In|poll.OneShot); err != nil {
				t.Fatalf("Add: %v", err)
			}
			pr.write(t)
			if e := waitToken(t, p, tok); !e.Readable {
				t.Fatalf("got %+v, want Readable", e)
			}
			noToken(t, p, tok) // data still pending, but disarmed
			pr.write(t)
			noToken(t, p, tok)
			// Mod re-arms, and the still-pending data is reported again.
			if err := p.Mod(pr.fd, tok+1, poll.In|poll.OneShot); err != nil {
				t.Fatalf("Mod: %v", err)
			}
			if e := waitToken(t, p, tok+1); !e.Readable {
				t.Fatalf("got %+v, want Readable", e)
			}
			noToken(t, p, tok+1)
		})
	}
}

// TestOneShotBothDirections checks that OneShot disarms the whole
// registration, not one direction (kqueue has a filter per direction).
func TestOneShotBothDirections(t *testing.T) {
	p := newPoller(t)
	pr := socketPair(t)
	const tok = 99
	if err := p.Add(pr.fd, tok, poll.In|poll.Out|poll.OneShot); err != nil {
		t.Fatalf("Add: %v", err)
	}
	if e := waitToken(t, p, tok); !e.Writable {
		t.Fatalf("got %+v, want Writable", e)
	}
	pr.write(t) // would make the read side fire if it were still armed
	noToken(t, p, tok)
	if err := p.Mod(pr.fd, tok, poll.In|poll.Out|poll.OneShot); err != nil {
		t.Fatalf("Mod: %v", err)
	}
	if e := waitToken(t, p, tok); !e.Readable || !e.Writable {
		t.Fatalf("got %+v, want Readable and Writable in one event", e)
	}
	noToken(t, p, tok)
}

func TestModAddsOut(t *testing.T) {
	for _, k := range pairKinds {
		if k.name == "pipe" {
			continue // the read end of a pipe is never writable
		}
		t.Run(k.name, func(t *testing.T) {
			p := newPoller(t)
			pr := k.new(t)
			const tok = 3<<56 | 5
			if err := p.Add(pr.fd, tok, poll.In); err != nil {
				t.Fatalf("Add: %v", err)
			}
			noToken(t, p, tok)
			if err := p.Mod(pr.fd, tok, poll.In|poll.Out); err != nil {
				t.Fatalf("Mod: %v", err)
			}
			if e := waitToken(t, p, tok); !e.Writable || e.Readable {
				t.Fatalf("got %+v, want Writable only", e)
			}
			// Both directions ready: one event, both flags.
			pr.write(t)
			if e := waitToken(t, p, tok); !e.Writable || !e.Readable {
				t.Fatalf("got %+v, want Readable and Writable", e)
			}
			// And back: Out is dropped.
			pr.drain(t)
			if err := p.Mod(pr.fd, tok, poll.In); err != nil {
				t.Fatalf("Mod: %v", err)
			}
			noToken(t, p, tok)
		})
	}
}

func TestHangUp(t *testing.T) {
	for _, k := range pairKinds {
		for _, pending := range []bool{false, true} {
			name := k.name + "/empty"
			if pending {
				name = k.name + "/pending"
			}
			t.Run(name, func(t *testing.T) {
				p := newPoller(t)
				pr := k.new(t)
				const tok = 1<<63 | 3
				if err := p.Add(pr.fd, tok, poll.In); err != nil {
					t.Fatalf("Add: %v", err)
				}
				if pending {
					pr.write(t)
				}
				pr.close()
				// The data and the EOF may be reported separately on TCP.
				end := time.Now().Add(long)
				var e poll.Event
				for !e.HangUp && time.Now().Before(end) {
					e = waitToken(t, p, tok)
				}
				if !e.HangUp {
					t.Fatalf("got %+v, want HangUp", e)
				}
				if pending && !e.Readable {
					t.Fatalf("got %+v, want Readable with data pending", e)
				}
			})
		}
	}
}

func TestDel(t *testing.T) {
	for _, k := range pairKinds {
		t.Run(k.name, func(t *testing.T) {
			p := newPoller(t)
			pr := k.new(t)
			const tok = 11
			if err := p.Add(pr.fd, tok, poll.In); err != nil {
				t.Fatalf("Add: %v", err)
			}
			pr.write(t)
			waitToken(t, p, tok)
			if err := p.Del(pr.fd); err != nil {
				t.Fatalf("Del: %v", err)
			}
			noToken(t, p, tok)
			if err := p.Del(pr.fd); !errors.Is(err, unix.ENOENT) {
				t.Fatalf("second Del: got %v, want ENOENT", err)
			}
			if err := p.Mod(pr.fd, tok, poll.In); !errors.Is(err, unix.ENOENT) {
				t.Fatalf("Mod after Del: got %v, want ENOENT", err)
			}
			// Add again after Del works.
			if err := p.Add(pr.fd, tok+1, poll.In); err != nil {
				t.Fatalf("Add after Del: %v", err)
			}
			waitToken(t, p, tok+1)
			if err := p.Del(pr.fd); err != nil {
				t.Fatalf("Del: %v", err)
			}
		})
	}
}

func TestWakeUnblocksWait(t *testing.T) {
	p := newPoller(t)
	done := make(chan []poll.Event, 1)
	errc := make(chan error, 1)
	go func() {
		evs := make([]poll.Event, 4)
		n, err := p.Wait(evs, -1)
		errc <- err
		done <- evs[:n]
	}()
	time.Sleep(quiet) // let Wait block; the test is valid either way
	go func() {
		if err := p.Wake(); err != nil {
			t.Errorf("Wake: %v", err)
		}
	}()
	select {
	case err := <-errc:
		evs := <-done
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
		if len(evs) != 1 || evs[0] != (poll.Event{Token: poll.WakeToken}) {
			t.Fatalf("got %+v, want one WakeToken event", evs)
		}
	case <-time.After(long):
		t.Fatalf("Wait(-1) not woken within %v", long)
	}
}

func TestWakeCoalesces(t *testing.T) {
	p := newPoller(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if err := p.Wake(); err != nil {
					t.Errorf("Wake: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	evs := wait(t, p, long)
	if len(evs) != 1 || evs[0].Token != poll.WakeToken {
		t.Fatalf("got %+v, want one WakeToken event", evs)
	}
	if evs := wait(t, p, 0); len(evs) != 0 {
		t.Fatalf("after the wake was reported: got %+v, want none", evs)
	}
	// A Wake after the drain is reported again.
	if err := p.Wake(); err != nil {
		t.Fatalf("Wake: %v", err)
	}
	waitToken(t, p, poll.WakeToken)
}

func TestWaitTimeout(t *testing.T) {
	p := newPoller(t)
	pr := socketPair(t)
	if err := p.Add(pr.fd, 1, poll.In); err != nil {
		t.Fatalf("Add: %v", err)
	}
	for _, d := range []time.Duration{0, time.Microsecond, 100 * time.Millisecond} {
		start := time.Now()
		evs := wait(t, p, d)
		if el := time.Since(start); el > long {
			t.Errorf("Wait(%v) took %v", d, el)
		}
		if len(evs) != 0 {
			t.Errorf("Wait(%v): got %+v, want none", d, evs)
		}
	}
}

func TestTokenRoundTrip(t *testing.T) {
	tokens := []uint64{
		0, 1, 12345,
		1<<32 - 1, 1 << 32, 1<<31 | 1,
		4<<56 | 12345, 1<<63 | 7,
		poll.WakeToken - 1, 0xc000_0000_0000, // looks like a heap address
	}
	p := newPoller(t)
	byToken := make(map[uint64]bool)
	for _, tok := range tokens {
		pr := socketPair(t)
		if err := p.Add(pr.fd, tok, poll.In); err != nil {
			t.Fatalf("Add(%#x): %v", tok, err)
		}
		pr.write(t)
		byToken[tok] = false
	}
	evs := make([]poll.Event, 2*len(tokens))
	end := time.Now().Add(long)
	for seen := 0; seen < len(tokens) && time.Now().Before(end); {
		n, err := p.Wait(evs, time.Until(end))
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
		for _, e := range evs[:n] {
			got, ok := byToken[e.Token]
			if !ok {
				t.Fatalf("event with unknown token %#x", e.Token)
			}
			if !got {
				byToken[e.Token] = true
				seen++
			}
		}
	}
	for tok, got := range byToken {
		if !got {
			t.Errorf("token %#x: no event", tok)
		}
	}
}

func TestWakeTokenReserved(t *testing.T) {
	p := newPoller(t)
	pr := socketPair(t)
	if err := p.Add(pr.fd, poll.WakeToken, poll.In); !errors.Is(err, poll.ErrWakeToken) {
		t.Fatalf("Add(WakeToken): got %v, want ErrWakeToken", err)
	}
	if err := p.Add(pr.fd, 1, poll.In); err != nil {
		t.Fatal(err)
	}
	if err := p.Mod(pr.fd, poll.WakeToken, poll.In); !errors.Is(err, poll.ErrWakeToken) {
		t.Fatalf("Mod(WakeToken): got %v, want ErrWakeToken", err)
	}
}

func TestCloseOnExec(t *testing.T) {
	p := newPoller(t)
	for _, fd := range p.FDs() {
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil {
			t.Fatalf("F_GETFD %d: %v", fd, err)
		}
		if flags&unix.FD_CLOEXEC == 0 {
			t.Errorf("fd %d is not close-on-exec", fd)
		}
	}
}

func TestClosed(t *testing.T) {
	p, err := poll.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	evs := make([]poll.Event, 1)
	if _, err := p.Wait(evs, 0); !errors.Is(err, poll.ErrClosed) {
		t.Errorf("Wait: got %v, want ErrClosed", err)
	}
	if err := p.Wake(); !errors.Is(err, poll.ErrClosed) {
		t.Errorf("Wake: got %v, want ErrClosed", err)
	}
	if err := p.Add(0, 1, poll.In); !errors.Is(err, poll.ErrClosed) {
		t.Errorf("Add: got %v, want ErrClosed", err)
	}
	if err := p.Close(); !errors.Is(err, poll.ErrClosed) {
		t.Errorf("second Close: got %v, want ErrClosed", err)
	}
}

// TestWakeDuringClose runs Wake concurrently with Close (for -race).
func TestWakeDuringClose(t *testing.T) {
	p, err := poll.New()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 1000 {
			if err := p.Wake(); err != nil && !errors.Is(err, poll.ErrClosed) {
				t.Errorf("Wake: %v", err)
			}
		}
	}()
	wait(t, p, 0)
	p.Close()
	wg.Wait()
}

func TestSteadyStateAllocs(t *testing.T) {
	p := newPoller(t)
	pr := socketPair(t)
	if err := p.Add(pr.fd, 1, poll.In|poll.OneShot); err != nil {
		t.Fatal(err)
	}
	pr.write(t)
	evs := make([]poll.Event, 8)
	cycle := func() {
		if err := p.Mod(pr.fd, 1, poll.In|poll.OneShot); err != nil {
			t.Fatal(err)
		}
		if n, err := p.Wait(evs, time.Second); n != 1 || err != nil {
			t.Fatalf("Wait: %d, %v", n, err)
		}
	}
	cycle()
	if a := testing.AllocsPerRun(100, cycle); a != 0 {
		t.Errorf("Mod+Wait allocates %v times per cycle, want 0", a)
	}
}

func BenchmarkModWait(b *testing.B) {
	p := newPoller(b)
	pr := socketPair(b)
	if err := p.Add(pr.fd, 1, poll.In|poll.OneShot); err != nil {
		b.Fatal(err)
	}
	pr.write(b)
	evs := make([]poll.Event, 8)
	for b.Loop() {
		if err := p.Mod(pr.fd, 1, poll.In|poll.OneShot); err != nil {
			b.Fatal(err)
		}
		if n, err := p.Wait(evs, time.Second); n != 1 || err != nil {
			b.Fatalf("Wait: %d, %v", n, err)
		}
	}
}

func BenchmarkAddWaitDel(b *testing.B) {
	p := newPoller(b)
	pr := socketPair(b)
	pr.write(b)
	evs := make([]poll.Event, 8)
	for b.Loop() {
		if err := p.Add(pr.fd, 1, poll.In|poll.OneShot); err != nil {
			b.Fatal(err)
		}
		if n, err := p.Wait(evs, time.Second); n != 1 || err != nil {
			b.Fatalf("Wait: %d, %v", n, err)
		}
		if err := p.Del(pr.fd); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWakeWait(b *testing.B) {
	p := newPoller(b)
	evs := make([]poll.Event, 8)
	for b.Loop() {
		if err := p.Wake(); err != nil {
			b.Fatal(err)
		}
		if n, err := p.Wait(evs, time.Second); n != 1 || err != nil {
			b.Fatalf("Wait: %d, %v", n, err)
		}
	}
}
