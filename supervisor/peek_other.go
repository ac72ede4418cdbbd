//go:build !linux

package supervisor

import "golang.org/x/sys/unix"

// peekInput is recv(MSG_PEEK|MSG_DONTWAIT) into buf.
func peekInput(fd int, buf []byte) (int, error) {
	n, _, err := unix.Recvfrom(fd, buf, unix.MSG_PEEK|unix.MSG_DONTWAIT)
	return n, err
}
