//go:build unix && !linux

package ipc

import "golang.org/x/sys/unix"

// recvmsg is recvmsg(2); the sender's address is dropped.
func recvmsg(fd int, p, oob []byte, flags int) (n, oobn, recvflags int, err error) {
	n, oobn, recvflags, _, err = unix.Recvmsg(fd, p, oob, flags)
	return n, oobn, recvflags, err
}

// sendmsg is sendmsg(2) to the connected peer.
func sendmsg(fd int, p, oob []byte, flags int) error {
	_, err := unix.SendmsgN(fd, p, oob, nil, flags)
	return err
}
