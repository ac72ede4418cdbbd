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

// deferAcceptSeconds is TCP_DEFER_ACCEPT's wait: the kernel holds a
// connection whose client has sent nothing for about this long (it becomes
// the number of SYN-ACK retransmissions to wait through, here one, after 1
// s) before it queues the connection for accept anyway. One second keeps a
// silent connection's wait within the first-byte timeout's order (nginx's
// "deferred" and HAProxy's "defer-accept" wait as long).
const deferAcceptSeconds = 1

// SetDeferAccept asks the kernel to queue a listening socket's connections
// for accept only once their first bytes have arrived (TCP_DEFER_ACCEPT),
// so that the dispatcher, when it accepts one, finds its head (or
// ClientHello) already there and can look at it and dispatch it in the same
// wake-up, without registering it with the poller (docs/DESIGN.md §2.2). It
// reports whether the socket defers.
func SetDeferAccept(fd int) bool {
	return unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, deferAcceptSeconds) == nil
}
