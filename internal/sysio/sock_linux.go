package sysio

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Recv is recv(2) of up to len(buf) bytes of fd's input with flags and
// MSG_DONTWAIT. Every read the dispatcher makes on a client socket is one,
// whatever the descriptor's flags: O_NONBLOCK belongs to the open file
// description, which a worker's SCM_RIGHTS copy shares, and a worker that
// cleared it would otherwise turn the loop's next call into one that waits
// on the client (docs/DESIGN.md §2.0).
func Recv(fd int, buf []byte, flags int) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(buf))), uintptr(len(buf)),
		uintptr(flags|unix.MSG_DONTWAIT), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// Send is send(2) of p with MSG_DONTWAIT and MSG_NOSIGNAL: it writes what
// fits in the send buffer now, and a reset connection is EPIPE, not
// SIGPIPE. Every write the dispatcher makes on a client socket is one, as
// every read is a Recv.
func Send(fd int, p []byte) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)),
		unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
