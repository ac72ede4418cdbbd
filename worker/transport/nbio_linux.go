package transport

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// readNB, writeNB, sendNB and Peek are read(2), write(2), a gathering
// send and a peek on a non-blocking socket, made without the runtime's system-call bookkeeping
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

// sendNB sends a then b, in one sendmsg(2) on a non-blocking socket, with
// MSG_MORE when more: the kernel then holds a segment that is not full for
// what the next send adds. a is not empty; b may be.
func sendNB(fd int, a, b []byte, more bool) (int, error) {
	var iov [2]unix.Iovec
	iov[0].Base = &a[0]
	iov[0].SetLen(len(a))
	n := 1
	if len(b) > 0 {
		iov[1].Base = &b[0]
		iov[1].SetLen(len(b))
		n = 2
	}
	var msg unix.Msghdr
	msg.Iov = &iov[0]
	msg.SetIovlen(n)
	flags := unix.MSG_NOSIGNAL
	if more {
		flags |= unix.MSG_MORE
	}
	m, _, e := unix.RawSyscall(unix.SYS_SENDMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), uintptr(flags))
	if e != 0 {
		return 0, e
	}
	return int(m), nil
}

// Peek is recv(2) with MSG_PEEK on a non-blocking socket, as recvmsg(2):
// the sandbox's filter allows it, recvfrom not.
func Peek(fd int, p []byte) (int, error) {
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
