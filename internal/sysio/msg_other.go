//go:build unix && !linux

package sysio

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Recvmsg is recvmsg(2) with flags and MSG_DONTWAIT; the sender's address
// is dropped.
func Recvmsg(fd int, p, oob []byte, flags int) (n, oobn, recvflags int, err error) {
	n, oobn, recvflags, _, err = unix.Recvmsg(fd, p, oob, flags|unix.MSG_DONTWAIT)
	return n, oobn, recvflags, err
}

// Sendmsg is sendmsg(2) to the connected peer with flags and MSG_DONTWAIT.
func Sendmsg(fd int, p, oob []byte, flags int) error {
	_, err := unix.SendmsgN(fd, p, oob, nil, flags|unix.MSG_DONTWAIT)
	return err
}

// Mmsghdr is one message of Sendmmsg and Recvmmsg.
type Mmsghdr struct {
	Hdr unix.Msghdr
	Len uint32
}

// Sendmmsg sends msgs in order with one sendmsg(2) each, Linux's
// sendmmsg(2) being its own: as many as the socket takes, or the error of
// the first.
func Sendmmsg(fd int, msgs []Mmsghdr, flags int) (int, error) {
	for i := range msgs {
		_, _, e := unix.Syscall(unix.SYS_SENDMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[i].Hdr)), uintptr(flags|unix.MSG_DONTWAIT))
		if e != 0 {
			if i > 0 {
				return i, nil
			}
			return 0, e
		}
	}
	return len(msgs), nil
}

// Recvmmsg receives one datagram into msgs[0] with recvmsg(2) (Linux's
// recvmmsg(2) being its own); it returns 1, or the error.
func Recvmmsg(fd int, msgs []Mmsghdr, flags int) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	r, _, e := unix.Syscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0].Hdr)), uintptr(flags|unix.MSG_DONTWAIT))
	if e != 0 {
		return 0, e
	}
	msgs[0].Len = uint32(r)
	return 1, nil
}
