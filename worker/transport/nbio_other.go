//go:build !linux

package transport

import "golang.org/x/sys/unix"

// readNB, writeNB, sendNB and Peek are read(2), write(2), a gathering
// send and a peek on a non-blocking socket.
func readNB(fd int, p []byte) (int, error) {
	n, err := unix.Read(fd, p)
	if err != nil {
		return 0, err
	}
	return n, nil
}

func writeNB(fd int, p []byte) (int, error) {
	n, err := unix.Write(fd, p)
	if err != nil {
		return 0, err
	}
	return n, nil
}

// sendNB sends a then b in one sendmsg(2). MSG_MORE is Linux's; here a
// segment that is not full leaves at once.
func sendNB(fd int, a, b []byte, _ bool) (int, error) {
	bufs := [][]byte{a, b}
	if len(b) == 0 {
		bufs = bufs[:1]
	}
	return unix.SendmsgBuffers(fd, bufs, nil, nil, 0)
}

// Peek is recv(2) with MSG_PEEK on a non-blocking socket.
func Peek(fd int, p []byte) (int, error) {
	n, _, _, _, err := unix.Recvmsg(fd, p, nil, unix.MSG_PEEK|unix.MSG_DONTWAIT)
	if err != nil {
		return 0, err
	}
	return n, nil
}
