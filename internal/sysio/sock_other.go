//go:build unix && !linux

package sysio

import "golang.org/x/sys/unix"

// Recv is recv(2) of up to len(buf) bytes of fd's input with flags and
// MSG_DONTWAIT, which holds whatever the descriptor's flags.
func Recv(fd int, buf []byte, flags int) (int, error) {
	n, _, err := unix.Recvfrom(fd, buf, flags|unix.MSG_DONTWAIT)
	return n, err
}

// Send is send(2) of p with MSG_DONTWAIT and MSG_NOSIGNAL.
func Send(fd int, p []byte) (int, error) {
	return unix.SendmsgN(fd, p, nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
}
