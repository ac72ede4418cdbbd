//go:build unix && !linux

package sysio

import "golang.org/x/sys/unix"

// Read is read(2) on a non-blocking descriptor.
func Read(fd int, p []byte) (int, error) {
	n, err := unix.Read(fd, p)
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Write is write(2) on a non-blocking descriptor.
func Write(fd int, p []byte) (int, error) {
	n, err := unix.Write(fd, p)
	if err != nil {
		return 0, err
	}
	return n, nil
}

// SendParts sends a then b in one sendmsg(2). MSG_MORE is Linux's; here a
// segment that is not full leaves at once.
func SendParts(fd int, a, b []byte, _ bool) (int, error) {
	bufs := [][]byte{a, b}
	if len(b) == 0 {
		bufs = bufs[:1]
	}
	return unix.SendmsgBuffers(fd, bufs, nil, nil, 0)
}

// Peek is recv(2) with MSG_PEEK, as recvmsg(2) (Recvmsg).
func Peek(fd int, p []byte) (int, error) {
	n, _, _, err := Recvmsg(fd, p, nil, unix.MSG_PEEK)
	return n, err
}

// Close is close(2).
func Close(fd int) error { return unix.Close(fd) }
