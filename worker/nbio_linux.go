package worker

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// readNB, writeNB and peekNB are read(2), write(2) and a peek on a
// non-blocking socket, made without the runtime's system-call bookkeeping
// since they never block. Counted as blocking, a call wakes the runtime's
// monitor from its deep sleep, and one that outlasts the monitor's 20 µs
// tick (a loopback write runs the receiver's TCP input in the writer's
// call) has the worker's one processor handed to another thread, woken for
// it, and taken back after: two context switches, and the monitor polling
// at its fastest.
func readNB(fd int, p []byte) (int, error) {
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func writeNB(fd int, p []byte) (int, error) {
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// peekNB is recv(2) with MSG_PEEK on a non-blocking socket, as recvmsg(2):
// the sandbox's filter allows it, recvfrom not.
func peekNB(fd int, p []byte) (int, error) {
	var iov unix.Iovec
	if len(p) > 0 {
		iov.Base = &p[0]
		iov.SetLen(len(p))
	}
	var msg unix.Msghdr
	msg.Iov = &iov
	msg.SetIovlen(1)
	n, _, e := unix.RawSyscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), unix.MSG_PEEK|unix.MSG_DONTWAIT)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
