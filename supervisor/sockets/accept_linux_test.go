package sockets

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"golang.org/x/sys/unix"
)

// TestAcceptPeerAddress: Accept decodes the peer's address itself, for IPv4
// and IPv6 clients, and hands over a non-blocking, close-on-exec socket.
func TestAcceptPeerAddress(t *testing.T) {
	for _, c := range []struct{ listen, from string }{
		{"127.0.0.1:0", "127.0.0.2:0"},
		{"[::1]:0", "[::1]:0"},
	} {
		ln, err := net.Listen("tcp", c.listen)
		if err != nil {
			if c.listen[0] == '[' {
				t.Logf("no IPv6 loopback here: %v", err)
				continue
			}
			t.Fatal(err)
		}
		defer ln.Close()
		f, err := ln.(*net.TCPListener).File()
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		lfd := int(f.Fd())
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.MustParseAddrPort(c.from)), Timeout: 5 * time.Second}
		cc, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		var fd int
		var peer netip.AddrPort
		for i := 0; ; i++ {
			fd, peer, err = Accept(lfd)
			if err != unix.EAGAIN || i == 500 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("accept: %v", err)
		}
		defer unix.Close(fd)
		if want := cc.LocalAddr().(*net.TCPAddr).AddrPort(); peer != want {
			t.Errorf("peer %v, want %v", peer, want)
		}
		fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		if err != nil || fl&unix.O_NONBLOCK == 0 {
			t.Errorf("accepted socket flags %#x (%v): not non-blocking", fl, err)
		}
		fdfl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || fdfl&unix.FD_CLOEXEC == 0 {
			t.Errorf("accepted socket fd flags %#x (%v): not close-on-exec", fdfl, err)
		}
	}
}

// TestAcceptedSocketsNoDelay: every listener, bound or inherited from the
// init system without the option, hands out sockets with TCP_NODELAY set,
// with no system call at accept (docs/DESIGN.md §3.5). A socket accepted
// from a listener without it has it off, so the test sees the difference.
func TestAcceptedSocketsNoDelay(t *testing.T) {
	noDelay := func(lfd int, addr netip.AddrPort) int {
		t.Helper()
		c, err := net.DialTimeout("tcp", addr.String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// A byte, so that a deferring listener queues it at once.
		if _, err := c.Write([]byte{'G'}); err != nil {
			t.Fatal(err)
		}
		var fd int
		for i := 0; ; i++ {
			fd, _, err = Accept(lfd)
			if err != unix.EAGAIN || i == 500 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("accept: %v", err)
		}
		defer unix.Close(fd)
		v, err := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	plain, plainAddr := tcpSocket(t, true)
	defer unix.Close(plain)
	unix.SetNonblock(plain, true)
	if v := noDelay(plain, plainAddr); v != 0 {
		t.Fatalf("a socket accepted from a listener without TCP_NODELAY has it %d: the test cannot tell", v)
	}

	inherited, _ := tcpSocket(t, true)
	cfg := testConfig(
		config.Listener{Name: "activated", Address: netip.MustParseAddrPort("127.0.0.1:1")},
		config.Listener{Name: "bound", Address: netip.MustParseAddrPort("127.0.0.1:0")},
	)
	ls, err := Open(cfg.Listeners, map[string]int{"activated": inherited})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		defer unix.Close(l.FD)
	}
	for _, l := range ls {
		if v := noDelay(l.FD, l.Addr); v == 0 {
			t.Errorf("listener %q: accepted socket without TCP_NODELAY", l.Name)
		}
	}
}

// TestListenersDeferAccept: Open's listeners defer accept (TCP_DEFER_ACCEPT,
// docs/DESIGN.md §2.2): a connection that has sent nothing is not there to
// accept yet, one that sent its first bytes is.
func TestListenersDeferAccept(t *testing.T) {
	cfg := testConfig(config.Listener{Name: "bound", Address: netip.MustParseAddrPort("127.0.0.1:0")})
	ls, err := Open(cfg.Listeners, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := ls[0]
	defer unix.Close(l.FD)
	if v, err := unix.GetsockoptInt(l.FD, unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT); !l.Deferred || err != nil || v == 0 {
		t.Fatalf("listener deferred %v, TCP_DEFER_ACCEPT %d (%v)", l.Deferred, v, err)
	}
	dialed := time.Now()
	silent, err := net.DialTimeout("tcp", l.Addr.String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	speaking, err := net.DialTimeout("tcp", l.Addr.String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer speaking.Close()
	if _, err := speaking.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	var fd int
	for i := 0; ; i++ {
		fd, _, err = Accept(l.FD)
		if err != unix.EAGAIN || i == 500 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	defer unix.Close(fd)
	peer, _ := unix.Getpeername(fd)
	if got := AddrPort(peer); got != speaking.LocalAddr().(*net.TCPAddr).AddrPort() {
		t.Fatalf("accepted %v first, want the connection that sent its head (%v)", got, speaking.LocalAddr())
	}
	// The silent one waits in the kernel for about a second: not yet
	// (unless this test itself was held up that long).
	fd2, _, err := Accept(l.FD)
	if err == nil {
		unix.Close(fd2)
	}
	if err != unix.EAGAIN && time.Since(dialed) < 500*time.Millisecond {
		t.Fatalf("a silent connection accepted at once (%v): the listener does not defer", err)
	}
}
