package sockets

import (
	"encoding/binary"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Accept takes one connection, non-blocking and close-on-exec atomically,
// and returns its peer's address. It calls accept4 itself: x/sys's Accept4
// asks the kernel for the socket's protocol (a getsockopt) and allocates the
// address on every connection. The listener is non-blocking, so the call is
// raw: it never blocks, and need not wake the runtime's monitor.
func Accept(lfd int) (int, netip.AddrPort, error) {
	var rsa unix.RawSockaddrAny
	n := uint32(unix.SizeofSockaddrAny)
	fd, _, errno := unix.RawSyscall6(unix.SYS_ACCEPT4, uintptr(lfd), uintptr(unsafe.Pointer(&rsa)),
		uintptr(unsafe.Pointer(&n)), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
	if errno != 0 {
		return -1, netip.AddrPort{}, errno
	}
	return int(fd), rawAddrPort(&rsa), nil
}

// rawAddrPort decodes an IPv4 or IPv6 socket address; any other is the zero
// AddrPort, as sockaddrAddrPort answers.
func rawAddrPort(rsa *unix.RawSockaddrAny) netip.AddrPort {
	switch rsa.Addr.Family {
	case unix.AF_INET:
		a := (*unix.RawSockaddrInet4)(unsafe.Pointer(rsa))
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&a.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), port)
	case unix.AF_INET6:
		a := (*unix.RawSockaddrInet6)(unsafe.Pointer(rsa))
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&a.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), port)
	}
	return netip.AddrPort{}
}
