//go:build unix && !linux

package sysio

import "golang.org/x/sys/unix"

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
