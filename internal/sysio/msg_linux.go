package sysio

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Recvmsg is recvmsg(2) of one buffer and its control data, with flags and
// MSG_DONTWAIT, without the sender's address: a connected socketpair's
// sender is known.
func Recvmsg(fd int, p, oob []byte, flags int) (n, oobn, recvflags int, err error) {
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

// Sendmsg is sendmsg(2) of one buffer and its control data to the
// connected peer, with flags and MSG_DONTWAIT.
func Sendmsg(fd int, p, oob []byte, flags int) error {
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

// Mmsghdr is one message of Sendmmsg and Recvmmsg: struct mmsghdr.
type Mmsghdr struct {
	Hdr unix.Msghdr
	Len uint32 // bytes sent or received, set by the kernel
}

// Sendmmsg is sendmmsg(2) of msgs to the connected peer, with flags and
// MSG_DONTWAIT: the messages in order, in one call, as many as the socket
// takes. It returns how many were sent (at least one), or the error of the
// first.
func Sendmmsg(fd int, msgs []Mmsghdr, flags int) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	r, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)),
		uintptr(flags|unix.MSG_DONTWAIT), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// Recvmmsg is recvmmsg(2) into msgs, with flags and MSG_DONTWAIT: the
// datagrams already queued, in order, as many as msgs holds. It returns how
// many it received (at least one), or the error of the first.
func Recvmmsg(fd int, msgs []Mmsghdr, flags int) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	r, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)),
		uintptr(flags|unix.MSG_DONTWAIT), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}
