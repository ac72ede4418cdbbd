//go:build !linux

package handover

import "golang.org/x/sys/unix"

// setBuffers sizes fd's buffers to size, as far as the system allows.
func setBuffers(fd, size int) {
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, size)
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, size)
}
