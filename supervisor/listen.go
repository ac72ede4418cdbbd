package supervisor

import (
	"fmt"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// listenBacklog is the accept queue length asked of the kernel; it is capped
// by net.core.somaxconn.
const listenBacklog = 4096

// listener is one bound, non-blocking listening socket owned by the loop.
type listener struct {
	id      uint64 // stable across reloads; the poller token
	name    string
	fd      int
	cfgAddr netip.AddrPort // the address the configuration asked for
	addr    netip.AddrPort // the bound address (port filled in when 0 was asked)
}

// bindTCP creates a non-blocking, close-on-exec listening socket on addr.
// IPv6 sockets are IPV6_V6ONLY so that "[::]:80" and "0.0.0.0:80" can coexist.
func bindTCP(addr netip.AddrPort) (fd int, bound netip.AddrPort, err error) {
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
	return fd, sockaddrAddrPort(got), nil
}

// sockaddrAddrPort converts a socket address to netip form.
func sockaddrAddrPort(sa unix.Sockaddr) netip.AddrPort {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port))
	}
	return netip.AddrPort{}
}
