package ipc

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The channel's calls are made without the runtime's system-call
// bookkeeping: every one passes MSG_DONTWAIT and so never blocks, and a call
// counted as blocking wakes the runtime's monitor from its deep sleep and
// lets it hand the caller's processor to another thread when the call
// outlasts its 20 µs tick (a worker has one processor; the dispatcher's
// loop runs on one).

// recvmsg is recvmsg(2) without the sender's address: unix.Recvmsg decodes
// it into a Sockaddr, a heap allocation per frame, and a connected
// socketpair's sender is known anyway. flags must include MSG_DONTWAIT.
func recvmsg(fd int, p, oob []byte, flags int) (n, oobn, recvflags int, err error) {
	var iov unix.Iovec
	if len(p) > 0 {
		iov.Base = &p[0]
		iov.SetLen(len(p))
	}
	var msg unix.Msghdr
	msg.Iov = &iov
	msg.SetIovlen(1)
	if len(oob) > 0 {
		msg.Control = &oob[0]
		msg.SetControllen(len(oob))
	}
	r, _, e := unix.RawSyscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), uintptr(flags|unix.MSG_DONTWAIT))
	if e != 0 {
		return 0, 0, 0, e
	}
	return int(r), int(msg.Controllen), int(msg.Flags), nil
}

// sendmsg is sendmsg(2) to the connected peer. flags must include
// MSG_DONTWAIT.
func sendmsg(fd int, p, oob []byte, flags int) error {
	var iov unix.Iovec
	if len(p) > 0 {
		iov.Base = &p[0]
		iov.SetLen(len(p))
	}
	var msg unix.Msghdr
	msg.Iov = &iov
	msg.SetIovlen(1)
	if len(oob) > 0 {
		msg.Control = &oob[0]
		msg.SetControllen(len(oob))
	}
	_, _, e := unix.RawSyscall(unix.SYS_SENDMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), uintptr(flags|unix.MSG_DONTWAIT))
	if e != 0 {
		return e
	}
	return nil
}
