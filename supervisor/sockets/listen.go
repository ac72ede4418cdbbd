// Package sockets makes and takes the supervisor's listening sockets: it
// binds them, adopts those the init system passed (socket activation),
// accepts connections on them, and keeps inherited descriptors from
// reaching workers. Its sockets are raw descriptors for the loop's poller,
// never net.Listeners. It knows nothing of the loop.
package sockets

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sort"

	"github.com/gatehouse-dev/gatehouse/config"
	"golang.org/x/sys/unix"
)

// listenBacklog is the accept queue length asked of the kernel; it is capped
// by net.core.somaxconn.
const listenBacklog = 4096

// Listener is one bound, non-blocking, close-on-exec listening socket, as
// Open makes it.
type Listener struct {
	Name    string
	FD      int
	CfgAddr netip.AddrPort // the address the configuration asked for
	Addr    netip.AddrPort // the bound address (port filled in when 0 was asked)
	// Deferred: the kernel queues a connection only once its first bytes
	// arrived (SetDeferAccept), so accept finds input in it.
	Deferred bool
}

// Bind creates a non-blocking, close-on-exec listening socket on addr,
// with TCP_NODELAY for its connections (SetNoDelay). IPv6 sockets are
// IPV6_V6ONLY so that "[::]:80" and "0.0.0.0:80" can coexist.
func Bind(addr netip.AddrPort) (fd int, bound netip.AddrPort, err error) {
	family := unix.AF_INET
	if addr.Addr().Is6() && !addr.Addr().Is4In6() {
		family = unix.AF_INET6
	}
	fd, err = unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, bound, os.NewSyscallError("socket", err)
	}
	fail := func(call string, err error) (int, netip.AddrPort, error) {
		unix.Close(fd)
		return -1, bound, fmt.Errorf("listening on %s: %w", addr, os.NewSyscallError(call, err))
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return fail("setsockopt", err)
	}
	if err := SetNoDelay(fd); err != nil {
		return fail("setsockopt", err)
	}
	var sa unix.Sockaddr
	if family == unix.AF_INET6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
			return fail("setsockopt", err)
		}
		sa = &unix.SockaddrInet6{Port: int(addr.Port()), Addr: addr.Addr().As16()}
	} else {
		sa = &unix.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().Unmap().As4()}
	}
	if err := unix.Bind(fd, sa); err != nil {
		return fail("bind", err)
	}
	if err := unix.Listen(fd, listenBacklog); err != nil {
		return fail("listen", err)
	}
	got, err := unix.Getsockname(fd)
	if err != nil {
		return fail("getsockname", err)
	}
	return fd, AddrPort(got), nil
}

// SetNoDelay sets TCP_NODELAY on a socket: a listening one, or on other
// systems than Linux an accepted one. On Linux an accepted socket inherits
// it with the rest of the listener's TCP state (TestAcceptedSocketsNoDelay
// checks it), so no connection pays a system call for it. Without it a
// response written in two sends waits, once the client delays its ACK of
// the first, 40 ms for that ACK before the second leaves (Nagle's
// algorithm; docs/DESIGN.md §3.5). The supervisor's own answers, the
// workers' responses and the relays all go out on accepted sockets.
func SetNoDelay(fd int) error {
	return unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
}

// AddrPort converts a socket address to netip form.
func AddrPort(sa unix.Sockaddr) netip.AddrPort {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port))
	}
	return netip.AddrPort{}
}

// Open makes the listening sockets of ls, in their order: a
// listener named in inherited adopts that descriptor (socket activation), the
// others are bound. It takes ownership of every inherited descriptor: on
// error all of them, and every socket bound so far, are closed. An inherited
// descriptor whose name no listener has is an error. Its errors name the listener.
func Open(ls []config.Listener, inherited map[string]int) ([]Listener, error) {
	var out []Listener
	fail := func(err error) ([]Listener, error) {
		for _, l := range out {
			unix.Close(l.FD)
		}
		for name, fd := range inherited {
			if !slices.ContainsFunc(out, func(l Listener) bool { return l.Name == name }) {
				unix.Close(fd)
			}
		}
		return nil, err
	}
	var unknown []string
	for name := range inherited {
		if !slices.ContainsFunc(ls, func(l config.Listener) bool { return l.Name == name }) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fail(fmt.Errorf("inherited socket for listener %q, which the configuration does not have", unknown[0]))
	}
	for _, l := range ls {
		var (
			fd    int
			bound netip.AddrPort
			err   error
		)
		if ifd, ok := inherited[l.Name]; ok {
			fd, bound, err = Adopt(ifd) // on error, fail closes ifd
		} else {
			fd, bound, err = Bind(l.Address)
		}
		if err != nil {
			return fail(fmt.Errorf("listener %q: %w", l.Name, err))
		}
		out = append(out, Listener{Name: l.Name, FD: fd, CfgAddr: l.Address, Addr: bound, Deferred: SetDeferAccept(fd)})
	}
	return out, nil
}

// ErrNotListening is returned by Adopt for a descriptor that is not a
// listening TCP socket.
var ErrNotListening = errors.New("not a listening TCP socket")

// Adopt checks that fd, inherited from the init system, is a
// listening TCP socket and makes it non-blocking, close-on-exec and
// TCP_NODELAY, as Bind's sockets are. It stays a raw descriptor for the
// loop (never a net.Listener, whose netpoller registration would fight the
// dispatcher's epoll set). On error the caller still owns fd.
func Adopt(fd int) (int, netip.AddrPort, error) {
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		return -1, netip.AddrPort{}, fmt.Errorf("inherited descriptor %d: %w", fd, os.NewSyscallError("getsockopt", err))
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return -1, netip.AddrPort{}, fmt.Errorf("inherited descriptor %d: %w", fd, os.NewSyscallError("getsockname", err))
	}
	bound := AddrPort(sa)
	if typ != unix.SOCK_STREAM || !bound.IsValid() {
		return -1, netip.AddrPort{}, fmt.Errorf("inherited descriptor %d: %w", fd, ErrNotListening)
	}
	if on, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || on == 0 {
		return -1, netip.AddrPort{}, fmt.Errorf("inherited descriptor %d (%s): %w", fd, bound, ErrNotListening)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		return -1, netip.AddrPort{}, fmt.Errorf("inherited descriptor %d: %w", fd, os.NewSyscallError("fcntl", err))
	}
	if err := SetNoDelay(fd); err != nil {
		return -1, netip.AddrPort{}, fmt.Errorf("inherited descriptor %d (%s): %w", fd, bound, os.NewSyscallError("setsockopt", err))
	}
	unix.CloseOnExec(fd)
	return fd, bound, nil
}

// CloseInherited closes every inherited descriptor, for the errors before
// Open took them.
func CloseInherited(inherited map[string]int) {
	for _, fd := range inherited {
		unix.Close(fd)
	}
}
